// The tiled (FlashAttention-2 style) causal attention for 16-bit storage (T bf16 or fp16) and
// head dim 64, 96 or 128 (kFlashHeadDims): tensor cores through
// mma.sync with register accumulators, the online softmax in float, the scores never in device
// memory. Every operand is read or written through its strides (a (batch, head)'s rows anywhere,
// each row's 64 elements contiguous), so q, k and v can be views of one packed projection and o a
// view of the merged (L, N, E) output; query heads may share kv heads (grouped-query attention, the
// Hugging Face Llamas'). The CUDA kernel table calls these when flash_attention_applies(); every
// other causal case takes the one-warp-per-row kernels (attention.cu, sdpa_attention.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "core/cuda/kernels.h"

namespace fsdp::cuda {

// The head dims the tiles are built for (flash_attention_applies): 64 (GPT-2's, the 1B-class
// Llamas'), 96 (Phi-3 mini's), 128 (the 7B-class Llamas', Qwen3's).
constexpr int kFlashHeadDim = 64;
constexpr int kFlashHeadDimWide = 128;
constexpr int kFlashHeadDims[] = {kFlashHeadDim, 96, kFlashHeadDimWide};

// B batch entries of H heads of t rows of hd elements; element (b, h, i, c) of an operand at b *
// batch + h * head + i * row + c; lse (B, H, t) float, contiguous. dout, dq, dk, dv: the
// backward's. Grouped-query heads: query head h reads kv head h / group of k and v (H / group kv
// heads), whose dk and dv sum over the group's query heads.
struct FlashGeometry {
  std::int64_t B = 0, H = 1, group = 1, t = 0, hd = kFlashHeadDim;
  float scale = 1.0f;
  AttentionOperandStrides q, k, v, o, dout, dq, dk, dv;
};

// Every operand (batch, t, hd) contiguous, one head each.
inline FlashGeometry dense_flash_geometry(std::int64_t batch, std::int64_t t, float scale,
                                          std::int64_t hd = kFlashHeadDim) {
  const AttentionOperandStrides s{.batch = t * hd, .head = 0, .row = hd};
  return {.B = batch,
          .H = 1,
          .t = t,
          .hd = hd,
          .scale = scale,
          .q = s,
          .k = s,
          .v = s,
          .o = s,
          .dout = s,
          .dq = s,
          .dk = s,
          .dv = s};
}

// g.hd one of kFlashHeadDims, the pointers given and every row of g's operands 16-byte aligned
// (read as tiles, written in vectors), group dividing H, and the grid (B * H, ceil(t / 64)) within
// CUDA's limits. An operand the call does not use (the backward's, in a forward) keeps its zero
// strides.
bool flash_attention_applies(const FlashGeometry& g, std::initializer_list<const void*> pointers);

// The dynamic shared memory of each kernel at head dim hd (bytes; zeros for a head dim without
// tiles): above 48 KiB past head dim 64,
// which the launchers opt into (cudaFuncSetAttribute) once per kernel and device.
struct FlashSharedBytes {
  std::size_t forward, backward_dq, backward_dkdv;
};
FlashSharedBytes flash_shared_bytes(std::int64_t hd);

template <typename T>
void flash_attention_forward(const T* q, const T* k, const T* v, T* o, float* lse,
                             const FlashGeometry& g, cudaStream_t stream);

// Two kernels, no atomics: dk, dv per key tile (looping over the query tiles at or after it, of
// each query head of its group),
// dq per query tile (looping over the key tiles at or before it); each recomputes P from lse
// and writes its tile once, in T. Every element of dq, dk and dv is overwritten.
template <typename T>
void flash_attention_backward(const T* q, const T* k, const T* v, const T* o, const T* dout,
                              const float* lse, T* dq, T* dk, T* dv, const FlashGeometry& g,
                              cudaStream_t stream);

}  // namespace fsdp::cuda
