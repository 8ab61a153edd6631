// FSDP_CUDA_CHECK for NCCL calls (cuda_check.h): ncclResult_t's overload, with NCCL's own text.
#pragma once

#include <nccl.h>

#include "core/cuda/cuda_check.h"

namespace fsdp::cuda {

inline void check_status(ncclResult_t status, const char* call, const char* file, int line) {
  if (status != ncclSuccess)
    throw_cuda_error("ncclResult", ncclGetErrorString(status), call, file, line);
}

}  // namespace fsdp::cuda
