// Matrix products of bfloat16 / float16 operands on a CPU without 16-bit arithmetic (AVX2/FMA,
// AVX-512F): blocks of the operands are converted to float32 in small reusable buffers and
// multiplied with sgemm, and each block of the product is rounded to 16 bits as soon as it is
// done, so no float32 copy of a whole operand or of the whole product is ever made. Operands are
// read through their strides (a transposed weight is converted from its rows, never copied).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace fsdp::ops_detail {

// c (m x n, row-major with row stride ldc) = a (m x k, strides as0, as1) . b (k x n, strides
// bs0, bs1) [+ bias (n elements, contiguous) in every row], every buffer of 16-bit dtype `dt`.
// Each output element is the float32 product of the float32 operands rounded once; the float32
// sum is OpenBLAS's for the block the element is in, which may differ in its last bits from
// the sum a single sgemm over the whole operands would give (an edge tile's kernel instead of
// a full one), so an element may round to the neighbouring 16-bit value (tests/core/ops).
void gemm_16bit(DType dt, std::int64_t m, std::int64_t n, std::int64_t k, const std::uint16_t* a,
                std::int64_t as0, std::int64_t as1, const std::uint16_t* b, std::int64_t bs0,
                std::int64_t bs1, const std::uint16_t* bias, std::uint16_t* c, std::int64_t ldc);

// The largest weight (out x in elements) linear_backward_16bit takes: its float32 copy and the
// float32 weight gradient are then 4 MiB each at most.
inline constexpr std::int64_t kLinearBackward16MaxWeight = std::int64_t(1) << 20;

// A linear layer's backward in one pass over the output gradient, for 16-bit dtype `dt`:
// gx (rows x in) = g (rows x out) . w (out x in) and gw (out x in) = g^T . x (rows x in), and
// gb (out) = the column sums of g, each optional (null). g and x are contiguous row-major; w is
// read through its strides (ws0, ws1). Blocks of rows of g and x are converted once and serve
// both products (two separate products convert g twice); w is converted whole and gw
// accumulated in float32, so out * in must be at most kLinearBackward16MaxWeight.
void linear_backward_16bit(DType dt, std::int64_t rows, std::int64_t in, std::int64_t out,
                           const std::uint16_t* g, const std::uint16_t* x, const std::uint16_t* w,
                           std::int64_t ws0, std::int64_t ws1, std::uint16_t* gx, std::uint16_t* gw,
                           std::uint16_t* gb);

}  // namespace fsdp::ops_detail
