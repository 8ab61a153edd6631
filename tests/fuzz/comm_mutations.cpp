#include "tests/fuzz/comm_mutations.h"

#include <algorithm>

#include "comm/store/tcp_store_protocol.h"

namespace fsdp::comm::fuzz {

namespace wire = tcp_store_protocol;

std::string mutate(const std::string& input, const std::string& other, Rng& rng) {
  static const std::uint32_t kBoundaries[] = {0,
                                              1,
                                              4,
                                              0x7f,
                                              0x80,
                                              0xff,
                                              0xffff,
                                              wire::kMaxKeyBytes,
                                              wire::kMaxKeyBytes + 1,
                                              wire::kMaxValueBytes,
                                              wire::kMaxValueBytes + 1,
                                              0x7fffffff,
                                              0xffffffff};
  static const char kBytes[] = {0, 1, '\x7f', '\x80', '\xff', 'S', 'G', 'C', '/'};
  std::string s = input;
  const std::size_t edits = 1 + rng.below(4);
  for (std::size_t e = 0; e < edits; ++e) {
    const std::size_t at = rng.below(s.size() + 1);
    switch (rng.below(9)) {
      case 0:  // flip a bit
        if (!s.empty()) s[at % s.size()] ^= char(1 << rng.below(8));
        break;
      case 1:  // a random byte
        if (!s.empty()) s[at % s.size()] = char(rng.next());
        break;
      case 2:  // a boundary byte
        if (!s.empty()) s[at % s.size()] = kBytes[rng.below(sizeof kBytes)];
        break;
      case 3: {  // a boundary 32-bit length, little endian
        const std::uint32_t v = kBoundaries[rng.below(std::size(kBoundaries))];
        for (int i = 0; i < 4; ++i)
          if (at + std::size_t(i) < s.size()) s[at + std::size_t(i)] = char((v >> (8 * i)) & 0xff);
        break;
      }
      case 4:  // insert random bytes
        s.insert(at, std::string(1 + rng.below(8), char(rng.next())));
        break;
      case 5:  // delete a range
        s.erase(at, rng.below(8) + 1);
        break;
      case 6:  // duplicate a range
        s.insert(at, s.substr(rng.below(s.size() + 1), rng.below(16)));
        break;
      case 7:  // truncate
        s.resize(rng.below(s.size() + 1));
        break;
      default:  // splice another input in
        s = s.substr(0, at) + other.substr(rng.below(other.size() + 1));
        break;
    }
  }
  return s;
}

std::vector<std::string> tcp_store_request_seeds() {
  const std::string binary("\0\x01\xff\x80 value", 10);
  std::vector<std::string> seeds;
  for (const wire::Request& r :
       {wire::Request{wire::kSet, "world/0", "10.77.0.1:41817"},
        wire::Request{wire::kGet, "world/1", ""}, wire::Request{wire::kCheck, "job/key", ""},
        wire::Request{wire::kSet, "", ""}, wire::Request{wire::kSet, "nccl_unique_id", binary},
        wire::Request{wire::kGet, std::string(300, 'k'), ""}})
    seeds.push_back(wire::encode_request(r));
  seeds.push_back(seeds[0] + seeds[1] + seeds[2]);  // several requests on one connection
  return seeds;
}

std::vector<std::string> tcp_store_reply_seeds() {
  return {wire::encode_reply({0, ""}), wire::encode_reply({1, ""}),
          wire::encode_reply({0, "10.77.0.2:50211"}),
          wire::encode_reply({0, std::string(1000, 'x')})};
}

}  // namespace fsdp::comm::fuzz
