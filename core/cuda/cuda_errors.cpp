// The exceptions core/cuda's checks throw (cuda_check.h), compiled by the host compiler: no .cu
// file includes core/error.h (nvcc 13 cannot compile fmt 9 in C++20 mode). They live in the
// kernels' shared library, which every .cu launcher calls them from.
#include <fmt/format.h>

#include "core/cuda/cuda_check.h"
#include "core/error.h"

namespace fsdp::cuda {

void throw_cuda_error(const char* status_name, const char* status_text, const char* call,
                      const char* file, int line) {
  throw RuntimeError(fmt::format("CUDA error {} ({}) from `{}` at {}:{}", status_name, status_text,
                                 call, file, line));
}

void throw_value_error(const char* op, const char* what, long long value) {
  throw ValueError(fmt::format("{}: {}, got {}", op, what, value));
}

}  // namespace fsdp::cuda
