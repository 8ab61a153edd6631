// core/cuda/mma_sm80.cuh's instructions on the host, for emu_cuda.h (which includes this before
// any .cu file's code). Warp-collective as on the device: every lane arrives (a warp barrier
// named after the instruction; divergent lanes are a fault), deposits ONLY its own registers or
// the 16 bytes its address names (executor's warp_stage), and takes from the warp's deposits
// exactly what the PTX ISA's fragment layout gives it (mma_sm80.cuh's comment); a wrong layout in
// a kernel computes wrong numbers here too. Shared memory is read before the barrier, so a read
// completes before any lane goes on, as the one instruction does on the device. Products are
// summed in float, k in order. cp.async lands in shared memory only when a cp.async.wait_group
// completes its group (zero fill honoured), so a missing commit or wait, or a wait that leaves
// the tile in flight, reads poisoned shared memory here as stale data on a device.
#pragma once
#define FSDP_EMU_MMA_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <type_traits>
#include <vector>

#include "tests/gpu/emulation/emu_executor.h"

namespace fsdp::cuda {
namespace emu_mma {

// Half `h` (0 low, 1 high) of a fragment word as T's value.
template <typename T>
float element(std::uint32_t word, int h) {
  const auto bits = static_cast<unsigned short>(word >> (16 * h));
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    float f;
    const std::uint32_t wide = std::uint32_t(bits) << 16;
    std::memcpy(&f, &wide, sizeof f);
    return f;
  } else {
    static_assert(std::is_same_v<T, __half>, "mma_m16n8k16 takes bf16 or fp16");
    return __half2float(__ushort_as_half(bits));
  }
}

inline std::uint32_t half_of(std::uint32_t word, int h) {
  return (word >> (16 * h)) & 0xffffu;
}

// kMats 8x8 matrices: lanes below 8 * kMats deposit their row's 16 bytes.
template <int kMats, bool kTrans>
void ldmatrix(unsigned* r, const void* row, const char* op) {
  const int l = fsdp::emu::lane();
  std::uint32_t mine[4] = {};
  const bool gives = l < 8 * kMats;
  if (gives) std::memcpy(mine, row, sizeof mine);
  const std::uint32_t* rows = fsdp::emu::warp_stage(~0u, mine, gives ? 4 : 0, op);
  auto word = [&](int m, int r8) { return rows + (8 * m + r8) * fsdp::emu::kStageWords; };
  for (int m = 0; m < kMats; ++m) {
    if constexpr (kTrans) {
      // Elements (2 * (l % 4), l / 4) and (2 * (l % 4) + 1, l / 4): column l / 4 of two rows.
      const int col = l / 4;
      const std::uint32_t lo = half_of(word(m, 2 * (l % 4))[col / 2], col % 2);
      const std::uint32_t hi = half_of(word(m, 2 * (l % 4) + 1)[col / 2], col % 2);
      r[m] = lo | hi << 16;
    } else {
      r[m] = word(m, l / 4)[l % 4];
    }
  }
}

}  // namespace emu_mma

template <typename T>
void mma_m16n8k16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  const std::uint32_t mine[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
  const std::uint32_t* regs = fsdp::emu::warp_stage(~0u, mine, 6, "mma.m16n8k16");
  // A(row, k): lane 4 * (row % 8) + (k % 8) / 2, register (row >= 8) + 2 * (k >= 8), half k % 2.
  auto a_at = [&](int row, int k) {
    const std::uint32_t* lane = regs + (4 * (row % 8) + (k % 8) / 2) * fsdp::emu::kStageWords;
    return emu_mma::element<T>(lane[(row >= 8) + 2 * (k >= 8)], k % 2);
  };
  // B(k, n): lane 4 * n + (k % 8) / 2, register 4 + (k >= 8), half k % 2.
  auto b_at = [&](int k, int n) {
    const std::uint32_t* lane = regs + (4 * n + (k % 8) / 2) * fsdp::emu::kStageWords;
    return emu_mma::element<T>(lane[4 + (k >= 8)], k % 2);
  };
  const int l = fsdp::emu::lane(), g = l >> 2, q = l & 3;
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i >> 1), col = 2 * q + (i & 1);
    float s = d[i];
    for (int k = 0; k < 16; ++k) s += a_at(row, k) * b_at(k, col);
    d[i] = s;
  }
}

inline void ldmatrix_x4(unsigned (&r)[4], const void* row) {
  emu_mma::ldmatrix<4, false>(r, row, "ldmatrix.x4");
}
inline void ldmatrix_x4_trans(unsigned (&r)[4], const void* row) {
  emu_mma::ldmatrix<4, true>(r, row, "ldmatrix.x4.trans");
}
inline void ldmatrix_x2(unsigned (&r)[2], const void* row) {
  emu_mma::ldmatrix<2, false>(r, row, "ldmatrix.x2");
}

namespace emu_mma {

// A thread's cp.async copies: each holds its 16 source bytes (read at issue, as the inputs do not
// change during a kernel) until a wait completes its group.
struct AsyncCopy {
  void* dst;
  unsigned char bytes[16];
};
struct AsyncCopies {
  std::uint64_t cta = 0;  // the CTA they belong to: a faulted CTA's leftovers are dropped
  std::vector<AsyncCopy> open;
  std::deque<std::vector<AsyncCopy>> committed;  // oldest first
};

// The calling thread's copies (CTAs run one at a time on an OS thread).
inline AsyncCopies& async_copies() {
  thread_local std::vector<AsyncCopies> per_thread;
  const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  if (per_thread.size() <= tid) per_thread.resize(tid + 1);
  AsyncCopies& c = per_thread[tid];
  if (c.cta != fsdp::emu::running_cta_serial()) {
    c.cta = fsdp::emu::running_cta_serial();
    c.open.clear();
    c.committed.clear();
  }
  return c;
}

}  // namespace emu_mma

inline void cp_async_16(void* dst, const void* src, bool valid) {
  emu_mma::AsyncCopy copy{dst, {}};
  if (valid) std::memcpy(copy.bytes, src, sizeof copy.bytes);
  emu_mma::async_copies().open.push_back(copy);
}
inline void cp_async_commit() {
  emu_mma::AsyncCopies& c = emu_mma::async_copies();
  c.committed.push_back(std::move(c.open));
  c.open.clear();
}
template <int kPending>
void cp_async_wait() {
  emu_mma::AsyncCopies& c = emu_mma::async_copies();
  while (c.committed.size() > static_cast<std::size_t>(kPending)) {
    for (const emu_mma::AsyncCopy& copy : c.committed.front())
      std::memcpy(copy.dst, copy.bytes, sizeof copy.bytes);
    c.committed.pop_front();
  }
}

}  // namespace fsdp::cuda
