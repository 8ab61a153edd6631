// Launch arithmetic, host-only and free of CUDA headers so that a CPU test checks it: how many
// blocks a grid-stride kernel gets, and how a broadcast binary op walks its two inputs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace fsdp::cuda {

// Elementwise kernels loop with a grid stride, so the grid need not cover n: it is capped at
// enough blocks to fill the device several times over (more only adds scheduling), and n of any
// size (beyond 2^31 too) is done by the loop. n == 0 launches nothing.
constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 132 * 32;  // H100's 132 SMs x 32 resident 256-thread blocks
constexpr unsigned grid_for(std::int64_t n, int threads = kThreads) {
  return static_cast<unsigned>(
      std::clamp<std::int64_t>((n + threads - 1) / threads, 0, kMaxBlocks));
}

// out = a op b, PyTorch's broadcasting, at most kMaxDims dims. Strides are in elements, 0 where
// a size-1 dim is broadcast; sizes are the output's. Leading dims of the shorter shape are 1.
constexpr int kMaxDims = 6;
struct BroadcastGeometry {
  int ndim = 0;
  std::int64_t size[kMaxDims] = {};
  std::int64_t a_stride[kMaxDims] = {}, b_stride[kMaxDims] = {};
  std::int64_t numel = 1;
};
// Throws fsdp::ValueError naming `op` and both shapes when they do not broadcast (or have more
// than kMaxDims dims).
BroadcastGeometry broadcast_geometry(const std::vector<std::int64_t>& a,
                                     const std::vector<std::int64_t>& b, const char* op);

}  // namespace fsdp::cuda
