// Elementwise kernels: grid-stride loops (launch.h's grid_for), float arithmetic on float, bf16
// or fp16 storage. Memory-bound, so the same-shape kernels move 16 bytes per thread per access (4
// floats or 8 16-bit values, one 128-bit access: vec_access.cuh) whenever every pointer is 16-byte
// aligned, casts included (two float packs to one 16-bit pack); the last n % V elements, and
// unaligned calls, take the scalar loop.
#include <cmath>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/kernel_math.cuh"
#include "core/cuda/kernels.h"
#include "core/cuda/vec_access.cuh"

namespace fsdp::cuda {
namespace {

#define FSDP_GRID_STRIDE(i, n)                                                        \
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < (n); \
       i += std::int64_t(gridDim.x) * blockDim.x)

// y[i] = op(x...[i]) over one or two inputs of the same length; `vector` says whether all
// pointers are 16-byte aligned.
template <typename Out, typename In, typename Op>
__global__ void map1_kernel(const In* x, Out* y, std::int64_t n, Op op, bool vector) {
  // V elements per step: one pack of the narrower type, whole packs of the wider (a cast between
  // float and 16 bits: two float packs and one 16-bit pack, every access 16 bytes).
  constexpr int kIn = Pack<In>::kSize, kOut = Pack<Out>::kSize;
  constexpr int V = kOut > kIn ? kOut : kIn;
  std::int64_t done = 0;
  if (vector) {
    FSDP_GRID_STRIDE(i, n / V) {
      Pack<In> in[V / kIn];
#pragma unroll
      for (int p = 0; p < V / kIn; ++p) in[p] = load_pack(x + i * V + p * kIn);
      Pack<Out> out[V / kOut];
#pragma unroll
      for (int j = 0; j < V; ++j)
        out[j / kOut].v[j % kOut] = from_float<Out>(op(to_float(in[j / kIn].v[j % kIn])));
#pragma unroll
      for (int p = 0; p < V / kOut; ++p) store_pack(y + i * V + p * kOut, out[p]);
    }
    done = n / V * V;
  }
  FSDP_GRID_STRIDE(i, n - done) y[done + i] = from_float<Out>(op(to_float(x[done + i])));
}

template <typename T, typename Op>
__global__ void map2_kernel(const T* a, const T* b, T* y, std::int64_t n, Op op, bool vector) {
  constexpr int V = Pack<T>::kSize;
  std::int64_t done = 0;
  if (vector) {
    FSDP_GRID_STRIDE(i, n / V) {
      const Pack<T> pa = load_pack(a + i * V), pb = load_pack(b + i * V);
      Pack<T> out;
#pragma unroll
      for (int j = 0; j < V; ++j)
        out.v[j] = from_float<T>(op(to_float(pa.v[j]), to_float(pb.v[j])));
      store_pack(y + i * V, out);
    }
    done = n / V * V;
  }
  FSDP_GRID_STRIDE(i, n - done) {
    y[done + i] = from_float<T>(op(to_float(a[done + i]), to_float(b[done + i])));
  }
}

struct Constant {
  float value;
  __device__ float operator()(float) const { return value; }
};
struct Identity {
  __device__ float operator()(float x) const { return x; }
};
struct AddOp {
  __device__ float operator()(float x, float y) const { return x + y; }
};
struct MulOp {
  __device__ float operator()(float x, float y) const { return x * y; }
};

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

__device__ __forceinline__ float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}

// Each ActivationKind as the CPU table computes it (core/kernels/cpu/activations.cpp): relu
// keeps NaN; the backward reads the output for relu, tanh and sigmoid, the input otherwise.
__device__ __forceinline__ float activate(ActivationKind kind, float x) {
  switch (kind) {
    case ActivationKind::Relu:
      return x > 0.0f ? x : (x != x ? x : 0.0f);
    case ActivationKind::Tanh:
      return tanhf(x);
    case ActivationKind::Sigmoid:
      return sigmoid(x);
    case ActivationKind::Gelu:
      return 0.5f * x * (1.0f + erff(x * kInvSqrt2));
    case ActivationKind::GeluTanh: {
      const float inner = kSqrt2OverPi * (x + kGeluCoeff * x * x * x);
      return 0.5f * x * (1.0f + tanhf(inner));
    }
    default:
      return x * sigmoid(x);  // Silu
  }
}

