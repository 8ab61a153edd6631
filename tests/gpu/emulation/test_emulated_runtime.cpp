// The emulated CUDA runtime (cudart/) on its own: streams run asynchronously to the host and in
// order, waits across streams through events, the legacy default stream's implicit
// synchronisation, pageable and pinned copies, freshly allocated memory poisoned, the checks a
// GPU's memory protection and launch limits make, sticky faults. Linked to the emulated runtime
// directly (no real libcudart, no kernels).
#define BOOST_TEST_MODULE cuda_emulated_runtime
#include <atomic>
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/gpu/emulation/emu_runtime.h"

namespace {

// A host function that blocks its stream until the test opens the gate.
struct Gate {
  std::atomic<bool> open{false};
  static void wait(void* self) {
    while (!static_cast<Gate*>(self)->open.load()) std::this_thread::yield();
  }
};

void store_one(void* p) {
  *static_cast<int*>(p) = 1;
}

void run_noop(void*) {}
void destroy_count(void* counter) {
  ++*static_cast<int*>(counter);
}

}  // namespace

BOOST_AUTO_TEST_CASE(streams_run_in_order_and_asynchronously_to_the_host) {
  cudaStream_t s;
  BOOST_REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  Gate gate;
  int flag = 0;
  BOOST_REQUIRE(cudaLaunchHostFunc(s, Gate::wait, &gate) == cudaSuccess);
  BOOST_REQUIRE(cudaLaunchHostFunc(s, store_one, &flag) == cudaSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  BOOST_TEST(flag == 0);  // held behind the gate: the host did not wait
  BOOST_TEST(cudaStreamQuery(s) == cudaErrorNotReady);
  gate.open = true;
  BOOST_TEST(cudaStreamSynchronize(s) == cudaSuccess);
  BOOST_TEST(flag == 1);
  BOOST_TEST(cudaStreamQuery(s) == cudaSuccess);
  BOOST_TEST(cudaStreamDestroy(s) == cudaSuccess);
}

BOOST_AUTO_TEST_CASE(a_stream_waits_for_an_event_of_another_stream) {
  cudaStream_t a, b;
  cudaEvent_t e;
  cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
  BOOST_REQUIRE(cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess);
  BOOST_TEST(cudaEventQuery(e) == cudaSuccess);  // never recorded: complete
  Gate gate;
  int flag = 0;
  cudaLaunchHostFunc(a, Gate::wait, &gate);
  cudaEventRecord(e, a);
  BOOST_TEST(cudaEventQuery(e) == cudaErrorNotReady);
  cudaStreamWaitEvent(b, e, 0);
  cudaLaunchHostFunc(b, store_one, &flag);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  BOOST_TEST(flag == 0);
  gate.open = true;
  BOOST_TEST(cudaStreamSynchronize(b) == cudaSuccess);
  BOOST_TEST(flag == 1);
  BOOST_TEST(cudaEventQuery(e) == cudaSuccess);
  float ms = 0;
  BOOST_TEST(cudaEventElapsedTime(&ms, e, e) == cudaErrorInvalidResourceHandle);  // no timing
  cudaEventDestroy(e);
}

BOOST_AUTO_TEST_CASE(timing_events_measure_the_work_between_them) {
  cudaEvent_t start, end;
  cudaEventCreateWithFlags(&start, cudaEventDefault);
  cudaEventCreateWithFlags(&end, cudaEventDefault);
  float ms = 0;
  BOOST_TEST(cudaEventElapsedTime(&ms, start, end) == cudaErrorInvalidResourceHandle);
  cudaEventRecord(start, nullptr);
  cudaLaunchHostFunc(
      nullptr, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(30)); }, nullptr);
  cudaEventRecord(end, nullptr);
  BOOST_TEST(cudaEventSynchronize(end) == cudaSuccess);
  BOOST_TEST(cudaEventElapsedTime(&ms, start, end) == cudaSuccess);
  BOOST_TEST(ms >= 29.0f);
  BOOST_TEST(ms < 5000.0f);
}

