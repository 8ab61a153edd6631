// core/cuda/async_allocator.h on the device: allocations on the current stream, a free queued
// after the work of every stream record_stream named (a gated stream holds the memory), the
// statistics, the out-of-memory message, FSDP_CUDA_ALLOC_CONF's grammar.
#define BOOST_TEST_MODULE gpu_async_allocator
#include <atomic>
#include <boost/test/unit_test.hpp>
#include <string>
#include <thread>

#include "core/cuda/async_allocator.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/streams.h"
#include "core/error.h"
#include "core/stream.h"
#include "tests/gpu/gpu_test_support.h"

using fsdp::AllocatorStats;
using fsdp::Device;
using fsdp::DeviceType;
using fsdp::RuntimeError;
using fsdp::StreamGuard;
using fsdp::ValueError;
namespace cuda = fsdp::cuda;

using fsdp::cuda::testing::RequireDevice;
BOOST_TEST_GLOBAL_FIXTURE(RequireDevice);

namespace {

const Device kGpu(DeviceType::CUDA, 0);

// A host function that holds its stream until the test opens the gate.
struct Gate {
  std::atomic<bool> open{false};
  static void wait(void* self) {
    while (!static_cast<Gate*>(self)->open.load()) std::this_thread::yield();
  }
};

std::uint64_t pool_used() {
  cudaMemPool_t pool = nullptr;
  FSDP_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
  std::uint64_t used = 0;
  FSDP_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  return used;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_configuration_names_a_backend) {
  BOOST_TEST((cuda::parse_alloc_conf("") == cuda::AllocatorBackend::Native));
  BOOST_TEST((cuda::parse_alloc_conf("backend:native") == cuda::AllocatorBackend::Native));
  BOOST_TEST((cuda::parse_alloc_conf("backend:cudaMallocAsync") ==
              cuda::AllocatorBackend::CudaMallocAsync));
  BOOST_CHECK_EXCEPTION(cuda::parse_alloc_conf("max_split_size_mb:128"), ValueError,
                        [](const ValueError& e) {
                          return std::string(e.what()) ==
                                 "FSDP_CUDA_ALLOC_CONF: 'max_split_size_mb:128' is not supported "
                                 "(expected backend:native or backend:cudaMallocAsync)";
                        });
}

BOOST_AUTO_TEST_CASE(a_free_waits_for_the_streams_that_used_the_memory) {
  fsdp::Allocator& a = cuda::async_allocator();
  const fsdp::Stream s1 = fsdp::new_stream(kGpu), s2 = fsdp::new_stream(kGpu);
  StreamGuard on_s1(s1);
  const std::uint64_t before = pool_used();
  const std::size_t bytes = std::size_t(1) << 20;
  void* p = a.allocate(bytes, kGpu);
  AllocatorStats st = a.stats_for(kGpu);
  BOOST_TEST(st.allocated_bytes == std::int64_t(bytes));
  BOOST_TEST(st.num_allocs == 1);
  BOOST_TEST(pool_used() >= before + bytes);
  Gate gate;
  FSDP_CUDA_CHECK(cudaLaunchHostFunc(cuda::streams().native(s2), Gate::wait, &gate));
  a.record_stream(p, kGpu, s2);
  a.deallocate(p, bytes, kGpu);
  st = a.stats_for(kGpu);
  BOOST_TEST(st.allocated_bytes == 0);
  BOOST_TEST(st.allocated_bytes_peak == std::int64_t(bytes));
  BOOST_TEST(st.num_frees == 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  BOOST_TEST(pool_used() >= before + bytes);  // s2 still holds it: the free has not run
  gate.open = true;
  FSDP_CUDA_CHECK(cudaDeviceSynchronize());
  BOOST_TEST(pool_used() == before);
  const auto dict = cuda::async_memory_stats(kGpu);
  BOOST_TEST(dict.at("allocated_bytes.all.peak") == std::int64_t(bytes));
  BOOST_TEST(dict.at("allocation.all.current") == 0);
}

BOOST_AUTO_TEST_CASE(out_of_memory_names_the_request_and_leaves_no_error_behind) {
  fsdp::Allocator& a = cuda::async_allocator();
  std::size_t free_bytes = 0, total = 0;
  FSDP_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  try {
    a.allocate(total * 2, kGpu);
    BOOST_FAIL("expected out of memory");
  } catch (const RuntimeError& e) {
    BOOST_TEST(std::string(e.what()).rfind("cuda:0 out of memory. Tried to allocate", 0) == 0u,
               e.what());
    BOOST_TEST(std::string(e.what()).find("the cudaMallocAsync allocator") != std::string::npos);
  }
  BOOST_TEST(a.stats_for(kGpu).num_alloc_retries >= 1);
  void* ok = a.allocate(1024, kGpu);
  a.deallocate(ok, 1024, kGpu);
  FSDP_CUDA_CHECK(cudaDeviceSynchronize());
}
