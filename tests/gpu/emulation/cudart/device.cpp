// Devices and errors of the emulated CUDA runtime: FSDP_EMU_CUDA_DEVICES devices (default 1)
// that describe themselves as an H100 would (sm_90, 132 SMs, 227 KiB opt-in shared memory),
// with FSDP_EMU_CUDA_MEMORY_BYTES each (default 4 GiB); the calling thread's current device and
// last error; the sticky fault; CUDA's error names and texts.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include "tests/gpu/emulation/cudart/emu_state.h"
#include "tests/gpu/emulation/emu_func_attributes.h"
#include "tests/gpu/emulation/emu_runtime.h"

namespace fsdp::emu {
namespace {

thread_local cudaError_t t_last_error = cudaSuccess;
std::atomic<int> g_sticky{cudaSuccess};
std::mutex* const g_peer_lock = new std::mutex;
std::set<std::pair<int, int>>* const g_peers = new std::set<std::pair<int, int>>;

std::size_t env_size(const char* name, std::size_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

bool valid(int device) {
  return device >= 0 && device < device_count();
}

}  // namespace

int device_count() {
  static const int n = static_cast<int>(env_size("FSDP_EMU_CUDA_DEVICES", 1));
  return n < 0 ? 0 : (n > 64 ? 64 : n);
}

int& current_device() {
  thread_local int device = 0;
  return device;
}

std::size_t memory_limit() {
  static const std::size_t bytes = env_size("FSDP_EMU_CUDA_MEMORY_BYTES", std::size_t{4} << 30);
  return bytes;
}

cudaError_t set_error(cudaError_t error) {
  if (error != cudaSuccess) t_last_error = error;
  return error;
}

cudaError_t take_last_error() {
  const cudaError_t sticky = sticky_error();
  if (sticky != cudaSuccess) return sticky;  // sticky errors stay
  const cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}

void report_fault(cudaError_t error, const std::string& message) {
  std::fprintf(stderr, "emulated CUDA: fault: %s\n", message.c_str());
  int expected = cudaSuccess;
  g_sticky.compare_exchange_strong(expected, error);
}

cudaError_t sticky_error() {
  return static_cast<cudaError_t>(g_sticky.load());
}

cudaError_t refuse(cudaError_t error, const std::string& message) {
  std::fprintf(stderr, "emulated CUDA: %s\n", message.c_str());
  return set_error(error);
}

bool peer_access_enabled(int device, int peer) {
  std::lock_guard<std::mutex> lk(*g_peer_lock);
  return g_peers->count({device, peer}) != 0;
}

}  // namespace fsdp::emu

using namespace fsdp::emu;

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return refuse(cudaErrorInvalidValue, "cudaGetDeviceCount: null");
  *count = device_count();
  return *count == 0 ? set_error(cudaErrorNoDevice) : cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (!valid(device))
    return refuse(cudaErrorInvalidDevice, "cudaSetDevice(" + std::to_string(device) + ")");
  current_device() = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return refuse(cudaErrorInvalidValue, "cudaGetDevice: null");
  *device = current_device();
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (p == nullptr || !valid(device))
    return refuse(cudaErrorInvalidDevice,
                  "cudaGetDeviceProperties(" + std::to_string(device) + ")");
  *p = cudaDeviceProp{};
  std::snprintf(p->name, sizeof p->name, "Emulated CUDA device (tests/gpu/emulation)");
  p->totalGlobalMem = memory_limit();
  p->sharedMemPerBlock = kSharedMemPerBlock;
  p->sharedMemPerBlockOptin = kSharedMemPerBlockOptin;
  p->sharedMemPerMultiprocessor = 228 * 1024;
  p->regsPerBlock = 65536;
  p->regsPerMultiprocessor = 65536;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsPerMultiProcessor = 2048;
  p->maxThreadsDim[0] = 1024;
  p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = 65535;
  p->maxGridSize[2] = 65535;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 132;
  p->l2CacheSize = 50 * 1024 * 1024;
  p->memoryBusWidth = 5120;
  p->pciDeviceID = device;
  p->unifiedAddressing = 1;
  p->concurrentKernels = 1;
  p->asyncEngineCount = 2;
  return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  if (can == nullptr || !valid(device) || !valid(peer))
    return refuse(cudaErrorInvalidDevice, "cudaDeviceCanAccessPeer(" + std::to_string(device) +
                                              ", " + std::to_string(peer) + ")");
  *can = device != peer ? 1 : 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags) {
  const int device = current_device();
  if (!valid(peer) || peer == device)
    return refuse(cudaErrorInvalidDevice, "cudaDeviceEnablePeerAccess(" + std::to_string(peer) +
                                              ") from cuda:" + std::to_string(device));
  if (flags != 0) return refuse(cudaErrorInvalidValue, "cudaDeviceEnablePeerAccess: flags");
  std::lock_guard<std::mutex> lk(*g_peer_lock);
  if (!g_peers->insert({device, peer}).second) return set_error(cudaErrorPeerAccessAlreadyEnabled);
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  return take_last_error();
}