BOOST_AUTO_TEST_CASE(the_legacy_stream_orders_blocking_streams_but_not_non_blocking_ones) {
  cudaStream_t blocking, free;
  cudaStreamCreateWithFlags(&blocking, cudaStreamDefault);
  cudaStreamCreateWithFlags(&free, cudaStreamNonBlocking);
  Gate gate;
  int after_blocking = 0, after_free = 0;
  cudaLaunchHostFunc(blocking, Gate::wait, &gate);
  cudaLaunchHostFunc(nullptr, store_one, &after_blocking);  // waits for `blocking`
  cudaLaunchHostFunc(free, store_one, &after_free);         // does not wait
  BOOST_TEST(cudaStreamSynchronize(free) == cudaSuccess);
  BOOST_TEST(after_free == 1);
  BOOST_TEST(after_blocking == 0);
  gate.open = true;
  BOOST_TEST(cudaDeviceSynchronize() == cudaSuccess);
  BOOST_TEST(after_blocking == 1);
}

BOOST_AUTO_TEST_CASE(device_memory_starts_poisoned_and_copies_follow_cuda_rules) {
  float* d = nullptr;
  BOOST_REQUIRE(cudaMalloc(reinterpret_cast<void**>(&d), 4 * sizeof(float)) == cudaSuccess);
  std::vector<float> host(4, 0.0f);
  BOOST_REQUIRE(cudaMemcpy(host.data(), d, 16, cudaMemcpyDeviceToHost) == cudaSuccess);
  for (float v : host) BOOST_TEST(std::isnan(v));
  // A pageable source is staged when the call returns: changing it after does not matter.
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  Gate gate;
  cudaLaunchHostFunc(s, Gate::wait, &gate);
  std::vector<float> src{1, 2, 3, 4};
  BOOST_REQUIRE(cudaMemcpyAsync(d, src.data(), 16, cudaMemcpyHostToDevice, s) == cudaSuccess);
  src.assign(4, -1.0f);
  gate.open = true;
  BOOST_REQUIRE(cudaMemcpyAsync(host.data(), d, 16, cudaMemcpyDeviceToHost, s) == cudaSuccess);
  BOOST_TEST(host == (std::vector<float>{1, 2, 3, 4}));  // pageable destination: complete
  // Wrong directions, ranges past an allocation, host memory as device memory.
  BOOST_TEST(cudaMemcpy(d, host.data(), 16, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidValue);
  BOOST_TEST(cudaGetLastError() == cudaSuccess);  // read and cleared
  BOOST_TEST(cudaMemcpy(d + 2, src.data(), 16, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  BOOST_TEST(cudaMemsetAsync(host.data(), 0, 16, s) == cudaErrorInvalidValue);
  BOOST_TEST(cudaMemsetAsync(d, 0, 16, s) == cudaSuccess);
  cudaStreamSynchronize(s);  // s does not block: the legacy stream's copy would not wait for it
  BOOST_TEST(cudaMemcpy(host.data(), d, 16, cudaMemcpyDefault) == cudaSuccess);
  BOOST_TEST(host == (std::vector<float>(4, 0.0f)));
  BOOST_TEST(cudaFree(d + 1) == cudaErrorInvalidValue);
  BOOST_TEST(cudaFree(d) == cudaSuccess);
  (void)cudaGetLastError();
}

BOOST_AUTO_TEST_CASE(pinned_copies_run_in_stream_order) {
  float* pinned = nullptr;
  float* d = nullptr;
  BOOST_REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&pinned), 16) == cudaSuccess);
  BOOST_REQUIRE(cudaMalloc(reinterpret_cast<void**>(&d), 16) == cudaSuccess);
  for (int i = 0; i < 4; ++i) pinned[i] = float(i);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  Gate gate;
  cudaLaunchHostFunc(s, Gate::wait, &gate);
  cudaMemcpyAsync(d, pinned, 16, cudaMemcpyHostToDevice, s);
  pinned[0] = 7.0f;  // before the copy runs: a pinned source is read in stream order
  gate.open = true;
  cudaMemcpyAsync(pinned, d, 16, cudaMemcpyDeviceToHost, s);
  cudaStreamSynchronize(s);
  BOOST_TEST(pinned[0] == 7.0f);
  BOOST_TEST(pinned[3] == 3.0f);
  cudaPointerAttributes a;
  BOOST_TEST(cudaPointerGetAttributes(&a, pinned) == cudaSuccess);
  BOOST_TEST(a.type == cudaMemoryTypeHost);
  BOOST_TEST(cudaPointerGetAttributes(&a, d + 1) == cudaSuccess);
  BOOST_TEST(a.type == cudaMemoryTypeDevice);
  BOOST_TEST(fsdp_emu_device_accessible(d + 3) == 1);
  BOOST_TEST(fsdp_emu_device_accessible(d + 4) == 0);  // one past the end
  BOOST_TEST(fsdp_emu_device_accessible(pinned) == 1);
  float on_stack = 0;
  BOOST_TEST(fsdp_emu_device_accessible(&on_stack) == 0);
  cudaFree(d);
  cudaFreeHost(pinned);
}

