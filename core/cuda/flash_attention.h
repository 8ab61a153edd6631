// The tiled (FlashAttention-2 style) causal attention behind attention_forward/backward
// (kernels.h) for bf16 storage and head dim 64: tensor cores through nvcuda::wmma, the online
// softmax in float, the scores never in device memory. attention.cu calls these when
// flash_attention_applies(); every other case stays on the one-warp-per-row kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>

namespace fsdp::cuda {

constexpr int kFlashHeadDim = 64;

// Head dim 64, the pointers given (those read as tiles) 16-byte aligned, and the grid
// (batch, ceil(t / 64)) within CUDA's limits.
bool flash_attention_applies(std::int64_t batch, std::int64_t t, std::int64_t hd,
                             std::initializer_list<const void*> pointers);

void flash_attention_forward(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                             __nv_bfloat16* o, float* lse, std::int64_t batch, std::int64_t t,
                             float scale, cudaStream_t stream);

// Two kernels, no atomics: dk, dv per key tile (looping over the query tiles at or after it),
// dq per query tile (looping over the key tiles at or before it); each recomputes P from lse.
void flash_attention_backward(const __nv_bfloat16* q, const __nv_bfloat16* k,
                              const __nv_bfloat16* v, const __nv_bfloat16* o,
                              const __nv_bfloat16* dout, const float* lse, __nv_bfloat16* dq,
                              float* dk, float* dv, std::int64_t batch, std::int64_t t, float scale,
                              cudaStream_t stream);

}  // namespace fsdp::cuda
