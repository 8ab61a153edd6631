// The threads backend on CUDA buffers: ranks as threads sharing cuda:0, each on its own stream
// (FULL_SHARD on one GPU, where NCCL refuses two ranks). Every collective, every dtype and op, at
// world 2 and 4 and odd sizes, gives the bytes the same group gives on cpu buffers (the same
// reduction semantics, comm/reduce_op.h); a collective waits for the work queued before it on its
// stream and on its peers' streams without holding the host; block_stream orders another stream
// after it. Exit 77 without a device.
#define BOOST_TEST_MODULE gpu_threads_collectives
#include <fmt/format.h>

#include <boost/test/unit_test.hpp>
#include <cstring>
#include <latch>
#include <mutex>
#include <random>

#include "comm/threads/run_ranks.h"
#include "core/cuda/kernels.h"
#include "core/device_copy.h"
#include "core/memory.h"
#include "core/native_stream.h"
#include "core/stream.h"
#include "tests/comm/collective_checks.h"
#include "tests/gpu/gpu_test_support.h"
#include "tests/support/gate.h"

using namespace fsdp;
using namespace fsdp::comm;
using fsdp::comm::testing::Bytes;

using fsdp::cuda::testing::RequireDevice;
BOOST_TEST_GLOBAL_FIXTURE(RequireDevice);