// dx = g * f'(saved).
__device__ __forceinline__ float activate_grad(ActivationKind kind, float saved, float g) {
  switch (kind) {
    case ActivationKind::Relu:  // a NaN output passes g, as torch's threshold_backward
      return saved <= 0.0f ? 0.0f : g;
    case ActivationKind::Tanh:
      return g * (1.0f - saved * saved);
    case ActivationKind::Sigmoid:
      return g * saved * (1.0f - saved);
    case ActivationKind::Gelu: {
      const float cdf = 0.5f * (1.0f + erff(saved * kInvSqrt2));
      return g * (cdf + saved * kInvSqrt2Pi * expf(-0.5f * saved * saved));
    }
    case ActivationKind::GeluTanh: {
      const float x = saved;
      const float inner = kSqrt2OverPi * (x + kGeluCoeff * x * x * x);
      const float t = tanhf(inner);
      const float dinner = kSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * x * x);
      return g * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * dinner);
    }
    default: {  // Silu
      const float s = sigmoid(saved);
      return g * (s * (1.0f + saved * (1.0f - s)));
    }
  }
}

struct ActivationForward {
  ActivationKind kind;
  __device__ float operator()(float x) const { return activate(kind, x); }
};
struct ActivationBackward {  // (saved, g) -> g * f'(saved)
  ActivationKind kind;
  __device__ float operator()(float saved, float g) const { return activate_grad(kind, saved, g); }
};

template <typename Out, typename In, typename Op>
void launch_map1(const In* x, Out* y, std::int64_t n, Op op, cudaStream_t stream) {
  if (n == 0) return;
  const bool vector = all_aligned16(x, y);
  constexpr int V = Pack<Out>::kSize > Pack<In>::kSize ? Pack<Out>::kSize : Pack<In>::kSize;
  map1_kernel<<<grid_for(vector ? n / V + 1 : n), kThreads, 0, stream>>>(x, y, n, op, vector);
  FSDP_CUDA_CHECK_LAUNCH();
}

template <typename T, typename Op>
void launch_map2(const T* a, const T* b, T* y, std::int64_t n, Op op, cudaStream_t stream) {
  if (n == 0) return;
  const bool vector = all_aligned16(a, b, y);
  const std::int64_t work = vector ? n / Pack<T>::kSize + 1 : n;
  map2_kernel<<<grid_for(work), kThreads, 0, stream>>>(a, b, y, n, op, vector);
  FSDP_CUDA_CHECK_LAUNCH();
}

// Same shapes (no dim broadcast): the flat, vectorised kernel instead of index arithmetic.
bool is_plain(const BroadcastGeometry& g) {
  for (int d = 0; d < g.ndim; ++d)
    if (g.size[d] != 1 && (g.a_stride[d] == 0 || g.b_stride[d] == 0)) return false;
  return true;
}

}  // namespace

template <typename T>
void fill(T* out, float value, std::int64_t n, cudaStream_t stream) {
  launch_map1(out, out, n, Constant{value}, stream);  // reads nothing: Constant ignores x
}

void cast(const float* in, bf16* out, std::int64_t n, cudaStream_t stream) {
  launch_map1(in, out, n, Identity{}, stream);
}
void cast(const bf16* in, float* out, std::int64_t n, cudaStream_t stream) {
  launch_map1(in, out, n, Identity{}, stream);
}
void cast(const float* in, fp16* out, std::int64_t n, cudaStream_t stream) {
  launch_map1(in, out, n, Identity{}, stream);
}
void cast(const fp16* in, float* out, std::int64_t n, cudaStream_t stream) {
  launch_map1(in, out, n, Identity{}, stream);
}

template <typename T>
void binary(BinaryOp op, const T* a, const T* b, T* out, const BroadcastGeometry& g,
            cudaStream_t stream) {
  if (g.numel == 0) return;
  if (is_plain(g)) {
    if (op == BinaryOp::Add)
      launch_map2(a, b, out, g.numel, AddOp{}, stream);
    else
      launch_map2(a, b, out, g.numel, MulOp{}, stream);
    return;
  }
  binary_kernel<<<grid_for(g.numel), kThreads, 0, stream>>>(op, a, b, out, g);
  FSDP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void activation_forward(ActivationKind kind, const T* x, T* y, std::int64_t n,
                        cudaStream_t stream) {
  launch_map1(x, y, n, ActivationForward{kind}, stream);
}

template <typename T>
void activation_backward(ActivationKind kind, const T* saved, const T* g, T* dx, std::int64_t n,
                         cudaStream_t stream) {
  launch_map2(saved, g, dx, n, ActivationBackward{kind}, stream);
}

#define FSDP_INSTANTIATE(T)                                                                      \
  template void fill<T>(T*, float, std::int64_t, cudaStream_t);                                  \
  template void binary<T>(BinaryOp, const T*, const T*, T*, const BroadcastGeometry&,            \
                          cudaStream_t);                                                         \
  template void activation_forward<T>(ActivationKind, const T*, T*, std::int64_t, cudaStream_t); \
  template void activation_backward<T>(ActivationKind, const T*, const T*, T*, std::int64_t,     \
                                       cudaStream_t);
FSDP_INSTANTIATE(float)
FSDP_INSTANTIATE(bf16)
FSDP_INSTANTIATE(fp16)

}  // namespace fsdp::cuda
