// CUDA's device language for the host compiler: core/cuda's .cu files, rewritten by
// rewrite_kernels.py (the <<<>>> launches into emu_launch.h's launch), compile with g++ under
// this header, included first. The qualifiers become plain C++ (__shared__: a static per OS
// thread, which runs one CTA at a time), the built-in variables and barriers are the
// executor's (emu_executor.h), the shuffles exchange through the warp's barrier, atomics are
// std::atomic_ref (launches on several streams run at once) and the device maths CUDA has beyond
// <cmath> are written here. Host compilers optimise with their own aliasing and ordering
// rules, so the emulation also catches code that only works by a compiler's leniency.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <math.h>  // the global overloads kernels call unqualified: isinf, exp(float), ...
#include <vector_functions.h>
#include <vector_types.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "tests/gpu/emulation/emu_executor.h"
#include "tests/gpu/emulation/emu_launch.h"
#include "tests/gpu/emulation/emu_mma.h"

// The CUDA headers define these for a host compiler; here they become plain C++.
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __launch_bounds__
#undef __shared__
#undef __align__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static thread_local
#define __align__(n) __attribute__((aligned(n)))

constexpr int warpSize = 32;

// cuda_runtime.h's C++ form, which it declares for nvcc only: `cudaFuncSetAttribute(kernel<T>,
// ...)` takes the kernel itself, so the .cu's call compiles unchanged under the host compiler,
// the kernel's address (as emu_launch.h's launch passes it) naming it to the runtime.
template <class T>
cudaError_t cudaFuncSetAttribute(T* function, cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(function), attr, value);
}

// --- barriers and shuffles (any 4- or 8-byte type; `width` splits the warp into segments)
inline void __syncthreads() {
  fsdp::emu::sync_block();
}
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  fsdp::emu::sync_warp(mask, "__syncwarp");
}
inline void __threadfence() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
}
inline void __threadfence_system() {  // the host's memory too: one address space here
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

namespace fsdp::emu {
template <typename T>
T shuffle(unsigned mask, T v, int source, const char* op) {
  static_assert(std::is_trivially_copyable_v<T> && (sizeof(T) == 4 || sizeof(T) == 8),
                "shuffles move 4- or 8-byte values");
  std::uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = warp_exchange(mask, bits, source, op);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}
}  // namespace fsdp::emu

// CUDA's rules: a source outside the lane's segment (xor into a later segment, down past its
// end, up before its start) gives the lane its own value.
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = warpSize) {
  const int lane = fsdp::emu::lane(), source = lane ^ lane_mask;
  return fsdp::emu::shuffle(mask, v, source / width > lane / width ? lane : source,
                            "__shfl_xor_sync");
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
  const int lane = fsdp::emu::lane(), source = lane + static_cast<int>(delta);
  return fsdp::emu::shuffle(mask, v, source / width != lane / width ? lane : source,
                            "__shfl_down_sync");
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
  const int lane = fsdp::emu::lane(), source = lane - static_cast<int>(delta);
  return fsdp::emu::shuffle(mask, v, source < lane / width * width ? lane : source,
                            "__shfl_up_sync");
}
template <typename T>
T __shfl_sync(unsigned mask, T v, int source_lane, int width = warpSize) {
  const int lane = fsdp::emu::lane();
  return fsdp::emu::shuffle(mask, v, lane / width * width + source_lane % width, "__shfl_sync");
}

