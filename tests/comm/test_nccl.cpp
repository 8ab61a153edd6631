// NCCL backend: needs a CUDA device (exit 77 = skipped otherwise). One rank per process; under
// mpirun -np N with N devices it runs multi-rank. Buffers live on the device.
#define BOOST_TEST_MODULE comm_nccl
#include <cuda_runtime.h>

#include <boost/test/unit_test.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "comm/errors.h"
#include "comm/registry.h"
#include "core/native_stream.h"
#include "core/stream.h"
#include "tests/comm/collective_checks.h"

using namespace fsdp;
using namespace fsdp::comm;

namespace {

struct RequireDevice {
  RequireDevice() {
    int devices = 0;
    cudaError_t rc = cudaGetDeviceCount(&devices);
    if (rc != cudaSuccess || devices == 0) {
      std::printf("no CUDA device (%s): skipping the NCCL tests\n",
                  rc != cudaSuccess ? cudaGetErrorString(rc) : "0 devices");
      std::exit(77);
    }
  }
};
RequireDevice require_device;

std::shared_ptr<ProcessGroup> world() {
  static std::shared_ptr<ProcessGroup> pg = [] {
    InitOptions o = options_from_env();
    if (o.rank < 0) {
      o.rank = 0;
      o.world_size = 1;
    }
    if (o.file_store_path.empty()) o.master_port += 7;  // away from other tests' stores
    return create_process_group("nccl", o);
  }();
  return pg;
}

// The group's device: rank r of a process per GPU uses cuda:(r mod devices), as the backend picks.
Device group_device() {
  int devices = 1;
  cudaGetDeviceCount(&devices);
  return Device(DeviceType::CUDA, world()->rank() % devices);
}

struct DeviceBuffer {
  explicit DeviceBuffer(std::size_t bytes) { cudaMalloc(&ptr, bytes ? bytes : 1); }
  ~DeviceBuffer() { cudaFree(ptr); }
  void* ptr = nullptr;
};

testing::Bytes round_trip(const testing::Bytes& host, std::size_t out_bytes,
                          const std::function<void(void*, void*)>& run) {
  DeviceBuffer in(host.size()), out(out_bytes);
  cudaMemcpy(in.ptr, host.data(), host.size(), cudaMemcpyHostToDevice);
  run(in.ptr, out.ptr);
  testing::Bytes result(out_bytes);
  cudaMemcpy(result.data(), out.ptr, out_bytes, cudaMemcpyDeviceToHost);
  return result;
}

}  // namespace

BOOST_AUTO_TEST_CASE(collectives_on_device_buffers) {
  auto pg = world();
  const int n = pg->size(), me = pg->rank();
  const Device cuda = group_device();
  for (DType t : {DType::Float32, DType::Float64, DType::Int64, DType::Int32, DType::UInt8}) {
    for (std::size_t count :
         {std::size_t(0), std::size_t(1), std::size_t(7), std::size_t(1) << 20}) {
      const std::size_t elem = dtype_size(t);
      // all_gather
      testing::Bytes expected;
      for (int r = 0; r < n; ++r) {
        auto part = testing::make_input(t, count, r, 1);
        expected.insert(expected.end(), part.begin(), part.end());
      }
      auto got = round_trip(testing::make_input(t, count, me, 1), count * n * elem,
                            [&](void* in, void* out) { pg->all_gather(in, out, count, t, cuda); });
      BOOST_TEST(testing::compare(got, expected, t) == "");
      // reduce_scatter and all_reduce, sum and max (exact in every type for these inputs)
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min}) {
        auto full = testing::expected_reduction(t, op, count * n, n, 2);
        testing::Bytes mine(full.begin() + std::ptrdiff_t(me * count * elem),
                            full.begin() + std::ptrdiff_t((me + 1) * count * elem));
        got = round_trip(testing::make_input(t, count * n, me, 2), count * elem,
                         [&](void* in, void* out) {
                           pg->reduce_scatter_async(in, out, count, t, op, cuda)->wait();
                         });
        BOOST_TEST(testing::compare(got, mine, t) == "");
        got = round_trip(testing::make_input(t, count, me, 3), count * elem,
                         [&](void* in, void* out) {
                           pg->all_reduce(in, count, t, op, cuda);
                           cudaMemcpy(out, in, count * elem, cudaMemcpyDeviceToDevice);
                         });
        BOOST_TEST(testing::compare(got, testing::expected_reduction(t, op, count, n, 3), t) == "");
      }
    }
  }
  pg->barrier();
}

// Host buffers (a job's agreement on an error, its loss) are staged through the group's device.
BOOST_AUTO_TEST_CASE(host_buffers_are_staged_through_the_device) {
  auto pg = world();
  const int n = pg->size(), me = pg->rank();
  double x = me + 1.0;
  pg->all_reduce(&x, 1, DType::Float64);
  BOOST_TEST(x == n * (n + 1) / 2.0);
  std::int64_t v = me == 0 ? 42 : -1;
  pg->broadcast(&v, 1, DType::Int64, 0);
  BOOST_TEST(v == 42);
  std::int32_t mine = 10 * me;
  std::vector<std::int32_t> all(std::size_t(n), -1);
  pg->all_gather(&mine, all.data(), 1, DType::Int32);
  for (int r = 0; r < n; ++r) BOOST_TEST(all[std::size_t(r)] == 10 * r);
}

// The collective is queued on the caller's current stream and its Work orders another stream on
// the device (block_stream), as FSDP's stream protocol needs; nothing waits on the host.
BOOST_AUTO_TEST_CASE(a_collective_runs_on_the_current_stream_and_orders_others) {
  auto pg = world();
  const Device cuda0 = group_device();
  const int n = pg->size();
  const std::size_t count = std::size_t(1) << 22;
  std::vector<float> host(count, 2.5f + float(pg->rank())), back(count * n, 0.0f);
  DeviceBuffer in(count * sizeof(float)), out(count * n * sizeof(float));
  cudaMemcpy(in.ptr, host.data(), count * sizeof(float), cudaMemcpyHostToDevice);
  const Stream side = new_stream(cuda0);
  std::shared_ptr<Work> work;
  {
    StreamGuard guard(side);
    work = pg->all_gather_async(in.ptr, out.ptr, count, DType::Float32, cuda0);
  }
  const Stream reader = new_stream(cuda0);
  work->block_stream(reader);
  auto* stream = static_cast<cudaStream_t>(native_stream(reader));
  BOOST_REQUIRE(stream != nullptr);
  cudaMemcpyAsync(back.data(), out.ptr, back.size() * sizeof(float), cudaMemcpyDeviceToHost,
                  stream);
  cudaStreamSynchronize(stream);
  for (int r = 0; r < n; ++r)
    BOOST_TEST(back[std::size_t(r) * count + count - 1] == 2.5f + float(r));
  BOOST_TEST(work->test());
  work->wait();
}

BOOST_AUTO_TEST_CASE(buffers_on_another_device_than_the_groups_are_named) {
  auto pg = world();
  float x = 0;  // never touched: the device is checked first
  const std::string suffix =
      "has buffers on cuda:7, but this group's device is " + group_device().str();
  BOOST_CHECK_EXCEPTION(
      pg->all_reduce(&x, 1, DType::Float32, ReduceOp::Sum, Device(DeviceType::CUDA, 7)),
      fsdp::ValueError, [&](const fsdp::ValueError& e) {
        const std::string what = e.what();
        return what.size() > suffix.size() &&
               what.compare(what.size() - suffix.size(), suffix.size(), suffix) == 0;
      });
}
