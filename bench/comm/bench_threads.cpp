// Threads backend collectives vs a single-core memcpy of the same bytes.
//   bench_comm_threads --ranks 2 --max-size 256M --json threads.json
#include <mutex>

#include "bench/comm/bench_common.h"
#include "comm/threads/run_threads.h"

using namespace fsdp::comm;
using namespace fsdp::comm::bench;

namespace {

int run_bench(int argc, char** argv) {
  Args args = Args::parse(argc, argv, "bench_comm_threads: threads backend vs memcpy");
  auto sizes = sweep(args);
  std::vector<Result> results = bench_memcpy("threads", args.ranks, sizes);
  std::mutex mutex;
  run_threads(args.ranks, [&](ProcessGroup& pg) {
    for (std::size_t bytes : sizes) {
      Buffers b(bytes, pg.size());
      auto ours = time_contenders(pg, pg.backend_name(), b.total_count * 4, our_contenders(pg, b));
      if (pg.rank() != 0) continue;
      std::lock_guard lock(mutex);
      results.insert(results.end(), ours.begin(), ours.end());
    }
  });
  std::printf("threads backend, %d ranks\n", args.ranks);
  report(results, args);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return run_main("bench_comm_threads", [&] { return run_bench(argc, argv); });
}
