#include "tests/gpu/emulation/cublaslt/descriptors.h"

#include <fmt/format.h>

#include <cstring>

namespace fsdp::emu::cublaslt {
namespace {

// Copies the attribute's value when `size` is its size (the header: a null buffer or another
// size is CUBLAS_STATUS_INVALID_VALUE).
template <typename T>
Status read(const char* what, const char* attr, const void* buf, std::size_t size, T& out) {
  if (buf == nullptr) return invalid(fmt::format("{} {}: the buffer is null", what, attr));
  if (size != sizeof(T))
    return invalid(fmt::format("{} {}: sizeInBytes is {}, the attribute holds {} bytes", what, attr,
                               size, sizeof(T)));
  std::memcpy(&out, buf, sizeof(T));
  return {};
}

Status check_operation(const char* attr, std::int32_t op) {
  if (op == CUBLAS_OP_N || op == CUBLAS_OP_T) return {};
  if (op == CUBLAS_OP_C || op == CUBLAS_OP_CONJG)
    return not_supported(fmt::format(
        "cublasLtMatmulDescSetAttribute {}: operation {} (conjugate) is not emulated", attr, op));
  return invalid(
      fmt::format("cublasLtMatmulDescSetAttribute {}: {} is no cublasOperation_t", attr, op));
}

}  // namespace

Status invalid(std::string message) {
  return {CUBLAS_STATUS_INVALID_VALUE, std::move(message)};
}
Status not_supported(std::string message) {
  return {CUBLAS_STATUS_NOT_SUPPORTED, std::move(message)};
}

std::string type_name(int type) {
  switch (type) {
    case CUDA_R_32F:
      return "CUDA_R_32F";
    case CUDA_R_16BF:
      return "CUDA_R_16BF";
    case CUDA_R_16F:
      return "CUDA_R_16F";
    case CUDA_R_64F:
      return "CUDA_R_64F";
    case CUDA_R_8I:
      return "CUDA_R_8I";
    case CUDA_R_32I:
      return "CUDA_R_32I";
    case CUDA_R_8F_E4M3:
      return "CUDA_R_8F_E4M3";
    case CUDA_R_8F_E5M2:
      return "CUDA_R_8F_E5M2";
    default:
      return fmt::format("cudaDataType {}", type);
  }
}

bool storage_type(int type) {
  return type == CUDA_R_32F || type == CUDA_R_16BF || type == CUDA_R_16F;
}

std::size_t type_size(int type) {
  return type == CUDA_R_32F ? 4 : 2;
}

Status check_layout_type(cudaDataType_t type) {
  if (storage_type(type)) return {};
  return not_supported(fmt::format(
      "cublasLtMatrixLayout: type {} is not emulated (CUDA_R_32F, CUDA_R_16BF, CUDA_R_16F are)",
      type_name(type)));
}

Status check_compute(cublasComputeType_t compute, cudaDataType_t scale) {
  if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32)
    return not_supported(
        fmt::format("cublasLtMatmulDesc: compute type {} is not emulated (CUBLAS_COMPUTE_32F and "
                    "CUBLAS_COMPUTE_32F_FAST_TF32 are)",
                    int(compute)));
  if (scale != CUDA_R_32F)
    return not_supported(fmt::format(
        "cublasLtMatmulDesc: scale type {} is not emulated with a float compute type (CUDA_R_32F "
        "is)",
        type_name(scale)));
  return {};
}

