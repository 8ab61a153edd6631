// Seeded random numbers. A generator's state is (seed, counter), so it can be saved and restored
// exactly (dropout under activation checkpointing replays its mask this way). The default
// generator is per thread: each rank running as a thread has its own stream.
#pragma once

#include <cstdint>

namespace fsdp {

class Generator {
 public:
  struct State {
    std::uint64_t seed = 0;
    std::uint64_t counter = 0;
    friend bool operator==(const State&, const State&) = default;
  };

  explicit Generator(std::uint64_t seed = 67280421310721ULL) { manual_seed(seed); }
  void manual_seed(std::uint64_t seed) { state_ = {seed, 0}; }
  std::uint64_t initial_seed() const { return state_.seed; }
  State get_state() const { return state_; }
  void set_state(const State& s) { state_ = s; }

  std::uint64_t next_u64() {  // splitmix64 over a counter: stateless per draw, fast
    std::uint64_t z = state_.seed + 0x9E3779B97F4A7C15ULL * (++state_.counter);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }  // [0, 1)
  double normal();  // standard normal (Box-Muller)

 private:
  State state_;
};

Generator& default_generator();  // this thread's
void manual_seed(std::uint64_t seed);

}  // namespace fsdp
