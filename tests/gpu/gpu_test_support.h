// Parity tests of core/cuda against the CPU: skip (exit 77) without a device; device buffers
// that upload float values into float, bf16 or fp16 storage and come back as float; NaN-poisoned
// outputs; fresh random inputs (the seed is printed, FSDP_GPU_TEST_SEED repeats a run); and the
// relative-norm tolerance check, in which NaN fails.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/runtime.h"
#include "tests/gpu/storage16.h"

namespace fsdp::cuda::testing {

// Boost.Test global fixture: skip the whole executable where there is no usable device.
struct RequireDevice {
  RequireDevice() {
    std::string why;
    if (device_count(&why) == 0) {
      std::printf("no CUDA device (%s): skipping\n", why.c_str());
      std::exit(77);
    }
  }
};

// The emulated device (tests/gpu/emulation) runs kernels on a CPU core, some million times
// slower than a GPU: cases sized for a GPU (GPT-2's attention) run on real devices only.
inline bool on_emulated_device() {
  return device_properties(0).name.rfind("Emulated", 0) == 0;
}

// Tolerances on ||got - ref|| / ||ref|| (the issue's): storage and maths decide which applies.
// fp16 keeps 10 mantissa bits (bf16 7): one rounding is a relative error of at most 2^-11 (about
// 4.9e-4). 2e-3 (about four roundings, as bf16's 1e-2 is about 2.5 of its 2^-8) leaves room for
// a second rounding (a 16-bit intermediate, as the CPU's), float accumulation in another order
// and the cancellation in tanh's 1 - y^2 on a rounded y (1e-3 failed there for one seed in
// five), but not for a wrong term.
constexpr double kTolFp32 = 1e-5, kTolTf32 = 5e-4, kTolBf16 = 1e-2, kTolFp16 = 2e-3;
template <typename T>
constexpr double tolerance() {
  return std::is_same_v<T, float> ? kTolFp32 : std::is_same_v<T, __half> ? kTolFp16 : kTolBf16;
}

inline std::mt19937_64& rng() {
  static std::mt19937_64 engine = [] {
    const char* env = std::getenv("FSDP_GPU_TEST_SEED");
    std::uint64_t seed = env ? std::strtoull(env, nullptr, 10) : std::random_device{}();
    std::printf("FSDP_GPU_TEST_SEED=%llu\n", static_cast<unsigned long long>(seed));
    return std::mt19937_64(seed);
  }();
  return engine;
}

inline std::vector<float> randn(std::size_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng());
  return v;
}

inline std::vector<std::int32_t> randint(std::size_t n, std::int32_t high) {
  std::uniform_int_distribution<std::int32_t> d(0, high - 1);
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = d(rng());
  return v;
}

// The value a float takes in T's storage (bf16 and fp16 round): the CPU oracle gets the inputs
// the GPU actually sees, so the comparison measures the kernel, not the input rounding.
template <typename T>
std::vector<float> stored(std::vector<float> v) {
  for (float& x : v) x = from_storage(to_storage<T>(x));
  return v;
}

template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t n) : n_(n) {
    FSDP_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), (n ? n : 1) * sizeof(T)));
    poison();
  }
  explicit DeviceBuffer(const std::vector<float>& values) : DeviceBuffer(values.size()) {
    upload(values);
  }
  explicit DeviceBuffer(const std::vector<std::int32_t>& values) : DeviceBuffer(values.size()) {
    static_assert(std::is_same_v<T, std::int32_t>);
    FSDP_CUDA_CHECK(cudaMemcpy(ptr_, values.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
    FSDP_CUDA_CHECK(cudaDeviceSynchronize());
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return ptr_; }
  std::size_t size() const { return n_; }
  // All bits set: NaN in float, bf16 and fp16, so an element a kernel forgets to write fails.
  // Memset and pageable copies run on the legacy stream, which a non-blocking stream does not
  // wait for: each ends with a device synchronisation so tests on their own streams see them.
  void poison() {
    FSDP_CUDA_CHECK(cudaMemset(ptr_, 0xff, (n_ ? n_ : 1) * sizeof(T)));
    FSDP_CUDA_CHECK(cudaDeviceSynchronize());
  }
  void upload(const std::vector<float>& values) {
    std::vector<T> host(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) host[i] = to_storage<T>(values[i]);
    FSDP_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
    FSDP_CUDA_CHECK(cudaDeviceSynchronize());
  }
  std::vector<float> download() const {
    FSDP_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> host(n_);
    FSDP_CUDA_CHECK(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    std::vector<float> out(n_);
    for (std::size_t i = 0; i < n_; ++i) out[i] = from_storage(host[i]);
    return out;
  }

 private:
  T* ptr_ = nullptr;
  std::size_t n_ = 0;
};

// ||got - ref|| / max(||ref||, 1); any NaN or Inf in `got` is infinity. Relative for references
// of norm 1 or more, absolute below (torch.testing's atol beside rtol): a one-element reference
// near zero (GELU's or a confident cross-entropy's cancellation) is then judged by its absolute
// error, which is what float arithmetic bounds there.
inline double relative_error(const std::vector<float>& got, const std::vector<double>& ref) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    diff += (got[i] - ref[i]) * (got[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1.0);
}
inline double relative_error(const std::vector<float>& got, const std::vector<float>& ref) {
  return relative_error(got, std::vector<double>(ref.begin(), ref.end()));
}

#define FSDP_CHECK_CLOSE(what, got, ref, tol)                                         \
  do {                                                                                \
    const auto& got_ = (got);                                                         \
    const auto& ref_ = (ref);                                                         \
    BOOST_TEST_REQUIRE(got_.size() == ref_.size(), what << ": size");                 \
    const double err_ = ::fsdp::cuda::testing::relative_error(got_, ref_);            \
    BOOST_TEST(err_ <= (tol), what << ": relative error " << err_ << " > " << (tol)); \
  } while (0)

}  // namespace fsdp::cuda::testing
