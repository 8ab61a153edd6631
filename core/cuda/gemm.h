// Matrix products through cuBLASLt, in row-major terms: C = alpha * op(A) @ op(B) + beta * C
// (+ bias per column of C, then GELU, when asked), batched with strides. cuBLASLt is
// column-major; a row-major C is a column-major C^T = op(B)^T op(A)^T, so the call swaps A and B
// and keeps each transpose flag (see gemm.cpp).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <unordered_map>

namespace fsdp::cuda {

enum class GemmPrecision {
  FP32,  // float in/out, float maths
  TF32,  // float in/out, tensor cores at TF32 (10-bit mantissa) inputs: only when asked
  BF16,  // bf16 in/out (and bias), float accumulation
  FP16,  // fp16 in/out (and bias), float accumulation (CUBLAS_COMPUTE_32F, float scale)
};
// GELU is the tanh form. BiasGradA writes op(A)'s sums over k (m values, C's type) to `bias`:
// a linear layer's bias gradient from its weight gradient's product (cuBLASLt's BGRADB, whose
// B is our A), where the algorithms take it (try_run).
enum class GemmEpilogue { None, Bias, Gelu, BiasGelu, BiasGradA };

struct GemmArgs {
  GemmPrecision precision = GemmPrecision::FP32;
  bool trans_a = false, trans_b = false;
  std::int64_t m = 0, n = 0, k = 0;  // op(A) is m x k, op(B) is k x n, C is m x n
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  std::int64_t lda = 0, ldb = 0, ldc = 0;  // row-major leading dims; 0 = the dense default
  std::int64_t batch = 1;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // elements between batch entries
  float alpha = 1.0f, beta = 0.0f;
  GemmEpilogue epilogue = GemmEpilogue::None;
  const void* bias = nullptr;  // n values of C's type, added to each row of C (BiasGradA:
                               // m values written)
};

// One cuBLASLt handle and its workspace (32 MiB: Hopper's kernels want that much; llm.c does
// the same), and the heuristic's answer for each problem it has seen (shapes, leading dims,
// strides, precision, epilogue and the operands' alignments: what the heuristic is told), refusals
// included, so a training step's products ask it once each, not every call. Not thread-safe: one
// per stream-owning thread.
class Gemm {
 public:
  Gemm();
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;
  // Throws fsdp::ValueError for inconsistent arguments and NotImplementedError when cuBLASLt
  // has no algorithm for the combination, both naming the shapes.
  void run(const GemmArgs& args, cudaStream_t stream);
  // run, but false (nothing queued) where cuBLASLt has no algorithm for the combination: for
  // the optional epilogues (BiasGradA), whose callers then do the work apart.
  bool try_run(const GemmArgs& args, cudaStream_t stream);
  // How many problems have the heuristic's answer kept.
  std::size_t plans() const { return plans_.size(); }

 private:
  // Every field of a problem the heuristic sees, as integers.
  using PlanKey = std::array<std::int64_t, 17>;
  struct PlanKeyHash {
    std::size_t operator()(const PlanKey& k) const;
  };
  struct Plan {
    bool found = false;  // false: no algorithm (try_run answers false)
    cublasLtMatmulAlgo_t algo{};
  };
  // Distinct problems kept at most (a generation's growing lengths would add one per token);
  // past it the table starts again.
  static constexpr std::size_t kMaxPlans = 4096;

  // The heuristic's answer for a problem (cuBLASLt's operand order: `first` is our B).
  Plan choose(cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t first, cublasLtMatrixLayout_t second,
              cublasLtMatrixLayout_t c, std::uint32_t align_first, std::uint32_t align_second,
              std::uint32_t align_c);

  std::unordered_map<PlanKey, Plan, PlanKeyHash> plans_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 32u << 20;
};

// The dense default leading dims of row-major operands (what lda/ldb/ldc == 0 stand for).
std::int64_t default_ld_a(const GemmArgs& g);
std::int64_t default_ld_b(const GemmArgs& g);

}  // namespace fsdp::cuda