Status set_attribute(Layout& layout, cublasLtMatrixLayoutAttribute_t attr, const void* buf,
                     std::size_t size) {
  const char* what = "cublasLtMatrixLayoutSetAttribute";
  Status s;
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: {
      std::uint32_t type = 0;
      if (!(s = read(what, "CUBLASLT_MATRIX_LAYOUT_TYPE", buf, size, type)).ok()) return s;
      if (!(s = check_layout_type(cudaDataType_t(type))).ok()) return s;
      layout.type = cudaDataType_t(type);
      return {};
    }
    case CUBLASLT_MATRIX_LAYOUT_ORDER: {
      std::int32_t order = 0;
      if (!(s = read(what, "CUBLASLT_MATRIX_LAYOUT_ORDER", buf, size, order)).ok()) return s;
      if (order != CUBLASLT_ORDER_COL && order != CUBLASLT_ORDER_ROW)
        return not_supported(fmt::format(
            "{} CUBLASLT_MATRIX_LAYOUT_ORDER: order {} is not emulated (CUBLASLT_ORDER_COL and "
            "CUBLASLT_ORDER_ROW are)",
            what, order));
      layout.order = cublasLtOrder_t(order);
      return {};
    }
    case CUBLASLT_MATRIX_LAYOUT_ROWS:
      return read(what, "CUBLASLT_MATRIX_LAYOUT_ROWS", buf, size, layout.rows);
    case CUBLASLT_MATRIX_LAYOUT_COLS:
      return read(what, "CUBLASLT_MATRIX_LAYOUT_COLS", buf, size, layout.cols);
    case CUBLASLT_MATRIX_LAYOUT_LD:
      return read(what, "CUBLASLT_MATRIX_LAYOUT_LD", buf, size, layout.ld);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: {
      std::int32_t count = 0;
      if (!(s = read(what, "CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT", buf, size, count)).ok()) return s;
      if (count < 1)
        return invalid(
            fmt::format("{} CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: {} is below 1", what, count));
      layout.batch_count = count;
      return {};
    }
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return read(what, "CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET", buf, size,
                  layout.batch_stride);
    case CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET: {
      std::int64_t offset = 0;
      if (!(s = read(what, "CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET", buf, size, offset)).ok())
        return s;
      if (offset != 0)
        return not_supported(fmt::format(
            "{} CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET: planar complex is not emulated", what));
      return {};
    }
    case CUBLASLT_MATRIX_LAYOUT_BATCH_MODE: {
      std::uint32_t mode = 0;
      if (!(s = read(what, "CUBLASLT_MATRIX_LAYOUT_BATCH_MODE", buf, size, mode)).ok()) return s;
      if (mode != CUBLASLT_BATCH_MODE_STRIDED)
        return not_supported(fmt::format(
            "{} CUBLASLT_MATRIX_LAYOUT_BATCH_MODE: mode {} is not emulated (strided is)", what,
            mode));
      return {};
    }
  }
  return not_supported(fmt::format("{}: attribute {} is not emulated", what, int(attr)));
}

