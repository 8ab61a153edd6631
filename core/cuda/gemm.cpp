#include "core/cuda/gemm.h"

#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "core/cuda/cublaslt_library.h"
#include "core/cuda/cuda_check.h"
#include "core/error.h"

namespace fsdp::cuda {
namespace {

// The storage type of the operands, the output and the bias, and its element size.
cudaDataType_t storage_type(GemmPrecision p) {
  return p == GemmPrecision::BF16   ? CUDA_R_16BF
         : p == GemmPrecision::FP16 ? CUDA_R_16F
                                    : CUDA_R_32F;
}
std::int64_t element_size(GemmPrecision p) {
  return storage_type(p) == CUDA_R_32F ? 4 : 2;
}

std::string describe(const GemmArgs& g) {
  static constexpr const char* kPrecision[] = {"fp32", "tf32", "bf16", "fp16"};
  static constexpr const char* kEpilogue[] = {"none", "bias", "gelu", "bias+gelu", "bias-grad-a"};
  return fmt::format("gemm {} m={} n={} k={} trans_a={} trans_b={} batch={} epilogue={}",
                     kPrecision[int(g.precision)], g.m, g.n, g.k, g.trans_a, g.trans_b, g.batch,
                     kEpilogue[int(g.epilogue)]);
}

// RAII for the descriptors: a throw between create and destroy must not leak them.
struct LayoutDeleter {
  void operator()(cublasLtMatrixLayoutOpaque_t* p) const {
    cublaslt().cublasLtMatrixLayoutDestroy(p);
  }
};
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LayoutDeleter>;
struct DescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* p) const { cublaslt().cublasLtMatmulDescDestroy(p); }
};
struct PrefDeleter {
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const {
    cublaslt().cublasLtMatmulPreferenceDestroy(p);
  }
};

