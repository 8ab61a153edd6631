// Threads backend collectives vs a single-core memcpy of the same bytes.
//   bench_comm_threads --ranks 2 --max-size 256M --json threads.json
#include <mutex>

#include "bench/comm/bench_common.h"
#include "comm/threads/run_ranks.h"

using namespace fsdp::comm;
using namespace fsdp::comm::bench;

namespace {

int run_bench(const ::fsdp::bench::Cli& cli, Args& args) {
  finish(args);
  auto sizes = sweep(args);
  std::vector<Result> results = bench_memcpy("threads", args.ranks, sizes, args.rounds);
  std::mutex mutex;
  run_ranks(args.ranks, [&](std::shared_ptr<ProcessGroup> pg) {
    for (std::size_t bytes : sizes) {
      Buffers b(bytes, pg->size());
      auto ours = time_contenders(*pg, pg->backend_name(), b.total_count * 4,
                                  our_contenders(*pg, b), args.rounds);
      if (pg->rank() != 0) continue;
      std::lock_guard lock(mutex);
      results.insert(results.end(), ours.begin(), ours.end());
    }
  });
  std::printf("threads backend, %d ranks\n", args.ranks);
  report(results, cli);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ::fsdp::bench::Cli cli("bench_comm_threads", "threads backend vs memcpy");
  Args args;
  add_flags(cli, args, true);
  if (const int rc = cli.parse(argc, argv); rc >= 0) return rc;
  return ::fsdp::bench::run_main(cli.program(), [&] { return run_bench(cli, args); });
}