// --- atomics: relaxed read-modify-writes, as CUDA's
template <typename T>
requires std::is_arithmetic_v<T> T atomicAdd(T* p, std::type_identity_t<T> v) {
  return std::atomic_ref<T>(*p).fetch_add(v, std::memory_order_relaxed);
}
template <typename T>
requires std::is_integral_v<T> T atomicMax(T* p, std::type_identity_t<T> v) {
  std::atomic_ref<T> a(*p);
  T old = a.load(std::memory_order_relaxed);
  while (old < v && !a.compare_exchange_weak(old, v, std::memory_order_relaxed)) {
  }
  return old;
}
template <typename T>
requires std::is_integral_v<T> T atomicMin(T* p, std::type_identity_t<T> v) {
  std::atomic_ref<T> a(*p);
  T old = a.load(std::memory_order_relaxed);
  while (v < old && !a.compare_exchange_weak(old, v, std::memory_order_relaxed)) {
  }
  return old;
}
template <typename T>
requires std::is_integral_v<T> T atomicCAS(T* p, std::type_identity_t<T> expected,
                                           std::type_identity_t<T> desired) {
  std::atomic_ref<T>(*p).compare_exchange_strong(expected, desired, std::memory_order_relaxed);
  return expected;
}
template <typename T>
requires std::is_arithmetic_v<T> T atomicExch(T* p, std::type_identity_t<T> v) {
  return std::atomic_ref<T>(*p).exchange(v, std::memory_order_relaxed);
}
namespace fsdp::emu {
// A 16-bit float's add: compare-and-swap on its bits, the sum rounded to nearest even.
template <typename H, typename ToFloat, typename FromFloat>
H atomic_add16(H* p, H v, ToFloat to_float, FromFloat from_float) {
  auto* bits = reinterpret_cast<unsigned short*>(p);
  unsigned short old = __atomic_load_n(bits, __ATOMIC_RELAXED), next;
  do {
    next = std::bit_cast<unsigned short>(from_float(to_float(std::bit_cast<H>(old)) + to_float(v)));
  } while (
      !__atomic_compare_exchange_n(bits, &old, next, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  return std::bit_cast<H>(old);
}
}  // namespace fsdp::emu
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* p, __nv_bfloat16 v) {
  return fsdp::emu::atomic_add16(
      p, v, [](__nv_bfloat16 x) { return __bfloat162float(x); },
      [](float x) { return __float2bfloat16_rn(x); });
}
inline __half atomicAdd(__half* p, __half v) {
  return fsdp::emu::atomic_add16(
      p, v, [](__half x) { return __half2float(x); }, [](float x) { return __float2half_rn(x); });
}

// --- loads and bit casts
template <typename T>
T __ldg(const T* p) {
  return *p;
}
namespace fsdp::emu {
template <typename To, typename From>
To bits_as(From x) {
  static_assert(sizeof(To) == sizeof(From));
  To out;
  std::memcpy(&out, &x, sizeof out);
  return out;
}
}  // namespace fsdp::emu
inline float __uint_as_float(unsigned u) {
  return fsdp::emu::bits_as<float>(u);
}
inline float __int_as_float(int i) {
  return fsdp::emu::bits_as<float>(i);
}
inline unsigned __float_as_uint(float f) {
  return fsdp::emu::bits_as<unsigned>(f);
}
inline int __float_as_int(float f) {
  return fsdp::emu::bits_as<int>(f);
}
inline double __longlong_as_double(long long i) {
  return fsdp::emu::bits_as<double>(i);
}
inline long long __double_as_longlong(double d) {
  return fsdp::emu::bits_as<long long>(d);
}

// --- maths CUDA has beyond <cmath> (the fast intrinsics as their accurate forms)
inline float rsqrtf(float x) {
  return 1.0f / std::sqrt(x);
}
inline double rsqrt(double x) {
  return 1.0 / std::sqrt(x);
}
inline float __expf(float x) {
  return std::exp(x);
}
inline float __logf(float x) {
  return std::log(x);
}
inline float __fdividef(float x, float y) {
  return x / y;
}
inline float __frcp_rn(float x) {
  return 1.0f / x;
}
inline float __saturatef(float x) {
  return x > 1.0f ? 1.0f : (x > 0.0f ? x : 0.0f);  // NaN gives 0, as CUDA's
}
// CUDA's min and max overloads, same type each side.
#define FSDP_EMU_MINMAX(T) \
  inline T min(T a, T b) { \
    return b < a ? b : a;  \
  }                        \
  inline T max(T a, T b) { \
    return a < b ? b : a;  \
  }
FSDP_EMU_MINMAX(int)
FSDP_EMU_MINMAX(unsigned)
FSDP_EMU_MINMAX(long)
FSDP_EMU_MINMAX(unsigned long)
FSDP_EMU_MINMAX(long long)
FSDP_EMU_MINMAX(unsigned long long)
#undef FSDP_EMU_MINMAX
inline float min(float a, float b) {
  return fminf(a, b);
}
inline float max(float a, float b) {
  return fmaxf(a, b);
}
inline double min(double a, double b) {
  return fmin(a, b);
}
inline double max(double a, double b) {
  return fmax(a, b);
}
