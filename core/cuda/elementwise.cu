// Elementwise kernels: grid-stride loops (launch.h's grid_for), float arithmetic on float or
// bf16 storage. Plain loads: these are memory-bound and coalesced already; 16-byte vector loads
// are the next step once the bench shows them worth it.
#include <cmath>

#include "core/cuda/cuda_check.h"
#include "core/cuda/kernel_math.cuh"
#include "core/cuda/kernels.h"

namespace fsdp::cuda {
namespace {

#define FSDP_GRID_STRIDE(i, n)                                                        \
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < (n); \
       i += std::int64_t(gridDim.x) * blockDim.x)

template <typename T>
__global__ void fill_kernel(T* out, float value, std::int64_t n) {
  const T v = from_float<T>(value);
  FSDP_GRID_STRIDE(i, n) out[i] = v;
}

template <typename In, typename Out>
__global__ void cast_kernel(const In* in, Out* out, std::int64_t n) {
  FSDP_GRID_STRIDE(i, n) out[i] = from_float<Out>(to_float(in[i]));
}

// The output index is unravelled into dims and each input's offset rebuilt from its strides
// (0 on broadcast dims); the geometry travels by value in kernel parameter space.
template <typename T>
__global__ void binary_kernel(BinaryOp op, const T* a, const T* b, T* out, BroadcastGeometry g) {
  FSDP_GRID_STRIDE(i, g.numel) {
    std::int64_t rest = i, ia = 0, ib = 0;
    for (int d = g.ndim - 1; d >= 0; --d) {
      const std::int64_t coord = rest % g.size[d];
      rest /= g.size[d];
      ia += coord * g.a_stride[d];
      ib += coord * g.b_stride[d];
    }
    const float x = to_float(a[ia]), y = to_float(b[ib]);
    out[i] = from_float<T>(op == BinaryOp::Add ? x + y : x * y);
  }
}

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoeff = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

__device__ __forceinline__ float gelu(float x, GeluForm form) {
  if (form == GeluForm::Erf) return 0.5f * x * (1.0f + erff(x * kInvSqrt2));
  const float inner = kSqrt2OverPi * (x + kGeluCoeff * x * x * x);
  return 0.5f * x * (1.0f + tanhf(inner));
}

__device__ __forceinline__ float gelu_grad(float x, GeluForm form) {
  if (form == GeluForm::Erf) {
    const float cdf = 0.5f * (1.0f + erff(x * kInvSqrt2));
    return cdf + x * kInvSqrt2Pi * expf(-0.5f * x * x);
  }
  const float inner = kSqrt2OverPi * (x + kGeluCoeff * x * x * x);
  const float t = tanhf(inner);
  const float dinner = kSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * dinner;
}

template <typename T>
__global__ void gelu_forward_kernel(const T* x, T* y, std::int64_t n, GeluForm form) {
  FSDP_GRID_STRIDE(i, n) y[i] = from_float<T>(gelu(to_float(x[i]), form));
}

template <typename T>
__global__ void gelu_backward_kernel(const T* x, const T* dy, T* dx, std::int64_t n,
                                     GeluForm form) {
  FSDP_GRID_STRIDE(i, n) dx[i] = from_float<T>(to_float(dy[i]) * gelu_grad(to_float(x[i]), form));
}

}  // namespace

template <typename T>
void fill(T* out, float value, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  fill_kernel<<<grid_for(n), kThreads, 0, stream>>>(out, value, n);
  FSDP_CUDA_CHECK_LAUNCH();
}

void cast(const float* in, bf16* out, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  cast_kernel<<<grid_for(n), kThreads, 0, stream>>>(in, out, n);
  FSDP_CUDA_CHECK_LAUNCH();
}
void cast(const bf16* in, float* out, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  cast_kernel<<<grid_for(n), kThreads, 0, stream>>>(in, out, n);
  FSDP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void binary(BinaryOp op, const T* a, const T* b, T* out, const BroadcastGeometry& g,
            cudaStream_t stream) {
  if (g.numel == 0) return;
  binary_kernel<<<grid_for(g.numel), kThreads, 0, stream>>>(op, a, b, out, g);
  FSDP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void gelu_forward(const T* x, T* y, std::int64_t n, GeluForm form, cudaStream_t stream) {
  if (n == 0) return;
  gelu_forward_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, y, n, form);
  FSDP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void gelu_backward(const T* x, const T* dy, T* dx, std::int64_t n, GeluForm form,
                   cudaStream_t stream) {
  if (n == 0) return;
  gelu_backward_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, dy, dx, n, form);
  FSDP_CUDA_CHECK_LAUNCH();
}

#define FSDP_INSTANTIATE(T)                                                           \
  template void fill<T>(T*, float, std::int64_t, cudaStream_t);                       \
  template void binary<T>(BinaryOp, const T*, const T*, T*, const BroadcastGeometry&, \
                          cudaStream_t);                                              \
  template void gelu_forward<T>(const T*, T*, std::int64_t, GeluForm, cudaStream_t);  \
  template void gelu_backward<T>(const T*, const T*, T*, std::int64_t, GeluForm, cudaStream_t);
FSDP_INSTANTIATE(float)
FSDP_INSTANTIATE(bf16)

}  // namespace fsdp::cuda
