// Float to a kernel's storage type (float, bf16, fp16) and back, for the parity tests and the
// emulated kernels' tests: only the CUDA half-precision headers, no runtime.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

namespace fsdp::cuda::testing {

// Float to T's storage and back: bf16 and fp16 round to nearest even.
template <typename T>
T to_storage(float x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else if constexpr (std::is_same_v<T, __half>)
    return __float2half_rn(x);
  else
    return __float2bfloat16_rn(x);
}
template <typename T>
float from_storage(T x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else if constexpr (std::is_same_v<T, __half>)
    return __half2float(x);
  else
    return __bfloat162float(x);
}

}  // namespace fsdp::cuda::testing
