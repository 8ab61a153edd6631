// The TcpStore wire format, apart from the sockets so that it is tested and fuzzed on bytes
// (tests/fuzz/). A request: op (1 byte: 'S' set, 'G' get, 'C' check, 'H' hello), key length (4
// bytes, little endian), key, value length (4 bytes), value. A reply: status (1 byte), length (4
// bytes), data. A client's first request is a hello whose key is kHelloMagic, answered with the
// same bytes: a port held by another program is told apart from a store that is slow to answer.
// A length above its limit is refused as soon as its 4 bytes arrive, before anything is
// allocated: a stray or hostile client cannot make rank 0 allocate gigabytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fsdp::comm::tcp_store_protocol {

inline constexpr char kSet = 'S', kGet = 'G', kCheck = 'C', kHello = 'H';
inline constexpr std::string_view kHelloMagic = "fsdp-cpp tcp store 1";
inline constexpr std::uint32_t kMaxKeyBytes = std::uint32_t(64) << 10;
inline constexpr std::uint32_t kMaxValueBytes = std::uint32_t(256) << 20;
inline constexpr std::size_t kReplyHeaderBytes = 5;

struct Request {
  char op = kGet;
  std::string key;
  std::string value;
  friend bool operator==(const Request&, const Request&) = default;
};

struct Reply {
  char status = 0;  // check: 1 present, 0 absent; otherwise 0
  std::string data;
};

enum class ParseStatus { Complete, NeedMore, Invalid };

struct ParseResult {
  ParseStatus status = ParseStatus::NeedMore;
  std::size_t consumed = 0;  // bytes of the input the parsed message took (Complete only)
  std::size_t needed = 0;    // NeedMore: the whole message's size, once its lengths are known
  std::string error;         // why the bytes are not a message (Invalid only)
};

// Throws fsdp::ValueError naming the key when the key or value is above its limit.
std::string encode_request(const Request& request);
std::string encode_reply(const Reply& reply);

// Parses one message from the front of `bytes`: Complete (out is filled), NeedMore (a prefix of
// a valid message) or Invalid (an unknown op, a length above its limit). Never reads past
// `bytes`, never allocates more than the limits.
ParseResult parse_request(std::string_view bytes, Request& out);
ParseResult parse_reply(std::string_view bytes, Reply& out);

}  // namespace fsdp::comm::tcp_store_protocol
