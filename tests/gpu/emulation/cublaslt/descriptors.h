// The emulated cuBLASLt's descriptors as plain values (what cublasLtMatrixLayout_t,
// cublasLtMatmulDesc_t and cublasLtMatmulPreference_t point to), and their attribute setters
// with cuBLASLt's statuses: a wrong size or null buffer is CUBLAS_STATUS_INVALID_VALUE (as the
// header documents), an attribute or value the emulation does not implement is
// CUBLAS_STATUS_NOT_SUPPORTED, each with one line naming it.
#pragma once

#include <cublasLt.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace fsdp::emu::cublaslt {

// A status and, when it is not CUBLAS_STATUS_SUCCESS, the line that says why.
struct Status {
  cublasStatus_t code = CUBLAS_STATUS_SUCCESS;
  std::string message;
  bool ok() const { return code == CUBLAS_STATUS_SUCCESS; }
};
Status invalid(std::string message);
Status not_supported(std::string message);

struct Layout {
  cudaDataType_t type = CUDA_R_32F;
  cublasLtOrder_t order = CUBLASLT_ORDER_COL;
  std::uint64_t rows = 0, cols = 0;
  std::int64_t ld = 0;
  std::int32_t batch_count = 1;
  std::int64_t batch_stride = 0;  // elements
};

struct MatmulDesc {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F;
  cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  std::int32_t bias_type = -1;  // -1: D's type
  std::int64_t bias_batch_stride = 0;
};

struct Preference {
  std::uint64_t max_workspace_bytes = 0;
  // The alignments (bytes) an algorithm may assume of A, B, C and D (cuBLASLt's default 256).
  std::uint32_t min_alignment[4] = {256, 256, 256, 256};
};

// "CUDA_R_32F", ... for messages; a number for a type the emulation does not know.
std::string type_name(int type);
// Whether the emulated product reads and writes `type` (fp32, bf16, fp16).
bool storage_type(int type);
std::size_t type_size(int type);

// cublasLtMatrixLayoutCreate's and cublasLtMatmulDescCreate's checks of their arguments.
Status check_layout_type(cudaDataType_t type);
Status check_compute(cublasComputeType_t compute, cudaDataType_t scale);

Status set_attribute(Layout& layout, cublasLtMatrixLayoutAttribute_t attr, const void* buf,
                     std::size_t size);
Status set_attribute(MatmulDesc& desc, cublasLtMatmulDescAttributes_t attr, const void* buf,
                     std::size_t size);
Status set_attribute(Preference& pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                     std::size_t size);

}  // namespace fsdp::emu::cublaslt
