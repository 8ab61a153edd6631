// libFuzzer target: the TcpStore reply parser (what every rank reads from rank 0's server).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "comm/store/tcp_store_protocol.h"

namespace wire = fsdp::comm::tcp_store_protocol;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  wire::Reply r;
  const auto res = wire::parse_reply(bytes, r);
  if (res.status == wire::ParseStatus::Complete &&
      wire::encode_reply(r) != bytes.substr(0, res.consumed))
    std::abort();
  if (res.status == wire::ParseStatus::NeedMore && res.needed != 0 && res.needed <= size)
    std::abort();
  return 0;
}
