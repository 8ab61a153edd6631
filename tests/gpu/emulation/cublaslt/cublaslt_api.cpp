// The emulated libcublasLt's C API (the functions core/cuda/gemm.cpp and cuda_check.h call, with
// cublasLt.h's signatures): descriptors are descriptors.h's values; cublasLtMatmul checks the
// problem and its pointers at call time, copies every value it needs (the descriptors, alpha
// and beta, as the real library reads them at call time) and queues the host product on the
// stream with cudaLaunchHostFunc, which the emulated runtime runs in stream order. A refusal
// is its status and one line on stderr naming the call and what was wrong.
#include <cublasLt.h>
#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <new>

#include "tests/gpu/emulation/cublaslt/matmul_host.h"
#include "tests/gpu/emulation/emu_runtime.h"
#include "tests/gpu/emulation/emu_skip.h"

using namespace fsdp::emu::cublaslt;

struct cublasLtContext {};  // the handle holds nothing: the product runs on the stream's worker

namespace {

// The algorithm cublasLtMatmulAlgoGetHeuristic hands out: a tag and the alignments (bytes) it
// was chosen for, which cublasLtMatmul then holds A, B, C and D to (a real kernel chosen for
// 256-byte operands may fault or misread on less aligned ones).
constexpr std::uint64_t kAlgoTag = 0x656d75626c61734cull;  // "emublasL"

cublasStatus_t report(const Status& s) {
  if (!s.ok()) std::fprintf(stderr, "%s\n", s.message.c_str());
  return s.code;
}

Layout* layout(cublasLtMatrixLayout_t l) {
  return reinterpret_cast<Layout*>(l);
}
MatmulDesc* desc(cublasLtMatmulDesc_t d) {
  return reinterpret_cast<MatmulDesc*>(d);
}
Preference* pref(cublasLtMatmulPreference_t p) {
  return reinterpret_cast<Preference*>(p);
}

// `bytes` from `p` all inside device memory (a kernel reads or writes each of them).
Status check_device_range(const char* call, const char* name, const void* p, std::size_t bytes) {
  if (p == nullptr) return invalid(fmt::format("{}: {} is null", call, name));
  const char* first = static_cast<const char*>(p);
  if (!fsdp_emu_device_accessible(first) || !fsdp_emu_device_accessible(first + bytes - 1))
    return invalid(fmt::format(
        "{}: {} at {} ({} bytes) is not inside device memory (a live cudaMalloc allocation or "
        "pinned host memory)",
        call, name, p, bytes));
  return {};
}

// A, B, C, D and the bias inside device memory: when called, and again when the stream runs
// the product (memory freed or handed to another stream in between would be a device fault).
Status check_operands(const char* call, const MatmulProblem& p) {
  const std::pair<const char*, const void*> operands[] = {
      {"A", p.a_ptr}, {"B", p.b_ptr}, {"C", p.c_ptr}, {"D", p.d_ptr}};
  const Layout* layouts[] = {&p.a, &p.b, &p.c, &p.d};
  for (int i = 0; i < 4; ++i)
    if (Status s = check_device_range(call, operands[i].first, operands[i].second,
                                      span_bytes(*layouts[i]));
        !s.ok())
      return s;
  const cublasLtEpilogue_t e = p.desc.epilogue;
  const int type = p.desc.bias_type == -1 ? p.d.type : p.desc.bias_type;
  if (e == CUBLASLT_EPILOGUE_BGRADB)  // written: one value per column of D
    return check_device_range(call, "the bias gradient (CUBLASLT_MATMUL_DESC_BIAS_POINTER)",
                              p.desc.bias, std::size_t(p.d.cols) * type_size(type));
  if (e != CUBLASLT_EPILOGUE_BIAS && e != CUBLASLT_EPILOGUE_GELU_BIAS) return {};
  const std::size_t count =
      std::size_t((p.d.batch_count - 1) * p.desc.bias_batch_stride) + std::size_t(p.d.rows);
  return check_device_range(call, "the bias (CUBLASLT_MATMUL_DESC_BIAS_POINTER)", p.desc.bias,
                            count * type_size(type));
}

Status check_alignment(const void* p, std::uint64_t bytes, char which) {
  if (reinterpret_cast<std::uintptr_t>(p) % bytes == 0) return {};
  return invalid(fmt::format(
      "cublasLtMatmul: {} at {} is not {}-byte aligned, as the algorithm assumes (chosen with "
      "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{}_BYTES={})",
      which, p, bytes, which, bytes));
}

struct Job {
  MatmulProblem problem;
};

void run_job(void* job) {
  std::unique_ptr<Job> j(static_cast<Job*>(job));
  const Status s = check_operands("cublasLtMatmul (as its stream ran it)", j->problem);
  if (s.ok()) {
    if (!fsdp::emu::skipping_device_work()) run_matmul(j->problem);
  } else
    fsdp_emu_report_fault(cudaErrorIllegalAddress, s.message.c_str());
}

// Everything cublasLtMatmul refuses before it queues the product.
Status check_call(const MatmulProblem& p, const cublasLtMatmulAlgo_t* algo, const void* workspace,
                  std::size_t workspace_bytes) {
  if (Status s = check_matmul("cublasLtMatmul", p.desc, p.a, p.b, p.c, p.d, p.c_ptr == p.d_ptr);
      !s.ok())
    return s;
  if (Status s = check_operands("cublasLtMatmul", p); !s.ok()) return s;
  if (workspace_bytes > 0) {
    if (Status s =
            check_device_range("cublasLtMatmul", "the workspace", workspace, workspace_bytes);
        !s.ok())
      return s;
    if (reinterpret_cast<std::uintptr_t>(workspace) % 256 != 0)
      return invalid(fmt::format(
          "cublasLtMatmul: the workspace at {} is not 256-byte aligned (cuBLASLt needs it)",
          workspace));
  }
  if (algo != nullptr) {
    if (algo->data[0] != kAlgoTag)
      return invalid(
          "cublasLtMatmul: the algorithm was not returned by "
          "cublasLtMatmulAlgoGetHeuristic");
    const void* pointers[] = {p.a_ptr, p.b_ptr, p.c_ptr, p.d_ptr};
    for (int i = 0; i < 4; ++i)
      if (Status s = check_alignment(pointers[i], algo->data[1 + i], "ABCD"[i]); !s.ok()) return s;
  }
  return {};
}

}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return report(invalid("cublasLtCreate: the handle pointer is null"));
  *handle = new (std::nothrow) cublasLtContext;
  return *handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (handle == nullptr) return report({CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtDestroy: null"});
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "<unrecognized>";
}

const char* cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "an error was detected when checking the license";
  }
  return "<unrecognized>";
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* out, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (out == nullptr) return report(invalid("cublasLtMatrixLayoutCreate: the pointer is null"));
  if (Status s = check_layout_type(type); !s.ok()) return report(s);
  Layout* l = new (std::nothrow) Layout;
  if (l == nullptr) return CUBLAS_STATUS_ALLOC_FAILED;
  l->type = type;
  l->rows = rows;
  l->cols = cols;
  l->ld = ld;
  *out = reinterpret_cast<cublasLtMatrixLayout_t>(l);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete layout(l);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size) {
  if (l == nullptr) return report(invalid("cublasLtMatrixLayoutSetAttribute: null layout"));
  return report(set_attribute(*layout(l), attr, buf, size));
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* out, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  if (out == nullptr) return report(invalid("cublasLtMatmulDescCreate: the pointer is null"));
  if (Status s = check_compute(compute, scale); !s.ok()) return report(s);
  MatmulDesc* d = new (std::nothrow) MatmulDesc;
  if (d == nullptr) return CUBLAS_STATUS_ALLOC_FAILED;
  d->compute = compute;
  d->scale = scale;
  *out = reinterpret_cast<cublasLtMatmulDesc_t>(d);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete desc(d);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t size) {
  if (d == nullptr) return report(invalid("cublasLtMatmulDescSetAttribute: null descriptor"));
  return report(set_attribute(*desc(d), attr, buf, size));
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* out) {
  if (out == nullptr) return report(invalid("cublasLtMatmulPreferenceCreate: the pointer is null"));
  Preference* p = new (std::nothrow) Preference;
  if (p == nullptr) return CUBLAS_STATUS_ALLOC_FAILED;
  *out = reinterpret_cast<cublasLtMatmulPreference_t>(p);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete pref(p);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size) {
  if (p == nullptr) return report(invalid("cublasLtMatmulPreferenceSetAttribute: null preference"));
  return report(set_attribute(*pref(p), attr, buf, size));
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t op,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t preference, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int* returned) {
  const char* call = "cublasLtMatmulAlgoGetHeuristic";
  if (handle == nullptr)
    return report({CUBLAS_STATUS_NOT_INITIALIZED, fmt::format("{}: null handle", call)});
  if (!op || !a || !b || !c || !d || !preference || !results || !returned)
    return report(invalid(fmt::format("{}: a descriptor, the results or the count is null", call)));
  if (requested <= 0)
    return report(
        invalid(fmt::format("{}: requestedAlgoCount {} is not positive", call, requested)));
  if (Status s =
          check_matmul(call, *desc(op), *layout(a), *layout(b), *layout(c), *layout(d), c == d);
      !s.ok())
    return report(s);
  // One algorithm, needing no workspace, holding the operands to the preference's alignments.
  results[0] = cublasLtMatmulHeuristicResult_t{};
  results[0].algo.data[0] = kAlgoTag;
  for (int i = 0; i < 4; ++i) results[0].algo.data[1 + i] = pref(preference)->min_alignment[i];
  results[0].workspaceSize = 0;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t op, const void* alpha,
                              const void* a, cublasLtMatrixLayout_t a_desc, const void* b,
                              cublasLtMatrixLayout_t b_desc, const void* beta, const void* c,
                              cublasLtMatrixLayout_t c_desc, void* d, cublasLtMatrixLayout_t d_desc,
                              const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  if (handle == nullptr)
    return report({CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtMatmul: null handle"});
  if (!op || !a_desc || !b_desc || !d_desc || !alpha || !beta)
    return report(
        invalid("cublasLtMatmul: the descriptor, a layout (A, B or D), alpha or beta is null"));
  // The documentation: an omitted Cdesc is Ddesc.
  if (c_desc == nullptr) c_desc = d_desc;
  auto job = std::make_unique<Job>();
  MatmulProblem& p = job->problem;
  p.desc = *desc(op);
  p.a = *layout(a_desc);
  p.b = *layout(b_desc);
  p.c = *layout(c_desc);
  p.d = *layout(d_desc);
  p.alpha = *static_cast<const float*>(alpha);
  p.beta = *static_cast<const float*>(beta);
  p.a_ptr = a;
  p.b_ptr = b;
  p.c_ptr = c;
  p.d_ptr = d;
  if (Status s = check_call(p, algo, workspace, workspace_bytes); !s.ok()) return report(s);
  if (cudaError_t e = cudaLaunchHostFunc(stream, run_job, job.get()); e != cudaSuccess)
    return report(
        {CUBLAS_STATUS_EXECUTION_FAILED,
         fmt::format("cublasLtMatmul: cudaLaunchHostFunc failed (cudaError {})", int(e))});
  job.release();  // run_job owns it now
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
