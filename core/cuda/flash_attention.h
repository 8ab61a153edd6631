// The tiled (FlashAttention-2 style) causal attention behind attention_forward/backward
// (kernels.h) for 16-bit storage (T bf16 or fp16) and head dim 64: tensor cores through mma.sync
// with register accumulators, the online softmax in float, the scores never in device memory.
// attention.cu calls these when flash_attention_applies(); every other case stays on the
// one-warp-per-row kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>

namespace fsdp::cuda {

constexpr int kFlashHeadDim = 64;

// Head dim 64, the pointers given (every input and output: read as tiles, written in vectors)
// 16-byte aligned, and the grid (batch, ceil(t / 64)) within CUDA's limits.
bool flash_attention_applies(std::int64_t batch, std::int64_t t, std::int64_t hd,
                             std::initializer_list<const void*> pointers);

template <typename T>
void flash_attention_forward(const T* q, const T* k, const T* v, T* o, float* lse,
                             std::int64_t batch, std::int64_t t, float scale, cudaStream_t stream);

// Two kernels, no atomics: dk, dv per key tile (looping over the query tiles at or after it),
// dq per query tile (looping over the key tiles at or before it); each recomputes P from lse.
template <typename T>
void flash_attention_backward(const T* q, const T* k, const T* v, const T* o, const T* dout,
                              const float* lse, T* dq, float* dk, float* dv, std::int64_t batch,
                              std::int64_t t, float scale, cudaStream_t stream);

}  // namespace fsdp::cuda
