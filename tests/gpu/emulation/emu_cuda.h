// CUDA's execution model on the host, enough for core/cuda's tiled attention kernels: a launch
// runs its CTAs one after another, each as blockDim.x std::threads; __syncthreads and __syncwarp
// are std::barriers, __shfl_xor_sync exchanges through a per-warp buffer, __shared__ is a
// function-static (one CTA at a time). meson.build rewrites the kernels' source for it (the
// <<<>>> launches into emulated_launch calls). Host compilers optimize the kernels' code with
// their own aliasing and ordering rules, so the emulation also catches code that only works by
// a compiler's leniency.
#pragma once

#include <cuda_runtime_api.h>
#include <vector_functions.h>
#include <vector_types.h>

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/gpu/emulation/emu_wmma.h"

// The CUDA headers define these for the host compiler as attributes; here they become plain C++.
#undef __global__
#undef __device__
#undef __forceinline__
#undef __launch_bounds__
#undef __shared__
#undef __align__
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(threads)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define FSDP_CUDA_CHECK_LAUNCH() (void)0

struct EmulatedIndex {
  unsigned x = 0, y = 0, z = 0;
};
inline thread_local EmulatedIndex threadIdx;
inline EmulatedIndex blockIdx, gridDim, blockDim;

struct EmulatedWarp {
  std::barrier<> barrier{32};
  float exchange[32];
};
inline std::barrier<>* emulated_cta = nullptr;
inline thread_local EmulatedWarp* emulated_warp = nullptr;

inline void __syncthreads() {
  emulated_cta->arrive_and_wait();
}
inline void __syncwarp(unsigned = 0xffffffffu) {
  emulated_warp->barrier.arrive_and_wait();
}
inline float __shfl_xor_sync(unsigned, float v, int lane_mask) {
  const unsigned lane = threadIdx.x & 31;
  emulated_warp->exchange[lane] = v;
  __syncwarp();
  const float r = emulated_warp->exchange[lane ^ lane_mask];
  __syncwarp();
  return r;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

namespace nvcuda::wmma {
inline int emulated_lane() {
  return threadIdx.x & 31;
}
inline void emulated_syncwarp() {
  __syncwarp();
}
}  // namespace nvcuda::wmma

template <typename Kernel, typename... Args>
void emulated_launch(Kernel kernel, dim3 grid, int threads, int /*shared*/, cudaStream_t /*stream*/,
                     Args... args) {
  gridDim = {grid.x, grid.y, grid.z};
  blockDim = {static_cast<unsigned>(threads), 1, 1};
  for (unsigned by = 0; by < grid.y; ++by)
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      blockIdx = {bx, by, 0};
      std::barrier<> cta(threads);
      emulated_cta = &cta;
      std::vector<EmulatedWarp> warps(threads / 32);
      std::vector<std::thread> lanes;
      for (int t = 0; t < threads; ++t)
        lanes.emplace_back([&, t] {
          threadIdx = {static_cast<unsigned>(t), 0, 0};
          emulated_warp = &warps[t / 32];
          kernel(args...);
        });
      for (std::thread& lane : lanes) lane.join();
    }
}
