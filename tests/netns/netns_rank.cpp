// One rank of a job that the tests in this folder run across network namespaces and cut off.
// init_from_env() makes the group (FSDP_BACKEND: gloo or mpi). After a first all_reduce, which
// proves every rank is connected, it writes "rank R: ready (pid P)" and then all-reduces
// 256 KiB until --seconds pass (default 120). An error ends it with "rank R: error after S s
// (unix time T ms): <message>" on stderr (T: when it was caught, for the time from a fault) and
// exit code 1; the normal end writes "rank R: done" and exits 0.
//   netns_rank [--seconds S]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "comm/registry.h"

using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  double seconds = 120;
  if (argc == 3 && std::string(argv[1]) == "--seconds") seconds = std::atof(argv[2]);
  int rank = -1;
  const auto start = Clock::now();
  Clock::time_point ready_at = start;
  try {
    auto pg = fsdp::comm::init_from_env();
    rank = pg->rank();
    std::vector<float> data(64 << 10, 1.0f);
    pg->all_reduce(data.data(), data.size(), fsdp::DType::Float32);
    std::printf("rank %d: ready (pid %d)\n", rank, int(::getpid()));
    std::fflush(stdout);
    ready_at = Clock::now();
    while (std::chrono::duration<double>(Clock::now() - ready_at).count() < seconds)
      pg->all_reduce(data.data(), data.size(), fsdp::DType::Float32, fsdp::comm::ReduceOp::Max);
    std::printf("rank %d: done\n", rank);
    return 0;
  } catch (const std::exception& e) {
    const auto unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::system_clock::now().time_since_epoch());
    std::fprintf(stderr, "rank %d: error after %.1f s (unix time %lld ms): %s\n", rank,
                 std::chrono::duration<double>(Clock::now() - ready_at).count(),
                 static_cast<long long>(unix_ms.count()), e.what());
    return 1;
  }
}