BOOST_AUTO_TEST_CASE(device_capacity_is_enforced_without_a_sticky_error) {
  cudaDeviceProp p;
  BOOST_REQUIRE(cudaGetDeviceProperties(&p, 0) == cudaSuccess);
  BOOST_TEST(p.major == 9);
  void* big = nullptr;
  BOOST_TEST(cudaMalloc(&big, p.totalGlobalMem + 1) == cudaErrorMemoryAllocation);
  BOOST_TEST(cudaGetLastError() == cudaErrorMemoryAllocation);
  BOOST_TEST(cudaMalloc(&big, 256) == cudaSuccess);
  cudaFree(big);
  int n = 0;
  BOOST_TEST(cudaGetDeviceCount(&n) == cudaSuccess);
  BOOST_TEST(cudaSetDevice(n) == cudaErrorInvalidDevice);
  (void)cudaGetLastError();
}

BOOST_AUTO_TEST_CASE(launch_configurations_are_checked_as_cuda_checks_them) {
  int destroyed = 0;
  BOOST_TEST(fsdp_emu_launch(nullptr, dim3(1), dim3(1025), 0, "k", nullptr, run_noop, &destroyed,
                             destroy_count) == cudaErrorInvalidConfiguration);
  BOOST_TEST(fsdp_emu_launch(nullptr, dim3(1, 65536), dim3(32), 0, "k", nullptr, run_noop,
                             &destroyed, destroy_count) == cudaErrorInvalidConfiguration);
  BOOST_TEST(fsdp_emu_launch(nullptr, dim3(0), dim3(32), 0, "k", nullptr, run_noop, &destroyed,
                             destroy_count) == cudaErrorInvalidConfiguration);
  BOOST_TEST(fsdp_emu_launch(nullptr, dim3(1), dim3(32), 64 * 1024, "k", nullptr, run_noop,
                             &destroyed, destroy_count) == cudaErrorInvalidValue);
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidValue);
  BOOST_TEST(fsdp_emu_launch(nullptr, dim3(4, 2), dim3(32, 32), 1024, "k", nullptr, run_noop,
                             &destroyed, destroy_count) == cudaSuccess);
  BOOST_TEST(cudaDeviceSynchronize() == cudaSuccess);
  BOOST_TEST(destroyed == 5);  // every closure released, launched or not
}

namespace {
// Kernels the runtime tells apart by their addresses, as cudaFuncSetAttribute receives them.
void opted_in_kernel() {}
void other_kernel() {}
struct Counts {
  int ran = 0, destroyed = 0;
  static void run(void* self) { ++static_cast<Counts*>(self)->ran; }
  static void destroy(void* self) { ++static_cast<Counts*>(self)->destroyed; }
};
}  // namespace

