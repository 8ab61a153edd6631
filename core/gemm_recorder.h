// A record of the matrix products the op kernels hand to BLAS (mm, bmm, linear, attention, the
// 16-bit products' float32 blocks), for profiling what bounds a step: replaying a step's products
// alone gives its GEMM-only time, hence a ceiling on its speed (bench/core/bench_gemm_bound).
//
// At most one recorder is active in a process. While none is, a product costs one relaxed atomic
// load; while one is, every product on every thread (the intra-op pool's included) is appended
// under a mutex.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

namespace fsdp {

// One product C (m x n) = op(A) op(B) + beta C, row-major, as passed to ?gemm.
struct GemmCall {
  bool trans_a = false, trans_b = false;
  std::int64_t m = 0, n = 0, k = 0;
  bool is_double = false;
  bool beta_zero = true;
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * k; }
};

class GemmRecorder {
 public:
  // Starts recording; a RuntimeError if another recorder is active.
  GemmRecorder();
  ~GemmRecorder();
  GemmRecorder(const GemmRecorder&) = delete;
  GemmRecorder& operator=(const GemmRecorder&) = delete;

  // The products so far, in call order (products from several threads interleave).
  std::vector<GemmCall> calls() const;
  void clear();

 private:
  friend void record_gemm(const GemmCall& call);
  mutable std::mutex mu_;
  std::vector<GemmCall> calls_;
};

// Called by the BLAS wrapper for every product; appends to the active recorder, if any.
void record_gemm(const GemmCall& call);

}  // namespace fsdp
