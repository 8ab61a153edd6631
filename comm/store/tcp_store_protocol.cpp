#include "comm/store/tcp_store_protocol.h"

#include <fmt/format.h>

#include "core/error.h"

namespace fsdp::comm::tcp_store_protocol {

namespace {

void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint32_t get_u32(std::string_view bytes, std::size_t at) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= std::uint32_t(static_cast<unsigned char>(bytes[at + std::size_t(i)])) << (8 * i);
  return v;
}

ParseResult invalid(std::string why) {
  return {ParseStatus::Invalid, 0, 0, std::move(why)};
}
ParseResult need(std::size_t total) {
  return {ParseStatus::NeedMore, 0, total, {}};
}

}  // namespace

std::string encode_request(const Request& request) {
  if (request.key.size() > kMaxKeyBytes || request.value.size() > kMaxValueBytes)
    throw ValueError(fmt::format(
        "tcp store: key '{}' ({} bytes) or its value ({} bytes) is above the limit ({} bytes for "
        "a key, {} for a value)",
        request.key.substr(0, 100), request.key.size(), request.value.size(), kMaxKeyBytes,
        kMaxValueBytes));
  std::string out;
  out.reserve(9 + request.key.size() + request.value.size());
  out.push_back(request.op);
  put_u32(out, std::uint32_t(request.key.size()));
  out += request.key;
  put_u32(out, std::uint32_t(request.value.size()));
  out += request.value;
  return out;
}

std::string encode_reply(const Reply& reply) {
  std::string out;
  out.push_back(reply.status);
  put_u32(out, std::uint32_t(reply.data.size()));
  out += reply.data;
  return out;
}

ParseResult parse_request(std::string_view bytes, Request& out) {
  if (bytes.empty()) return {};
  const char op = bytes[0];
  if (op != kSet && op != kGet && op != kCheck && op != kHello)
    return invalid(fmt::format("unknown request type {:#04x}", static_cast<unsigned char>(op)));
  if (bytes.size() < 5) return {};
  const std::uint32_t key_len = get_u32(bytes, 1);
  if (key_len > kMaxKeyBytes)
    return invalid(fmt::format("key length {} above the limit {}", key_len, kMaxKeyBytes));
  const std::size_t value_at = 5 + std::size_t(key_len);
  if (bytes.size() < value_at + 4) return {};
  const std::uint32_t value_len = get_u32(bytes, value_at);
  if (value_len > kMaxValueBytes)
    return invalid(fmt::format("value length {} above the limit {}", value_len, kMaxValueBytes));
  if (op != kSet && value_len != 0)
    return invalid(fmt::format("a {} request carries a value", op == kGet     ? "get"
                                                               : op == kCheck ? "check"
                                                                              : "hello"));
  const std::size_t end = value_at + 4 + std::size_t(value_len);
  if (bytes.size() < end) return need(end);
  out.op = op;
  out.key.assign(bytes.substr(5, key_len));
  out.value.assign(bytes.substr(value_at + 4, value_len));
  return {ParseStatus::Complete, end, 0, {}};
}

ParseResult parse_reply(std::string_view bytes, Reply& out) {
  if (bytes.size() < kReplyHeaderBytes) return {};
  const std::uint32_t len = get_u32(bytes, 1);
  if (len > kMaxValueBytes)
    return invalid(fmt::format("reply length {} above the limit {}", len, kMaxValueBytes));
  const std::size_t end = kReplyHeaderBytes + std::size_t(len);
  if (bytes.size() < end) return need(end);
  out.status = bytes[0];
  out.data.assign(bytes.substr(kReplyHeaderBytes, len));
  return {ParseStatus::Complete, end, 0, {}};
}

}  // namespace fsdp::comm::tcp_store_protocol
