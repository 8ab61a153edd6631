// cuBLASLt's product on host pointers, given the descriptors' values: D = epilogue(alpha *
// op(A) op(B) + beta * C [+ bias]) per batch entry, as NVIDIA's cublasLtMatmul documents it.
// Column-major unless a layout says CUBLASLT_ORDER_ROW; bias is a vector of D's rows broadcast
// over its columns; GELU is the tanh form; float accumulation, TF32 inputs rounded to 10
// mantissa bits (nearest even) under CUBLAS_COMPUTE_32F_FAST_TF32; one rounding into D's type.
#pragma once

#include "tests/gpu/emulation/cublaslt/descriptors.h"

namespace fsdp::emu::cublaslt {

struct MatmulProblem {
  MatmulDesc desc;
  Layout a, b, c, d;
  float alpha = 1.0f, beta = 0.0f;  // scale type CUDA_R_32F: read at call time
  const void* a_ptr = nullptr;
  const void* b_ptr = nullptr;
  const void* c_ptr = nullptr;
  void* d_ptr = nullptr;
};

// Whether the emulation computes this problem: CUBLAS_STATUS_INVALID_VALUE for sizes, leading
// dims or batches in conflict, CUBLAS_STATUS_NOT_SUPPORTED for what it does not emulate; the
// message starts with `call`. The pointers are not looked at.
Status check_matmul(const char* call, const MatmulDesc& desc, const Layout& a, const Layout& b,
                    const Layout& c, const Layout& d, bool c_is_d);

// Bytes from the first to one past the last element a layout's batch entries touch.
std::size_t span_bytes(const Layout& layout);

// The product, on host memory; `p` must have passed check_matmul.
void run_matmul(const MatmulProblem& p);

// x rounded to TF32 (10 mantissa bits), to nearest with ties to even; NaN and Inf kept.
float round_to_tf32(float x);
// The tanh form of GELU, as the epilogue computes it (float).
float gelu_tanh(float x);

}  // namespace fsdp::emu::cublaslt
