// MPI backend vs the raw Open MPI collectives on the same buffers, and vs memcpy.
//   mpirun -np 2 bench_comm_mpi --max-size 256M --json mpi.json
#include <mpi.h>

#include "bench/comm/bench_common.h"
#include "comm/registry.h"

using namespace fsdp::comm;
using namespace fsdp::comm::bench;

int main(int argc, char** argv) {
  Args args = Args::parse(argc, argv, "bench_comm_mpi: mpi backend vs raw MPI (run by mpirun)");
  auto pg = init_process_group("mpi");  // initialises MPI
  const int n = pg->size();
  auto sizes = sweep(args);
  std::vector<Result> results = bench_ours(*pg, sizes);
  for (std::size_t bytes : sizes) {
    Buffers b(bytes, n);
    const std::size_t total = b.total_count * 4;
    const int iters = iterations_for(total);
    const int count = int(b.shard_count);
    auto add = [&](Kind k, const char* impl, double s) {
      results.push_back({"mpi", impl, k, n, total, s});
    };
    add(Kind::AllGather, "MPI_Allgather", time_collective(*pg, iters, [&] {
          MPI_Allgather(b.shard.data(), count, MPI_FLOAT, b.full.data(), count, MPI_FLOAT,
                        MPI_COMM_WORLD);
        }));
    add(Kind::ReduceScatter, "MPI_Reduce_scatter_block", time_collective(*pg, iters, [&] {
          MPI_Reduce_scatter_block(b.full.data(), b.shard.data(), count, MPI_FLOAT, MPI_SUM,
                                   MPI_COMM_WORLD);
        }));
    add(Kind::AllReduce, "MPI_Allreduce", time_collective(*pg, iters, [&] {
          MPI_Allreduce(MPI_IN_PLACE, b.full.data(), int(b.total_count), MPI_FLOAT, MPI_SUM,
                        MPI_COMM_WORLD);
        }));
  }
  if (pg->rank() == 0) {
    auto copies = bench_memcpy("mpi", n, sizes);
    results.insert(results.end(), copies.begin(), copies.end());
    std::printf("mpi backend, %d ranks\n", n);
    report(results, args);
  }
  pg->barrier();
}