// A row-major (rows x cols, leading dim ld) matrix is the column-major (cols x rows) one.
Layout row_major_layout(cudaDataType_t type, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                        std::int64_t batch, std::int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  FSDP_CUDA_CHECK(cublaslt().cublasLtMatrixLayoutCreate(&l, type, cols, rows, ld));
  Layout layout(l);
  if (batch > 1) {
    int count = static_cast<int>(batch);
    FSDP_CUDA_CHECK(cublaslt().cublasLtMatrixLayoutSetAttribute(
        l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    FSDP_CUDA_CHECK(cublaslt().cublasLtMatrixLayoutSetAttribute(
        l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return layout;
}

}  // namespace

std::int64_t default_ld_a(const GemmArgs& g) {
  return g.trans_a ? g.m : g.k;  // A stored (k x m) when transposed, else (m x k)
}
std::int64_t default_ld_b(const GemmArgs& g) {
  return g.trans_b ? g.k : g.n;
}

Gemm::Gemm() {
  FSDP_CUDA_CHECK(cublaslt().cublasLtCreate(&handle_));
  FSDP_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

Gemm::~Gemm() {
  cudaFree(workspace_);
  cublaslt().cublasLtDestroy(handle_);
}

namespace {

// The largest power of two up to 256 dividing the address of every batch entry.
std::uint32_t alignment(const void* p, std::int64_t batch, std::int64_t stride_bytes) {
  std::uintptr_t bits = reinterpret_cast<std::uintptr_t>(p);
  if (batch > 1) bits |= static_cast<std::uintptr_t>(stride_bytes);
  std::uint32_t a = 256;
  while (a > 1 && bits % a != 0) a >>= 1;
  return a;
}

}  // namespace

std::size_t Gemm::PlanKeyHash::operator()(const PlanKey& k) const {
  std::size_t h = 0;
  for (std::int64_t v : k) h = h * 1000003u ^ std::hash<std::int64_t>{}(v);
  return h;
}

Gemm::Plan Gemm::choose(cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t first,
                        cublasLtMatrixLayout_t second, cublasLtMatrixLayout_t c,
                        std::uint32_t align_first, std::uint32_t align_second,
                        std::uint32_t align_c) {
  cublasLtMatmulPreference_t p = nullptr;
  FSDP_CUDA_CHECK(cublaslt().cublasLtMatmulPreferenceCreate(&p));
  std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, PrefDeleter> pref(p);
  FSDP_CUDA_CHECK(cublaslt().cublasLtMatmulPreferenceSetAttribute(
      p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_, sizeof(workspace_bytes_)));
  const std::pair<cublasLtMatmulPreferenceAttributes_t, std::uint32_t> alignments[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_first},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_second},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_c}};
  for (const auto& [attribute, bytes] : alignments)
    FSDP_CUDA_CHECK(
        cublaslt().cublasLtMatmulPreferenceSetAttribute(p, attribute, &bytes, sizeof(bytes)));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  const cublasStatus_t status = cublaslt().cublasLtMatmulAlgoGetHeuristic(
      handle_, d, first, second, c, c, p, 1, &heuristic, &found);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) return {};  // the combination, not an error
  check_status(status, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
  if (found == 0 || heuristic.state != CUBLAS_STATUS_SUCCESS ||
      heuristic.workspaceSize > workspace_bytes_)
    return {};
  return {true, heuristic.algo};
}

void Gemm::run(const GemmArgs& g, cudaStream_t stream) {
  FSDP_CHECK(try_run(g, stream), NotImplementedError, "{}: cuBLASLt has no algorithm for it",
             describe(g));
}

bool Gemm::try_run(const GemmArgs& g, cudaStream_t stream) {
  FSDP_CHECK(g.m >= 0 && g.n >= 0 && g.k >= 0 && g.batch >= 1, ValueError,
             "{}: sizes must be non-negative and batch at least 1", describe(g));
  const bool bias_grad = g.epilogue == GemmEpilogue::BiasGradA;
  const bool has_bias = g.epilogue == GemmEpilogue::Bias || g.epilogue == GemmEpilogue::BiasGelu;
  FSDP_CHECK(!(has_bias || bias_grad) || g.bias, ValueError,
             "{}: the bias epilogue needs a bias pointer", describe(g));
  // The bias gradient of an empty or batched product: the caller's own sums.
  if (bias_grad && (g.m == 0 || g.n == 0 || g.k == 0 || g.batch != 1)) return false;
  if (g.m == 0 || g.n == 0) return true;
  if (g.k == 0) {
    // An empty sum: C = beta * C, and cuBLASLt takes no (rows x 0) layout. Only beta = 0 (what
    // the ops use) is done here: zeros, each batch entry's m rows of n values.
    FSDP_CHECK(g.beta == 0.0f && g.epilogue == GemmEpilogue::None, NotImplementedError,
               "{}: k = 0 is done only with beta = 0 and no epilogue", describe(g));
    const std::size_t elem = element_size(g.precision);
    const std::int64_t ldc = g.ldc ? g.ldc : g.n;
    for (std::int64_t e = 0; e < g.batch; ++e)
      FSDP_CUDA_CHECK(cudaMemset2DAsync(static_cast<char*>(g.c) + e * g.stride_c * elem, ldc * elem,
                                        0, g.n * elem, g.m, stream));
    return true;
  }
  const std::int64_t lda = g.lda ? g.lda : default_ld_a(g);
  const std::int64_t ldb = g.ldb ? g.ldb : default_ld_b(g);
  const std::int64_t ldc = g.ldc ? g.ldc : g.n;
  FSDP_CHECK(lda >= default_ld_a(g) && ldb >= default_ld_b(g) && ldc >= g.n, ValueError,
             "{}: leading dims lda={} ldb={} ldc={} are smaller than the rows they hold",
             describe(g), lda, ldb, ldc);
  // Batch entries of C overlapping would be written by several blocks at once.
  FSDP_CHECK(g.batch == 1 || g.stride_c >= (g.m - 1) * ldc + g.n, ValueError,
             "{}: stride_c={} makes the batch entries of C overlap (each spans {} elements)",
             describe(g), g.stride_c, (g.m - 1) * ldc + g.n);

  const cudaDataType_t type = storage_type(g.precision);
  const cublasComputeType_t compute =
      g.precision == GemmPrecision::TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  cublasLtMatmulDesc_t d = nullptr;
  FSDP_CUDA_CHECK(cublaslt().cublasLtMatmulDescCreate(&d, compute, CUDA_R_32F));
  std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDeleter> desc(d);
  // Column-major C^T = op(B)^T op(A)^T: cuBLASLt's first operand is B, its second is A, and
  // each keeps its own transpose flag (the layouts below already view them transposed).
  const cublasOperation_t op_first = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  FSDP_CUDA_CHECK(cublaslt().cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA,
                                                            &op_first, sizeof(op_first)));
  FSDP_CUDA_CHECK(cublaslt().cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB,
                                                            &op_second, sizeof(op_second)));
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  if (g.epilogue == GemmEpilogue::Bias) epilogue = CUBLASLT_EPILOGUE_BIAS;
  if (g.epilogue == GemmEpilogue::Gelu) epilogue = CUBLASLT_EPILOGUE_GELU;
  if (g.epilogue == GemmEpilogue::BiasGelu) epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
  if (bias_grad) epilogue = CUBLASLT_EPILOGUE_BGRADB;  // cuBLASLt's B is our A
  FSDP_CUDA_CHECK(cublaslt().cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                            &epilogue, sizeof(epilogue)));
  if (has_bias || bias_grad) {
    FSDP_CUDA_CHECK(cublaslt().cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                              &g.bias, sizeof(g.bias)));
    FSDP_CUDA_CHECK(cublaslt().cublasLtMatmulDescSetAttribute(
        d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type, sizeof(type)));
    if (g.batch > 1) {  // one bias for every batch entry
      std::int64_t zero = 0;
      FSDP_CUDA_CHECK(cublaslt().cublasLtMatmulDescSetAttribute(
          d, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &zero, sizeof(zero)));
    }
  }

  // Stored shapes (row-major): B is (k x n), or (n x k) when transposed; A likewise.
  Layout lb = g.trans_b ? row_major_layout(type, g.n, g.k, ldb, g.batch, g.stride_b)
                        : row_major_layout(type, g.k, g.n, ldb, g.batch, g.stride_b);
  Layout la = g.trans_a ? row_major_layout(type, g.k, g.m, lda, g.batch, g.stride_a)
                        : row_major_layout(type, g.m, g.k, lda, g.batch, g.stride_a);
  Layout lc = row_major_layout(type, g.m, g.n, ldc, g.batch, g.stride_c);

  // Unless told, the heuristic assumes 256-byte aligned operands; views start anywhere, and an
  // algorithm picked for a misaligned operand faults or is wrong. Each operand's alignment, its
  // batch entries' included (cuBLASLt's A is our B).
  const std::int64_t elem = element_size(g.precision);
  const std::uint32_t align_a = alignment(g.b, g.batch, g.stride_b * elem);
  const std::uint32_t align_b = alignment(g.a, g.batch, g.stride_a * elem);
  const std::uint32_t align_c = alignment(g.c, g.batch, g.stride_c * elem);
  const PlanKey key{int(g.precision),
                    g.trans_a,
                    g.trans_b,
                    g.m,
                    g.n,
                    g.k,
                    lda,
                    ldb,
                    ldc,
                    g.batch,
                    g.stride_a,
                    g.stride_b,
                    g.stride_c,
                    int(g.epilogue),
                    align_a,
                    align_b,
                    align_c};
  auto plan = plans_.find(key);
  if (plan == plans_.end()) {
    if (plans_.size() >= kMaxPlans) plans_.clear();
    plan = plans_.emplace(key, choose(d, lb.get(), la.get(), lc.get(), align_a, align_b, align_c))
               .first;
  }
  if (!plan->second.found) return false;
  FSDP_CUDA_CHECK(cublaslt().cublasLtMatmul(
      handle_, d, &g.alpha, g.b, lb.get(), g.a, la.get(), &g.beta, g.c, lc.get(), g.c, lc.get(),
      &plan->second.algo, workspace_, workspace_bytes_, stream));
  return true;
}

}  // namespace fsdp::cuda