cudaError_t cudaPeekAtLastError(void) {
  const cudaError_t sticky = sticky_error();
  return sticky != cudaSuccess ? sticky : t_last_error;
}

cudaError_t cudaDriverGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
#define FSDP_EMU_NAME(e) \
  case e:                \
    return #e;
    FSDP_EMU_NAME(cudaSuccess)
    FSDP_EMU_NAME(cudaErrorInvalidValue)
    FSDP_EMU_NAME(cudaErrorMemoryAllocation)
    FSDP_EMU_NAME(cudaErrorInvalidConfiguration)
    FSDP_EMU_NAME(cudaErrorInvalidDevice)
    FSDP_EMU_NAME(cudaErrorInvalidResourceHandle)
    FSDP_EMU_NAME(cudaErrorNotReady)
    FSDP_EMU_NAME(cudaErrorIllegalAddress)
    FSDP_EMU_NAME(cudaErrorLaunchFailure)
    FSDP_EMU_NAME(cudaErrorPeerAccessAlreadyEnabled)
    FSDP_EMU_NAME(cudaErrorNoDevice)
    FSDP_EMU_NAME(cudaErrorNotSupported)
    FSDP_EMU_NAME(cudaErrorInsufficientDriver)
    FSDP_EMU_NAME(cudaErrorInvalidDeviceFunction)
#undef FSDP_EMU_NAME
    default:
      return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorIllegalAddress:
      return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
    case cudaErrorPeerAccessAlreadyEnabled:
      return "peer access is already enabled";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorNotSupported:
      return "operation not supported";
    case cudaErrorInsufficientDriver:
      return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorInvalidDeviceFunction:
      return "invalid device function";
    default:
      return "unknown error";
  }
}

cudaError_t fsdp_emu_launch_error(cudaError_t error, const char* message) {
  return refuse(error, message);
}

void fsdp_emu_report_fault(cudaError_t error, const char* message) {
  report_fault(error, message);
}

// Kernels compiled by nvcc register themselves through these at load time. The emulated runtime
// runs the emulated kernels' library instead; nvcc's objects here mean the wrong library was
// found first.
[[noreturn]] static void nvcc_code_loaded(const char* call) {
  std::fprintf(stderr,
               "emulated CUDA: %s: code compiled by nvcc was loaded under the emulated runtime; "
               "put tests/gpu/emulation's libfsdp_cuda_kernels.so first on LD_LIBRARY_PATH\n",
               call);
  std::abort();
}
void** __cudaRegisterFatBinary(void*) {
  nvcc_code_loaded("__cudaRegisterFatBinary");
}
void __cudaRegisterFatBinaryEnd(void**) {
  nvcc_code_loaded("__cudaRegisterFatBinaryEnd");
}
void __cudaUnregisterFatBinary(void**) {}
void __cudaRegisterFunction(void**, const char*, char*, const char*, int, void*, void*, void*,
                            void*, int*) {
  nvcc_code_loaded("__cudaRegisterFunction");
}
unsigned __cudaPushCallConfiguration(dim3, dim3, std::size_t, void*) {
  nvcc_code_loaded("__cudaPushCallConfiguration");
}
cudaError_t __cudaPopCallConfiguration(dim3*, dim3*, std::size_t*, void*) {
  nvcc_code_loaded("__cudaPopCallConfiguration");
}
cudaError_t cudaLaunchKernel(const void*, dim3, dim3, void**, std::size_t, cudaStream_t) {
  nvcc_code_loaded("cudaLaunchKernel");
}

}  // extern "C"
