// The one place that calls cblas ?gemm for the op kernels (linalg, blocked_attention, gemm16;
// each product is reported to an active GemmRecorder): row-major
// C (m x n) = op(A) op(B) + beta * C for float and double.
#pragma once

#include <cblas.h>

#include <cstdint>
#include <type_traits>

#include "core/gemm_recorder.h"

namespace fsdp::ops_detail {

// OpenBLAS 0.3 runs a product of at most this many multiply-adds on the calling thread
// (interface/gemm.c: SMP_THRESHOLD_MIN 65536 x GEMM_MULTITHREAD_THRESHOLD, 4 in Debian's
// build); larger ones go to its own threads. A batch of products this small is split across the
// intra-op pool instead (linalg.cpp), where OpenBLAS alone would run them one after another.
#ifndef OPENBLAS_GEMM_MULTITHREAD_THRESHOLD
#define OPENBLAS_GEMM_MULTITHREAD_THRESHOLD 4  // OpenBLAS's default
#endif
inline constexpr std::int64_t kBlasSerialMacs = 65536 * OPENBLAS_GEMM_MULTITHREAD_THRESHOLD;

template <typename T>
void blas_gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
               const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c,
               std::int64_t ldc) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  const auto ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
  const auto M = static_cast<blasint>(m), N = static_cast<blasint>(n), K = static_cast<blasint>(k);
  const auto la = static_cast<blasint>(lda), lb = static_cast<blasint>(ldb);
  const auto lc = static_cast<blasint>(ldc);
  record_gemm({trans_a, trans_b, m, n, k, std::is_same_v<T, double>, beta == T(0)});
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, a, la, b, lb, beta, c, lc);
  else
    cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, 1.0, a, la, b, lb, beta, c, lc);
}

}  // namespace fsdp::ops_detail
