// An outside program that uses fsdp-cpp as an installed library: two ranks of the threads backend
// all-reduce, and an environment error is caught as an fsdp::Error. Prints "consumer ok".
#include <fmt/format.h>
#include <fsdp/comm/registry.h>
#include <fsdp/comm/threads/run_ranks.h>
#include <fsdp/core/error.h>

#include <cstdlib>
#include <vector>

int main() {
  std::vector<float> sums(2);
  fsdp::comm::run_ranks(2, [&](std::shared_ptr<fsdp::comm::ProcessGroup> pg) {
    float v = float(pg->rank() + 1);
    pg->all_reduce(&v, 1, fsdp::DType::Float32);
    sums[std::size_t(pg->rank())] = v;
  });
  setenv("WORLD_SIZE", "0", 1);
  bool caught = false;
  try {
    fsdp::comm::options_from_env();
  } catch (const fsdp::Error& e) {  // one root for every layer's errors
    caught = true;
  }
  const bool ok = sums[0] == 3.0f && sums[1] == 3.0f && caught;
  fmt::print("consumer {}\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
