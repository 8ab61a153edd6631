// MPI backend vs the raw Open MPI collectives on the same buffers, and vs memcpy.
//   mpirun -np 2 bench_comm_mpi --max-size 256M --json mpi.json
#include <mpi.h>

#include "bench/comm/bench_common.h"
#include "comm/registry.h"

using namespace fsdp::comm;
using namespace fsdp::comm::bench;

namespace {

int run_bench(const ::fsdp::bench::Cli& cli, Args& args) {
  finish(args);
  auto pg = init_process_group("mpi");  // initialises MPI
  const int n = pg->size();
  auto sizes = sweep(args);
  std::vector<Result> results;
  for (std::size_t bytes : sizes) {
    Buffers b(bytes, n);
    const int count = int(b.shard_count);
    std::vector<Contender> contenders = our_contenders(*pg, b);
    contenders.push_back({Kind::AllGather, "MPI_Allgather", [&] {
                            MPI_Allgather(b.shard.data(), count, MPI_FLOAT, b.full.data(), count,
                                          MPI_FLOAT, MPI_COMM_WORLD);
                          }});
    contenders.push_back({Kind::ReduceScatter, "MPI_Reduce_scatter_block", [&] {
                            MPI_Reduce_scatter_block(b.full.data(), b.shard.data(), count,
                                                     MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
                          }});
    contenders.push_back({Kind::AllReduce, "MPI_Allreduce", [&] {
                            MPI_Allreduce(MPI_IN_PLACE, b.full.data(), int(b.total_count),
                                          MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
                          }});
    auto timed = time_contenders(*pg, "mpi", b.total_count * 4, contenders, args.rounds);
    results.insert(results.end(), timed.begin(), timed.end());
  }
  if (pg->rank() == 0) {
    auto copies = bench_memcpy("mpi", n, sizes, args.rounds);
    results.insert(results.end(), copies.begin(), copies.end());
    std::printf("mpi backend, %d ranks\n", n);
    report(results, cli);
  }
  pg->barrier();
  return 0;
}

}  // namespace

// A comm error ends this rank with the message; the mpi backend then ends the job within its
// timeout (a failed group makes MPI_Finalize give up), so the other ranks do not hang.
int main(int argc, char** argv) {
  ::fsdp::bench::Cli cli("bench_comm_mpi", "mpi backend vs raw MPI (run by mpirun)");
  Args args;
  add_flags(cli, args, false);
  if (const int rc = cli.parse(argc, argv); rc >= 0) return rc;
  return ::fsdp::bench::run_main(cli.program(), [&] { return run_bench(cli, args); });
}
