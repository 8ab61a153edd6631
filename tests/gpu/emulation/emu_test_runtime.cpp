// emu_test_runtime.h: synchronous launches, a host-memory set, the messages kept for tests.
#include "tests/gpu/emulation/emu_test_runtime.h"

#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "tests/gpu/emulation/emu_func_attributes.h"
#include "tests/gpu/emulation/emu_runtime.h"

namespace fsdp::emu::test {
namespace {

std::mutex mutex;
std::vector<std::pair<const char*, const char*>> host_ranges;
std::string launch_error, fault;
int launch_count = 0;
thread_local cudaError_t last_error = cudaSuccess;

std::string take(std::string& s) {
  std::lock_guard lock(mutex);
  return std::exchange(s, std::string());
}

}  // namespace

void register_host(const void* p, std::size_t bytes) {
  std::lock_guard lock(mutex);
  const char* b = static_cast<const char*>(p);
  host_ranges.emplace_back(b, b + bytes);
}
void clear_host() {
  std::lock_guard lock(mutex);
  host_ranges.clear();
}
std::string take_launch_error() {
  return take(launch_error);
}
std::string take_fault() {
  return take(fault);
}
int launches() {
  std::lock_guard lock(mutex);
  return launch_count;
}

}  // namespace fsdp::emu::test

using namespace fsdp::emu::test;

extern "C" {

cudaError_t fsdp_emu_launch(cudaStream_t, dim3, dim3, std::size_t dynamic_shared_bytes,
                            const char* kernel, const void* function, void (*run)(void*),
                            void* closure, void (*destroy)(void*)) {
  if (const std::string why = fsdp::emu::dynamic_shared_refusal(0, function, dynamic_shared_bytes);
      !why.empty()) {
    destroy(closure);
    return fsdp_emu_launch_error(cudaErrorInvalidValue,
                                 (std::string("kernel launch ") + kernel + ": " + why).c_str());
  }
  {
    std::lock_guard lock(mutex);
    ++launch_count;
  }
  run(closure);
  destroy(closure);
  return cudaSuccess;
}

int fsdp_emu_device_accessible(const void* p) {
  std::lock_guard lock(mutex);
  const char* c = static_cast<const char*>(p);
  if (c == nullptr) return 0;
  for (const auto& [begin, end] : host_ranges)
    if (c >= begin && c < end) return 0;
  return 1;
}

cudaError_t fsdp_emu_launch_error(cudaError_t error, const char* message) {
  std::fprintf(stderr, "%s\n", message);
  std::lock_guard lock(mutex);
  launch_error = message;
  last_error = error;
  return error;
}

void fsdp_emu_report_fault(cudaError_t, const char* message) {
  std::fprintf(stderr, "%s\n", message);
  std::lock_guard lock(mutex);
  fault = message;
}

cudaError_t CUDARTAPI cudaFuncSetAttribute(const void* function, cudaFuncAttribute attr,
                                           int value) {
  std::string why;
  const cudaError_t e = fsdp::emu::set_func_attribute(0, function, attr, value, why);
  return e == cudaSuccess ? e : fsdp_emu_launch_error(e, why.c_str());
}

// One device, 0 (the launchers that opt into more shared memory ask which device is current).
cudaError_t CUDARTAPI cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetLastError(void) {
  return std::exchange(last_error, cudaSuccess);
}

const char* CUDARTAPI cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
    default:
      return "cudaError (other)";
  }
}

const char* CUDARTAPI cudaGetErrorString(cudaError_t error) {
  return error == cudaSuccess ? "no error" : "an error the test runtime does not name";
}

cudaError_t CUDARTAPI cudaMemsetAsync(void* p, int value, size_t count, cudaStream_t) {
  std::memset(p, value, count);
  return cudaSuccess;
}

}  // extern "C"

// core/cuda/runtime.cpp's, which needs the real runtime: the same messages, as plain exceptions.
namespace fsdp::cuda {
void throw_cuda_error(const char* status_name, const char* status_text, const char* call,
                      const char* file, int line) {
  throw std::runtime_error(std::string("CUDA error ") + status_name + " (" + status_text +
                           ") from `" + call + "` at " + file + ":" + std::to_string(line));
}
void throw_value_error(const char* op, const char* what, long long value) {
  throw std::invalid_argument(std::string(op) + ": " + what + ", got " + std::to_string(value));
}
}  // namespace fsdp::cuda