BOOST_AUTO_TEST_CASE(dynamic_shared_memory_above_48_kib_needs_the_kernels_opt_in) {
  const void* kernel = reinterpret_cast<const void*>(&opted_in_kernel);
  const void* other = reinterpret_cast<const void*>(&other_kernel);
  const auto attr = cudaFuncAttributeMaxDynamicSharedMemorySize;
  Counts counts;
  auto launch = [&](const void* function, std::size_t bytes) {
    return fsdp_emu_launch(nullptr, dim3(1), dim3(32), bytes, "k", function, Counts::run, &counts,
                           Counts::destroy);
  };
  BOOST_TEST(launch(kernel, 48 * 1024) == cudaSuccess);  // up to 48 KiB needs none
  BOOST_TEST(launch(kernel, 100 * 1024) == cudaErrorInvalidValue);
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidValue);
  cudaDeviceProp p{};
  BOOST_REQUIRE(cudaGetDeviceProperties(&p, 0) == cudaSuccess);
  BOOST_TEST(p.sharedMemPerBlockOptin == 227u * 1024);
  BOOST_TEST(cudaFuncSetAttribute(kernel, attr, static_cast<int>(p.sharedMemPerBlockOptin) + 1) ==
             cudaErrorInvalidValue);
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidValue);
  BOOST_TEST(cudaFuncSetAttribute(kernel, attr, -1) == cudaErrorInvalidValue);
  BOOST_TEST(cudaFuncSetAttribute(nullptr, attr, 1024) == cudaErrorInvalidDeviceFunction);
  BOOST_TEST(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 50) ==
             cudaSuccess);
  BOOST_TEST(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 101) ==
             cudaErrorInvalidValue);
  BOOST_TEST(cudaFuncSetAttribute(kernel, cudaFuncAttributeRequiredClusterWidth, 2) ==
             cudaErrorNotSupported);
  (void)cudaGetLastError();
  BOOST_TEST(cudaFuncSetAttribute(kernel, attr, static_cast<int>(p.sharedMemPerBlockOptin)) ==
             cudaSuccess);
  BOOST_TEST(launch(kernel, p.sharedMemPerBlockOptin) == cudaSuccess);
  BOOST_TEST(launch(kernel, p.sharedMemPerBlockOptin + 1) == cudaErrorInvalidValue);
  BOOST_TEST(launch(other, 100 * 1024) == cudaErrorInvalidValue);  // its own opt-in, none
  (void)cudaGetLastError();
  // A smaller opt-in is the kernel's limit, below 48 KiB too.
  BOOST_TEST(cudaFuncSetAttribute(other, attr, 1024) == cudaSuccess);
  BOOST_TEST(launch(other, 1024) == cudaSuccess);
  BOOST_TEST(launch(other, 1025) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  BOOST_TEST(cudaDeviceSynchronize() == cudaSuccess);
  BOOST_TEST(counts.ran == 3);
  BOOST_TEST(counts.destroyed == 7);  // every closure released, launched or not
}

// Last: a fault is sticky for the rest of the process.
BOOST_AUTO_TEST_CASE(a_fault_while_work_runs_is_sticky) {
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaLaunchHostFunc(
      s, [](void*) { fsdp_emu_report_fault(cudaErrorIllegalAddress, "test: an illegal access"); },
      nullptr);
  BOOST_TEST(cudaStreamSynchronize(s) == cudaErrorIllegalAddress);
  BOOST_TEST(cudaGetLastError() == cudaErrorIllegalAddress);
  BOOST_TEST(cudaGetLastError() == cudaErrorIllegalAddress);
  void* p = nullptr;
  BOOST_TEST(cudaMalloc(&p, 16) == cudaErrorIllegalAddress);
}