namespace {

const Device kGpu(DeviceType::CUDA, 0);

std::unique_ptr<Storage> to_device(const Bytes& bytes) {
  auto s = std::make_unique<Storage>(std::max<std::size_t>(bytes.size(), 1), kGpu);
  copy_bytes(s->data(), kGpu, bytes.data(), kCPU, bytes.size());
  return s;
}

// After the current stream's work (the copy to the host waits for it).
Bytes to_host(const void* ptr, std::size_t nbytes) {
  Bytes out(nbytes);
  copy_bytes(out.data(), kCPU, ptr, kGpu, nbytes);
  return out;
}

// Floats drawn at random (rounding in every sum), integers and bools as the cpu tests' inputs.
Bytes input(DType dtype, std::size_t count, int rank, int salt) {
  if (!is_floating(dtype)) return fsdp::comm::testing::make_input(dtype, count, rank, salt);
  std::mt19937_64 rng(std::uint64_t(rank) * 1000003u + std::uint64_t(salt));
  std::normal_distribution<float> normal(0.0f, 3.0f);
  Bytes b(count * dtype_size(dtype));
  for (std::size_t i = 0; i < count; ++i) {
    const float v = normal(rng);
    switch (dtype) {
      case DType::Float32:
        std::memcpy(b.data() + 4 * i, &v, 4);
        break;
      case DType::Float64: {
        const double d = double(v) / 7.0;
        std::memcpy(b.data() + 8 * i, &d, 8);
        break;
      }
      case DType::BFloat16: {
        const std::uint16_t h = float_to_bf16(v);
        std::memcpy(b.data() + 2 * i, &h, 2);
        break;
      }
      default: {
        const std::uint16_t h = float_to_half(v);
        std::memcpy(b.data() + 2 * i, &h, 2);
      }
    }
  }
  return b;
}

// Runs body on `world` thread ranks, each with its own stream of cuda:0 current; rank threads
// collect failures, the main thread reports them.
void on_ranks(int world, const std::function<std::vector<std::string>(ProcessGroup&)>& body) {
  std::mutex mutex;
  std::vector<std::string> failures;
  run_ranks(world, [&](std::shared_ptr<ProcessGroup> pg) {
    std::vector<std::string> mine;
    {
      StreamGuard guard(new_stream(kGpu));
      mine = body(*pg);
      current_stream(kGpu).synchronize();
    }
    std::lock_guard lock(mutex);
    failures.insert(failures.end(), mine.begin(), mine.end());
  });
  device_synchronize(kGpu);
  BOOST_TEST(failures.empty(), failures.size() << " failures on the ranks");
  for (const auto& f : failures) BOOST_ERROR(f);
}

void expect_equal(std::vector<std::string>& failures, const ProcessGroup& pg,
                  const std::string& what, const Bytes& actual, const Bytes& expected,
                  DType dtype) {
  std::string diff = fsdp::comm::testing::compare(actual, expected, dtype);
  if (!diff.empty()) failures.push_back(fmt::format("rank {}: {}: {}", pg.rank(), what, diff));
}

std::vector<ReduceOp> ops_of(DType dtype) {
  if (dtype == DType::Bool) return {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min};
  return {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min};
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_collective_on_one_gpu_equals_the_cpu_path) {
  for (int world : {2, 4}) {
    on_ranks(world, [&](ProcessGroup& pg) {
      std::vector<std::string> failures;
      for (DType dtype : kAllDTypes) {
        for (std::size_t count :
             {std::size_t(1), std::size_t(7), std::size_t(1001), std::size_t(100003)}) {
          const std::size_t bytes = count * dtype_size(dtype);
          const Bytes in = input(dtype, count, pg.rank(), 1);
          const Bytes wide = input(dtype, count * std::size_t(world), pg.rank(), 2);
          const std::string label =
              fmt::format("{} x {} at {} ranks", dtype_name(dtype), count, world);

          Bytes cpu_ag(bytes * std::size_t(world));
          pg.all_gather(in.data(), cpu_ag.data(), count, dtype);
          auto d_in = to_device(in), d_ag = to_device(Bytes(cpu_ag.size(), 0xAB));
          pg.all_gather(d_in->data(), d_ag->data(), count, dtype, kGpu);
          expect_equal(failures, pg, "all_gather " + label, to_host(d_ag->data(), cpu_ag.size()),
                       cpu_ag, dtype);
          // In place: this rank's input already at its place in the output.
          Bytes placed(cpu_ag.size(), 0xAB);
          std::copy(in.begin(), in.end(), placed.begin() + std::ptrdiff_t(pg.rank() * bytes));
          auto d_placed = to_device(placed);
          char* base = static_cast<char*>(d_placed->data());
          pg.all_gather_async(base + pg.rank() * bytes, base, count, dtype, kGpu)->wait();
          expect_equal(failures, pg, "in-place all_gather " + label, to_host(base, cpu_ag.size()),
                       cpu_ag, dtype);

          for (ReduceOp op : ops_of(dtype)) {
            const std::string tag = fmt::format("{} {}", reduce_op_name(op), label);
            Bytes cpu_rs(bytes);
            pg.reduce_scatter(wide.data(), cpu_rs.data(), count, dtype, op);
            auto d_wide = to_device(wide), d_rs = to_device(Bytes(bytes, 0xAB));
            pg.reduce_scatter_async(d_wide->data(), d_rs->data(), count, dtype, op, kGpu)->wait();
            expect_equal(failures, pg, "reduce_scatter " + tag, to_host(d_rs->data(), bytes),
                         cpu_rs, dtype);

            Bytes cpu_ar = wide;
            pg.all_reduce(cpu_ar.data(), count * std::size_t(world), dtype, op);
            auto d_ar = to_device(wide);
            pg.all_reduce(d_ar->data(), count * std::size_t(world), dtype, op, kGpu);
            expect_equal(failures, pg, "all_reduce " + tag, to_host(d_ar->data(), wide.size()),
                         cpu_ar, dtype);
          }

          Bytes cpu_bc = in;
          pg.broadcast(cpu_bc.data(), count, dtype, world - 1);
          auto d_bc = to_device(in);
          pg.broadcast(d_bc->data(), count, dtype, world - 1, kGpu);
          expect_equal(failures, pg, "broadcast " + label, to_host(d_bc->data(), bytes), cpu_bc,
                       dtype);
        }
      }
      return failures;
    });
  }
}

// Rank 0's stream is held by a gate before the kernel that writes its input: the all_gather is
// issued (the host is not held), neither rank's collective completes (rank 1's waits on rank 0's
// stream), and once the gate opens every rank's compute stream, ordered by block_stream, sees
// both inputs.
BOOST_AUTO_TEST_CASE(a_collective_waits_for_its_peers_streams_without_holding_the_host) {
  std::latch checked(2);
  fsdp::testing::Gate gate;
  on_ranks(2, [&](ProcessGroup& pg) {
    std::vector<std::string> failures;
    const Stream unshard = new_stream(kGpu), compute = current_stream(kGpu);
    auto in = to_device(Bytes(sizeof(float)));
    auto out = to_device(Bytes(2 * sizeof(float)));
    auto seen = to_device(Bytes(2 * sizeof(float)));
    compute.synchronize();
    std::shared_ptr<Work> work;
    {
      StreamGuard guard(unshard);
      if (pg.rank() == 0) launch(unshard, gate.waiter());
      auto* handle = static_cast<cudaStream_t>(native_stream(unshard));
      fsdp::cuda::fill(static_cast<float*>(in->data()), 10.0f + float(pg.rank()), 1, handle);
      work = pg.all_gather_async(in->data(), out->data(), 1, DType::Float32, kGpu);
    }
    if (work->test())
      failures.push_back(
          fmt::format("rank {}: the all_gather finished before rank 0's input", pg.rank()));
    work->block_stream(compute);
    copy_bytes(seen->data(), kGpu, out->data(), kGpu, 2 * sizeof(float));  // on compute
    checked.arrive_and_wait();
    if (pg.rank() == 0) gate.open();
    const Bytes got = to_host(seen->data(), 2 * sizeof(float));
    float values[2];
    std::memcpy(values, got.data(), sizeof values);
    if (values[0] != 10.0f || values[1] != 11.0f)
      failures.push_back(fmt::format("rank {}: compute stream saw {} {}, expected 10 11", pg.rank(),
                                     values[0], values[1]));
    work->wait();
    unshard.synchronize();
    return failures;
  });
}

// A mismatched call is one line on every rank, as on the cpu, and thrown where it was issued.
BOOST_AUTO_TEST_CASE(mismatched_calls_are_named_on_every_rank) {
  on_ranks(2, [](ProcessGroup& pg) {
    std::vector<std::string> failures;
    auto buf = to_device(Bytes(8 * sizeof(std::int32_t)));
    const DType dtype = pg.rank() == 0 ? DType::Float32 : DType::Int32;
    try {
      pg.all_reduce(buf->data(), 8, dtype, ReduceOp::Sum, kGpu);
      failures.push_back(fmt::format("rank {}: no error", pg.rank()));
    } catch (const Error& e) {
      const std::string expected = fsdp::comm::testing::expected_dtype_mismatch(pg, 8);
      if (std::string(e.what()).find(expected) == std::string::npos)
        failures.push_back(
            fmt::format("rank {}: got '{}', expected '{}'", pg.rank(), e.what(), expected));
    }
    return failures;
  });
}
