// Gloo backend vs gloo's own algorithms (gloo::allgather ring, gloo::allreduce ring,
// ReduceScatterHalvingDoubling constructed once per size) on a second gloo context, and memcpy.
//   tests/comm/run_ranks.sh mpirun 2 file bench_comm_gloo --max-size 64M --json gloo.json
#include <fmt/format.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#include "bench/comm/bench_common.h"
#include "comm/registry.h"

using namespace fsdp::comm;
using namespace fsdp::comm::bench;

namespace {

int run_bench(const ::fsdp::bench::Cli& cli, Args& args) {
  finish(args);
  InitOptions o = options_from_env();
  if (o.file_store_path.empty())
    throw std::invalid_argument(
        "set FSDP_STORE_PATH to a directory shared by the ranks (tests/comm/run_ranks.sh does)");
  auto pg = create_process_group("gloo", o);
  const int n = pg->size();
  auto sizes = sweep(args);
  std::vector<Result> results;

  gloo::rendezvous::FileStore file_store(o.file_store_path);
  gloo::rendezvous::PrefixStore store("raw-gloo", file_store);
  auto device = gloo::transport::tcp::CreateDevice("127.0.0.1");
  auto ctx = std::make_shared<gloo::rendezvous::Context>(pg->rank(), n);
  ctx->setTimeout(o.timeout);
  try {
    ctx->connectFullMesh(store, device);
  } catch (const std::exception& e) {
    throw std::runtime_error(
        fmt::format("raw gloo rendezvous (the baseline) failed: {}", e.what()));
  }
  for (std::size_t bytes : sizes) {
    Buffers b(bytes, n);
    const std::size_t total = b.total_count * 4;
    gloo::ReduceScatterHalvingDoubling<float> rs(
        ctx, {b.full.data()}, int(b.total_count),
        std::vector<int>(std::size_t(n), int(b.shard_count)));
    // Correctness probe (is the legacy class right at this world size?): rank r holds r+1.
    std::fill(b.full.begin(), b.full.end(), float(pg->rank() + 1));
    rs.run();
    const float want = float(n * (n + 1) / 2);
    bool rs_ok = std::all_of(b.full.begin(), b.full.begin() + std::ptrdiff_t(b.shard_count),
                             [&](float v) { return v == want; });
    pg->all_reduce(&rs_ok, 1, fsdp::DType::Bool, ReduceOp::Min);
    if (!rs_ok && pg->rank() == 0)
      std::printf("ReduceScatterHalvingDoubling gave WRONG results at %d ranks, %zu bytes\n", n,
                  total);
    std::vector<Contender> contenders = our_contenders(*pg, b);
    contenders.push_back({Kind::AllGather, "gloo::allgather(ring)", [&] {
                            gloo::AllgatherOptions opts(ctx);
                            opts.setInput(b.shard.data(), b.shard_count);
                            opts.setOutput(b.full.data(), b.total_count);
                            gloo::allgather(opts);
                          }});
    contenders.push_back({Kind::ReduceScatter, "gloo::ReduceScatterHD", [&] { rs.run(); }});
    contenders.push_back(
        {Kind::AllReduce, "gloo::allreduce(ring)", [&] {
           gloo::AllreduceOptions opts(ctx);
           opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
           opts.setOutput(b.full.data(), b.total_count);
           opts.setReduceFunction(
               static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
           gloo::allreduce(opts);
         }});
    auto timed = time_contenders(*pg, "gloo", total, contenders, args.rounds);
    results.insert(results.end(), timed.begin(), timed.end());
  }
  if (pg->rank() == 0) {
    auto copies = bench_memcpy("gloo", n, sizes, args.rounds);
    results.insert(results.end(), copies.begin(), copies.end());
    std::printf("gloo backend, %d ranks\n", n);
    report(results, cli);
  }
  pg->barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ::fsdp::bench::Cli cli("bench_comm_gloo", "gloo backend vs raw gloo");
  Args args;
  add_flags(cli, args, false);
  if (const int rc = cli.parse(argc, argv); rc >= 0) return rc;
  return ::fsdp::bench::run_main(cli.program(), [&] { return run_bench(cli, args); });
}
