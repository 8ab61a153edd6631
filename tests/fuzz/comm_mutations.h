// Deterministic byte mutations for the comm fuzz tests (and seeds for the libFuzzer targets):
// the same seed gives the same mutants on every machine, so a failure reproduces exactly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fsdp::comm::fuzz {

// splitmix64: small, fast, identical everywhere.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::size_t below(std::size_t n) { return n == 0 ? 0 : std::size_t(next() % n); }

 private:
  std::uint64_t state_;
};

// One to four edits of `input`: bit flips, byte overwrites (random or boundary values), 32-bit
// length fields overwritten with boundary values, insertions, deletions, duplicated ranges,
// truncation, or `other` spliced in.
std::string mutate(const std::string& input, const std::string& other, Rng& rng);

// Valid TcpStore requests and replies, encoded (the seed corpus).
std::vector<std::string> tcp_store_request_seeds();
std::vector<std::string> tcp_store_reply_seeds();

}  // namespace fsdp::comm::fuzz
