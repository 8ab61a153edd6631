// cuBLASLt, loaded the first time a product needs it rather than when a program starts: its
// shared library's initialisers cost every process that links it about 0.1 s and tens of
// megabytes (a 540 MB library), which every CPU-only program, test and rank of this build would
// pay. cublaslt() opens libcublasLt.so.<CUBLAS_VER_MAJOR> as the dynamic loader finds it
// (LD_LIBRARY_PATH first, so tests/gpu/emulation's twin takes its place), else from the
// directory the build found it in, and resolves the entry points gemm.cpp calls.
#pragma once

#include <cublasLt.h>

#include <string>
#include <vector>

// Every cuBLASLt function the CUDA device calls: one list for the table's fields and their
// lookup (cublaslt_library.cpp).
#define FSDP_CUBLASLT_FUNCTIONS(X)        \
  X(cublasLtCreate)                       \
  X(cublasLtDestroy)                      \
  X(cublasLtGetStatusName)                \
  X(cublasLtGetStatusString)              \
  X(cublasLtMatmul)                       \
  X(cublasLtMatmulAlgoGetHeuristic)       \
  X(cublasLtMatmulDescCreate)             \
  X(cublasLtMatmulDescDestroy)            \
  X(cublasLtMatmulDescSetAttribute)       \
  X(cublasLtMatmulPreferenceCreate)       \
  X(cublasLtMatmulPreferenceDestroy)      \
  X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatrixLayoutCreate)           \
  X(cublasLtMatrixLayoutDestroy)          \
  X(cublasLtMatrixLayoutSetAttribute)

namespace fsdp::cuda {

// The entry points, each named and typed as cuBLASLt declares it.
struct CublasLt {
#define FSDP_CUBLASLT_FIELD(name) decltype(&::name) name = nullptr;
  FSDP_CUBLASLT_FUNCTIONS(FSDP_CUBLASLT_FIELD)
#undef FSDP_CUBLASLT_FIELD
};

// The library at the first of `paths` the dynamic loader opens (a bare soname is searched for,
// a path with a slash taken as it is), every entry point resolved. Throws fsdp::RuntimeError
// naming each path tried and the loader's reason, or the function the library lacks.
CublasLt load_cublaslt(const std::vector<std::string>& paths);

// load_cublaslt({"libcublasLt.so.<major>", "<the build's directory>/libcublasLt.so.<major>"}),
// opened and resolved on the first call (thread-safe; later calls return the same
// table).
const CublasLt& cublaslt();

// FSDP_CUDA_CHECK on a cuBLAS(Lt) status: the loaded library's name and text of the status.
void check_status(cublasStatus_t status, const char* call, const char* file, int line);

}  // namespace fsdp::cuda