Status set_attribute(MatmulDesc& desc, cublasLtMatmulDescAttributes_t attr, const void* buf,
                     std::size_t size) {
  const char* what = "cublasLtMatmulDescSetAttribute";
  Status s;
  std::int32_t value = 0;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      if (!(s = read(what, "CUBLASLT_MATMUL_DESC_COMPUTE_TYPE", buf, size, value)).ok()) return s;
      if (!(s = check_compute(cublasComputeType_t(value), desc.scale)).ok()) return s;
      desc.compute = cublasComputeType_t(value);
      return {};
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      if (!(s = read(what, "CUBLASLT_MATMUL_DESC_SCALE_TYPE", buf, size, value)).ok()) return s;
      if (!(s = check_compute(desc.compute, cudaDataType_t(value))).ok()) return s;
      desc.scale = cudaDataType_t(value);
      return {};
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
      if (!(s = read(what, "CUBLASLT_MATMUL_DESC_POINTER_MODE", buf, size, value)).ok()) return s;
      if (value != CUBLASLT_POINTER_MODE_HOST)
        return not_supported(fmt::format(
            "{} CUBLASLT_MATMUL_DESC_POINTER_MODE: mode {} is not emulated (host alpha and beta "
            "are)",
            what, value));
      return {};
    case CUBLASLT_MATMUL_DESC_TRANSA:
      if (!(s = read(what, "CUBLASLT_MATMUL_DESC_TRANSA", buf, size, value)).ok()) return s;
      if (!(s = check_operation("CUBLASLT_MATMUL_DESC_TRANSA", value)).ok()) return s;
      desc.trans_a = cublasOperation_t(value);
      return {};
    case CUBLASLT_MATMUL_DESC_TRANSB:
      if (!(s = read(what, "CUBLASLT_MATMUL_DESC_TRANSB", buf, size, value)).ok()) return s;
      if (!(s = check_operation("CUBLASLT_MATMUL_DESC_TRANSB", value)).ok()) return s;
      desc.trans_b = cublasOperation_t(value);
      return {};
    case CUBLASLT_MATMUL_DESC_TRANSC:
      if (!(s = read(what, "CUBLASLT_MATMUL_DESC_TRANSC", buf, size, value)).ok()) return s;
      if (value != CUBLAS_OP_N)  // the header: only CUBLAS_OP_N is supported
        return not_supported(
            fmt::format("{} CUBLASLT_MATMUL_DESC_TRANSC: only CUBLAS_OP_N is supported", what));
      return {};
    case CUBLASLT_MATMUL_DESC_EPILOGUE: {
      std::uint32_t epilogue = 0;
      if (!(s = read(what, "CUBLASLT_MATMUL_DESC_EPILOGUE", buf, size, epilogue)).ok()) return s;
      if (epilogue != CUBLASLT_EPILOGUE_DEFAULT && epilogue != CUBLASLT_EPILOGUE_BIAS &&
          epilogue != CUBLASLT_EPILOGUE_GELU && epilogue != CUBLASLT_EPILOGUE_GELU_BIAS &&
          epilogue != CUBLASLT_EPILOGUE_BGRADB)
        return not_supported(fmt::format(
            "{} CUBLASLT_MATMUL_DESC_EPILOGUE: epilogue {} is not emulated (DEFAULT, BIAS, GELU, "
            "GELU_BIAS and BGRADB are)",
            what, epilogue));
      desc.epilogue = cublasLtEpilogue_t(epilogue);
      return {};
    }
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return read(what, "CUBLASLT_MATMUL_DESC_BIAS_POINTER", buf, size, desc.bias);
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
      return read(what, "CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE", buf, size,
                  desc.bias_batch_stride);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      if (!(s = read(what, "CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE", buf, size, value)).ok()) return s;
      if (value != -1 && !storage_type(value))
        return not_supported(fmt::format(
            "{} CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: {} is not emulated", what, type_name(value)));
      desc.bias_type = value;
      return {};
    default:
      return not_supported(fmt::format("{}: attribute {} is not emulated", what, int(attr)));
  }
}

Status set_attribute(Preference& pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                     std::size_t size) {
  const char* what = "cublasLtMatmulPreferenceSetAttribute";
  Status s;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: {
      std::uint32_t mode = 0;
      if (!(s = read(what, "CUBLASLT_MATMUL_PREF_SEARCH_MODE", buf, size, mode)).ok()) return s;
      if (mode != CUBLASLT_SEARCH_BEST_FIT)
        return not_supported(fmt::format(
            "{} CUBLASLT_MATMUL_PREF_SEARCH_MODE: mode {} is not emulated (BEST_FIT is)", what,
            mode));
      return {};
    }
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return read(what, "CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES", buf, size,
                  pref.max_workspace_bytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: {
      const int which = attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES;
      const std::string name =
          fmt::format("CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{}_BYTES", "ABCD"[which]);
      std::uint32_t bytes = 0;
      if (!(s = read(what, name.c_str(), buf, size, bytes)).ok()) return s;
      if (bytes == 0 || (bytes & (bytes - 1)) != 0)
        return invalid(fmt::format("{} {}: {} is not a power of two", what, name, bytes));
      pref.min_alignment[which] = bytes;
      return {};
    }
    default:
      return not_supported(fmt::format("{}: attribute {} is not emulated", what, int(attr)));
  }
}

}  // namespace fsdp::emu::cublaslt
