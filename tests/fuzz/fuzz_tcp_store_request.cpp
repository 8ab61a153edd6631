// libFuzzer target: the TcpStore request parser (what rank 0's server reads from any client).
// Checks: a parsed request re-encodes to the bytes it came from; nothing reads past the input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "comm/store/tcp_store_protocol.h"

namespace wire = fsdp::comm::tcp_store_protocol;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  std::string_view rest = bytes;
  for (;;) {  // a stream of requests, as one connection carries
    wire::Request r;
    const auto res = wire::parse_request(rest, r);
    if (res.status != wire::ParseStatus::Complete) break;
    if (wire::encode_request(r) != rest.substr(0, res.consumed)) std::abort();
    rest.remove_prefix(res.consumed);
  }
  return 0;
}
