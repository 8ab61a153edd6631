// The sm_80+ warp-level matrix instructions as inline PTX (PTX ISA: "Matrix Fragments for
// mma.m16n8k16 with floating point type", "ldmatrix", "cp.async"), for the kernels that keep
// their accumulators in registers (flash_attention.cu). Fragment registers are 32-bit words of
// two 16-bit elements, the lower-numbered element in the low half. With groupID g = lane >> 2
// and threadID_in_group q = lane % 4:
//   A (16 x 16, row):  a[0] = (g, 2q..2q+1), a[1] = (g+8, 2q..), a[2] = (g, 2q+8..),
//                      a[3] = (g+8, 2q+8..)            (row, columns)
//   B (16 x 8, col):   b[0] = (2q..2q+1, g), b[1] = (2q+8..2q+9, g)   (rows k, column n)
//   C, D (16 x 8 f32): d[0] = (g, 2q), d[1] = (g, 2q+1), d[2] = (g+8, 2q), d[3] = (g+8, 2q+1)
// So the D tiles of two adjacent n8 tiles, packed to 16 bits, are the A fragment of one k16
// slice: a[0], a[1] from the first tile's (d[0], d[1]), (d[2], d[3]); a[2], a[3] from the second's.
// A host compiler (the emulated device: core/cuda's .cu files rewritten under
// tests/gpu/emulation/emu_cuda.h) gets the same functions from tests/gpu/emulation/emu_mma.h;
// __CUDACC__ is the one switch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstring>
#include <type_traits>

namespace fsdp::cuda {

// Two floats rounded to T (bf16 or fp16) in one fragment word: `lo` in the low half.
template <typename T>
__device__ __forceinline__ unsigned pack_floats(float lo, float hi) {
  unsigned w;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    memcpy(&w, &h, sizeof w);
  } else {
    const __half2 h = __floats2half2_rn(lo, hi);
    memcpy(&w, &h, sizeof w);
  }
  return w;
}

}  // namespace fsdp::cuda

#if defined(__CUDACC__)

namespace fsdp::cuda {

// d += a * b for one m16n8k16 tile, T bf16 or fp16, float accumulators (layouts above).
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const unsigned (&a)[4],
                                             const unsigned (&b)[2]) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    static_assert(std::is_same_v<T, __half>, "mma_m16n8k16 takes bf16 or fp16");
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Four 8x8 matrices of 16-bit elements from shared memory: lane i gives the address of row
// i % 8 of matrix i / 8 (16 contiguous bytes, 16-byte aligned); lane l receives in r[m] the word
// of matrix m's row l / 4 holding its columns 2 * (l % 4) and +1.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

// As ldmatrix_x4, each matrix transposed: lane l receives in r[m] the elements (2 * (l % 4),
// l / 4) and (2 * (l % 4) + 1, l / 4) of matrix m (row, column as stored).
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

// As ldmatrix_x4 with two matrices (lanes 0 to 15 give the addresses).
__device__ __forceinline__ void ldmatrix_x2(unsigned (&r)[2], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(shared_address(row)));
}

// 16 bytes from global to shared memory without passing through registers; `valid` false
// fills the 16 bytes with zeros (src-size 0: nothing read). Both addresses 16-byte aligned.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(shared_address(dst)), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}

// Closes the group of this thread's cp.async copies issued since the last commit.
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}

// Waits until at most `kPending` of this thread's committed groups are still in flight (their
// data visible to this thread; a __syncthreads makes it the CTA's).
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

}  // namespace fsdp::cuda

#elif !defined(FSDP_EMU_MMA_H)
#error "mma_sm80.cuh for a host compiler needs tests/gpu/emulation/emu_cuda.h included first"
#endif
