// The CUDA runtime wrappers and the caching allocator on the real device: events order streams,
// pinned copies round-trip, record_stream defers reuse until the other stream's work is done,
// and a failing call's error names the call and its place.
#define BOOST_TEST_MODULE gpu_runtime
#include <string>
#include <vector>

#include "core/caching_device_allocator.h"
#include "core/cuda/cuda_memory_backend.h"
#include "core/cuda/kernels.h"
#include "core/error.h"
#include "tests/gpu/gpu_test_support.h"

using namespace fsdp;
using namespace fsdp::cuda;
using namespace fsdp::cuda::testing;

BOOST_TEST_GLOBAL_FIXTURE(RequireDevice);

BOOST_AUTO_TEST_CASE(device_properties_are_read) {
  DeviceProperties p = device_properties(0);
  std::printf("device 0: %s, sm_%d%d, %d SMs, %zu MiB\n", p.name.c_str(), p.major, p.minor,
              p.multiprocessors, p.total_memory >> 20);
  BOOST_TEST(p.multiprocessors > 0);
  BOOST_TEST(p.major >= 8);  // the kernels are built for sm_80 and sm_90
}

BOOST_AUTO_TEST_CASE(an_event_orders_a_second_stream_after_the_first) {
  const std::int64_t n = 1 << 24;
  Stream s1, s2;
  Event done;
  DeviceBuffer<float> buf(n);
  PinnedBuffer host(n * sizeof(float));
  fill(buf.get(), 2.5f, n, s1.get());
  done.record(s1.get());
  done.wait_on(s2.get());
  FSDP_CUDA_CHECK(
      cudaMemcpyAsync(host.data(), buf.get(), n * sizeof(float), cudaMemcpyDeviceToHost, s2.get()));
  s2.synchronize();
  BOOST_TEST(done.query());
  const float* h = static_cast<const float*>(host.data());
  BOOST_TEST(h[0] == 2.5f);
  BOOST_TEST(h[n - 1] == 2.5f);
}

BOOST_AUTO_TEST_CASE(timing_events_measure_elapsed_time) {
  Stream s;
  Event start(true), end(true);
  DeviceBuffer<float> buf(1 << 20);
  start.record(s.get());
  fill(buf.get(), 1.0f, 1 << 20, s.get());
  end.record(s.get());
  end.synchronize();
  BOOST_TEST(start.elapsed_ms(end) >= 0.0f);
}

BOOST_AUTO_TEST_CASE(a_failing_call_names_itself_and_where) {
  try {
    FSDP_CUDA_CHECK(cudaSetDevice(1 << 20));
    BOOST_FAIL("expected a CUDA error");
  } catch (const RuntimeError& e) {
    const std::string what = e.what();
    BOOST_TEST(what.find("CUDA error cudaErrorInvalidDevice (") == 0u, what);
    BOOST_TEST(what.find("from `cudaSetDevice(1 << 20)` at ") != std::string::npos, what);
    BOOST_TEST(what.find("test_runtime.cpp:") != std::string::npos, what);
  }
}

BOOST_AUTO_TEST_CASE(caching_allocator_on_the_device_reuses_and_defers_with_record_stream) {
  CachingDeviceAllocator alloc(make_cuda_memory_backend());
  Stream s1, s2;
  const auto id1 = reinterpret_cast<StreamId>(s1.get());
  const auto id2 = reinterpret_cast<StreamId>(s2.get());
  const std::int64_t n = 8 << 20;
  auto* p = static_cast<float*>(alloc.allocate(n * sizeof(float), id1));
  fill(p, 1.0f, n, s1.get());
  Event ready;
  ready.record(s1.get());
  ready.wait_on(s2.get());
  DeviceBuffer<float> sink(1);
  sum_of_squares(p, sink.get(), n, s2.get());  // s2 reads p
  alloc.record_stream(p, id2);
  alloc.free(p);
  s2.synchronize();
  BOOST_TEST(sink.download()[0] == float(n));
  void* q = alloc.allocate(n * sizeof(float), id1);  // s2's event is done by now: reused
  BOOST_TEST(q == static_cast<void*>(p));
  alloc.free(q);
  alloc.empty_cache();
  DeviceAllocatorStats st = alloc.stats();
  BOOST_TEST(st.reserved_bytes.current == 0);
  BOOST_TEST(st.num_device_alloc == 1);
  BOOST_TEST(st.num_device_free == 1);
}

BOOST_AUTO_TEST_CASE(out_of_device_memory_is_a_clear_error) {
  CachingDeviceAllocator alloc(make_cuda_memory_backend());
  DeviceProperties p = device_properties(0);
  try {
    alloc.allocate(p.total_memory * 2, 0);
    BOOST_FAIL("expected out of memory");
  } catch (const RuntimeError& e) {
    BOOST_TEST(std::string(e.what()).rfind("CUDA out of memory. Tried to allocate", 0) == 0u);
  }
  BOOST_TEST(alloc.stats().num_alloc_retries == 1);
  void* ok = alloc.allocate(1024, 0);  // the failure left no sticky error behind
  alloc.free(ok);
}
