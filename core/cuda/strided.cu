// Strided element-wise kernels: the kernel table's general layouts (views, transposes,
// broadcasts, in-place ops on strided outputs), one thread per output element in a grid-stride
// loop, each computing its operands' offsets from the output's index. Slower than the
// contiguous kernels of elementwise.cu, which the table prefers when the layout allows. Copies of
// one type, unary and binary ops whose operands' innermost rows are whole aligned 16-byte packs
// (split_heads, merge_heads, a contiguous operand) move a pack per thread and operand.
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "core/cuda/cuda_check.h"
#include "core/cuda/kernel_math.cuh"
#include "core/cuda/kernels.h"
#include "core/cuda/vec_access.cuh"

namespace fsdp::cuda {
namespace {

#define FSDP_GRID_STRIDE(i, n)                                                        \
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < (n); \
       i += std::int64_t(gridDim.x) * blockDim.x)

// The offsets of output element i in each of `operands` layouts.
template <int kOperands>
__device__ __forceinline__ void offsets(const StridedLayout& l, std::int64_t i,
                                        std::int64_t (&off)[kOperands]) {
#pragma unroll
  for (int k = 0; k < kOperands; ++k) off[k] = 0;
  for (int d = l.ndim - 1; d >= 0; --d) {
    const std::int64_t idx = i % l.size[d];
    i /= l.size[d];
#pragma unroll
    for (int k = 0; k < kOperands; ++k) off[k] += idx * l.stride[k][d];
  }
}

template <typename C>
__device__ __forceinline__ C unary_op(UnaryKind op, C x, C s) {
  switch (op) {
    case UnaryKind::AddScalar:
      return x + s;
    case UnaryKind::MulScalar:
      return x * s;
    case UnaryKind::DivScalar:
      return x / s;
    case UnaryKind::Pow:
      return s == C(2) ? x * x : pow(x, s);
    case UnaryKind::Square:
      return x * x;
    case UnaryKind::Identity:
      return x;
    case UnaryKind::Sqrt:
      return sqrt(x);
    case UnaryKind::Neg:
      return -x;
    case UnaryKind::Exp:
      return exp(x);
    case UnaryKind::Log:
      return log(x);
    case UnaryKind::Rsqrt:
      return C(1) / sqrt(x);
    case UnaryKind::Abs:
      return fabs(x);
    case UnaryKind::Sign:
      return C((C(0) < x) - (x < C(0)));
  }
  return x;
}

template <typename C>
__device__ __forceinline__ C binary_op(BinaryKind op, C a, C b, C alpha) {
  switch (op) {
    case BinaryKind::Add:
      return alpha == C(1) ? a + b : a + alpha * b;
    case BinaryKind::Sub:
      return a - alpha * b;
    case BinaryKind::Mul:
      return a * b;
    case BinaryKind::Div:
      return a / b;
    case BinaryKind::Maximum:  // torch.maximum propagates NaN
      return a != a || b != b ? C(NAN) : (a > b ? a : b);
    case BinaryKind::Minimum:
      return a != a || b != b ? C(NAN) : (a < b ? a : b);
  }
  return a;
}

// V elements a thread: 1, or a 16-byte pack's over a layout_in_packs layout (offsets in packs).
template <typename T, int V>
__global__ void strided_unary_kernel(UnaryKind op, const T* a, T* out, StridedLayout l,
                                     acc_t<T> s) {
  FSDP_GRID_STRIDE(i, l.numel) {
    std::int64_t off[2];
    offsets<2>(l, i, off);
    acc_t<T> x[V];
    load_widened<V>(a + off[1] * V, x);
#pragma unroll
    for (int j = 0; j < V; ++j) x[j] = unary_op(op, x[j], s);
    store_narrowed<V>(out + off[0] * V, x);
  }
}

template <typename T, int V>
__global__ void strided_binary_kernel(BinaryKind op, const T* a, const T* b, T* out,
                                      StridedLayout l, acc_t<T> alpha) {
  FSDP_GRID_STRIDE(i, l.numel) {
    std::int64_t off[3];
    offsets<3>(l, i, off);
    acc_t<T> x[V], y[V];
    load_widened<V>(a + off[1] * V, x);
    load_widened<V>(b + off[2] * V, y);
#pragma unroll
    for (int j = 0; j < V; ++j) x[j] = binary_op(op, x[j], y[j], alpha);
    store_narrowed<V>(out + off[0] * V, x);
  }
}

// A floating value truncated toward zero into the integer I as the CPU's static_cast compiles on
// x86 (cvttss2si, cvttsd2si), not as the GPU's saturating cvt.rzi: NaN and values outside I's
// range give I's lowest value; uint8 is the low byte of the int32 conversion (300.0 -> 44).
template <typename I, typename F>
__device__ __forceinline__ I truncated(F x) {
  if constexpr (std::is_same_v<I, std::uint8_t>) {
    return static_cast<std::uint8_t>(truncated<std::int32_t>(x));
  } else {
    constexpr std::uint64_t lowest_bits = std::uint64_t(1) << (8 * sizeof(I) - 1);
    constexpr F lowest = -static_cast<F>(lowest_bits);  // a power of two: exact in F
    return x >= lowest && x < -lowest ? static_cast<I>(x) : static_cast<I>(lowest_bits);
  }
}

// One element of a converting copy, as the CPU table's copy (torch's casts): 16-bit types pass
// through float both ways (a double or an int64 rounded twice; bf16 <-> fp16 widened exactly,
// then rounded once); nonzero (NaN too) is true; floating to integer truncates (`truncated`);
// between integers, C++'s conversion (modulo the width).
template <typename D, typename S>
__device__ __forceinline__ D convert(S x) {
  if constexpr (std::is_same_v<D, S>)
    return x;
  else if constexpr (is_16bit_v<S>)
    return convert<D>(to_float(x));
  else if constexpr (std::is_same_v<D, bool>)
    return x != S(0);
  else if constexpr (is_16bit_v<D>)
    return from_float<D>(static_cast<float>(x));
  else if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D>)
    return truncated<D>(x);
  else
    return static_cast<D>(x);
}

template <typename D, typename S>
__global__ void strided_copy_kernel(const S* src, D* dst, StridedLayout l) {
  FSDP_GRID_STRIDE(i, l.numel) {
    std::int64_t off[2];
    offsets<2>(l, i, off);
    dst[off[0]] = convert<D, S>(src[off[1]]);
  }
}

// The value a comparison sees: bf16 and fp16 as float, the rest as stored.
template <typename T>
__device__ __forceinline__ auto compared(T x) {
  if constexpr (is_16bit_v<T>)
    return to_float(x);
  else
    return x;
}

template <typename T>
__global__ void strided_compare_kernel(CompareKind op, const T* a, const T* b, bool* out,
                                       StridedLayout l) {
  FSDP_GRID_STRIDE(i, l.numel) {
    std::int64_t off[3];
    offsets<3>(l, i, off);
    const auto x = compared(a[off[1]]), y = compared(b[off[2]]);
    bool r = false;
    switch (op) {
      case CompareKind::Eq:
        r = x == y;
        break;
      case CompareKind::Ne:
        r = x != y;
        break;
      case CompareKind::Lt:
        r = x < y;
        break;
      case CompareKind::Le:
        r = x <= y;
        break;
      case CompareKind::Gt:
        r = x > y;
        break;
      case CompareKind::Ge:
        r = x >= y;
        break;
    }
    out[off[0]] = r;
  }
}

template <typename T>
__global__ void strided_eq_scalar_kernel(const T* a, double b, bool* out, StridedLayout l) {
  FSDP_GRID_STRIDE(i, l.numel) {
    std::int64_t off[2];
    offsets<2>(l, i, off);
    out[off[0]] = static_cast<double>(compared(a[off[1]])) == b;
  }
}

template <typename T>
__global__ void strided_logical_not_kernel(const T* a, bool* out, StridedLayout l) {
  FSDP_GRID_STRIDE(i, l.numel) {
    std::int64_t off[2];
    offsets<2>(l, i, off);
    out[off[0]] = compared(a[off[1]]) == decltype(compared(a[off[1]]))(0);
  }
}

template <typename T>
__global__ void strided_where_kernel(const bool* c, const T* a, const T* b, T* out,
                                     StridedLayout l) {
  FSDP_GRID_STRIDE(i, l.numel) {
    std::int64_t off[4];
    offsets<4>(l, i, off);
    out[off[0]] = c[off[1]] ? a[off[2]] : b[off[3]];
  }
}

template <typename T>
__global__ void strided_masked_fill_kernel(const T* a, const bool* m, T value, T* out,
                                           StridedLayout l) {
  FSDP_GRID_STRIDE(i, l.numel) {
    std::int64_t off[3];
    offsets<3>(l, i, off);
    out[off[0]] = m[off[2]] ? value : a[off[1]];
  }
}

template <typename T>
__global__ void strided_masked_scale_kernel(const T* x, const std::uint8_t* m, T* y, acc_t<T> scale,
                                            StridedLayout l) {
  FSDP_GRID_STRIDE(i, l.numel) {
    std::int64_t off[3];
    offsets<3>(l, i, off);
    y[off[0]] = m[off[2]] ? static_cast<T>(x[off[1]] * scale) : T(0);
  }
}

// The layout of `operands` (the output and its inputs) in 16-byte elements of `elem_bytes`
// values: the innermost dim contiguous in every operand, its length and every other dim's
// strides whole packs, every pointer 16-byte aligned (split_heads' and merge_heads' head_dim
// rows, a block of whole rows, a contiguous operand). False where anything fails: the kernel then
// takes one element a thread.
bool layout_in_packs(const StridedLayout& l, int operands, std::size_t elem_bytes,
                     std::initializer_list<const void*> pointers, StridedLayout& packs) {
  const std::int64_t v = static_cast<std::int64_t>(16 / elem_bytes);
  const int last = l.ndim - 1;
  if (l.ndim == 0 || l.size[last] % v != 0) return false;
  for (const void* p : pointers)
    if (!aligned16(p)) return false;
  packs = l;
  for (int k = 0; k < operands; ++k) {
    if (l.stride[k][last] != 1) return false;
    for (int d = 0; d < last; ++d) {
      if (l.size[d] == 1) {  // never stepped: any stride
        packs.stride[k][d] = 0;
        continue;
      }
      if (l.stride[k][d] % v != 0) return false;
      packs.stride[k][d] = l.stride[k][d] / v;
    }
  }
  packs.size[last] = l.size[last] / v;
  packs.numel = l.numel / v;
  return true;
}

// launch.template operator()<V>(layout): V = T's pack over the packed layout where
// layout_in_packs allows, else 1 over `l`.
template <typename T, typename F>
void launch_strided(const StridedLayout& l, int operands,
                    std::initializer_list<const void*> pointers, F&& launch) {
  StridedLayout packs;
  if (layout_in_packs(l, operands, sizeof(T), pointers, packs))
    launch.template operator()<Pack<T>::kSize>(packs);
  else
    launch.template operator()<1>(l);
}

}  // namespace

template <typename T>
void strided_masked_scale(const T* x, const std::uint8_t* mask, T* y, double scale,
                          const StridedLayout& l, cudaStream_t stream) {
  if (l.numel == 0) return;
  strided_masked_scale_kernel<T>
      <<<grid_for(l.numel), kThreads, 0, stream>>>(x, mask, y, static_cast<acc_t<T>>(scale), l);
  FSDP_CUDA_CHECK_LAUNCH();
}
template void strided_masked_scale<float>(const float*, const std::uint8_t*, float*, double,
                                          const StridedLayout&, cudaStream_t);
template void strided_masked_scale<double>(const double*, const std::uint8_t*, double*, double,
                                           const StridedLayout&, cudaStream_t);

template <typename T>
void strided_compare(CompareKind op, const T* a, const T* b, bool* out, const StridedLayout& l,
                     cudaStream_t stream) {
  if (l.numel == 0) return;
  strided_compare_kernel<T><<<grid_for(l.numel), kThreads, 0, stream>>>(op, a, b, out, l);
  FSDP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void strided_eq_scalar(const T* a, double b, bool* out, const StridedLayout& l,
                       cudaStream_t stream) {
  if (l.numel == 0) return;
  strided_eq_scalar_kernel<T><<<grid_for(l.numel), kThreads, 0, stream>>>(a, b, out, l);
  FSDP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void strided_logical_not(const T* a, bool* out, const StridedLayout& l, cudaStream_t stream) {
  if (l.numel == 0) return;
  strided_logical_not_kernel<T><<<grid_for(l.numel), kThreads, 0, stream>>>(a, out, l);
  FSDP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void strided_where(const bool* condition, const T* a, const T* b, T* out, const StridedLayout& l,
                   cudaStream_t stream) {
  if (l.numel == 0) return;
  strided_where_kernel<T><<<grid_for(l.numel), kThreads, 0, stream>>>(condition, a, b, out, l);
  FSDP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void strided_masked_fill(const T* a, const bool* mask, T value, T* out, const StridedLayout& l,
                         cudaStream_t stream) {
  if (l.numel == 0) return;
  strided_masked_fill_kernel<T><<<grid_for(l.numel), kThreads, 0, stream>>>(a, mask, value, out, l);
  FSDP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void strided_unary(UnaryKind op, const T* a, T* out, const StridedLayout& l, double scalar,
                   cudaStream_t stream) {
  if (l.numel == 0) return;
  launch_strided<T>(l, 2, {a, out}, [&]<int V>(const StridedLayout& layout) {
    strided_unary_kernel<T, V><<<grid_for(layout.numel), kThreads, 0, stream>>>(
        op, a, out, layout, static_cast<acc_t<T>>(scalar));
  });
  FSDP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void strided_binary(BinaryKind op, const T* a, const T* b, T* out, const StridedLayout& l,
                    double alpha, cudaStream_t stream) {
  if (l.numel == 0) return;
  launch_strided<T>(l, 3, {a, b, out}, [&]<int V>(const StridedLayout& layout) {
    strided_binary_kernel<T, V><<<grid_for(layout.numel), kThreads, 0, stream>>>(
        op, a, b, out, layout, static_cast<acc_t<T>>(alpha));
  });
  FSDP_CUDA_CHECK_LAUNCH();
}

template <typename D, typename S>
void strided_copy(const S* src, D* dst, const StridedLayout& l, cudaStream_t stream) {
  if (l.numel == 0) return;
  if constexpr (std::is_same_v<D, S>) {
    StridedLayout packs;
    if (layout_in_packs(l, 2, sizeof(D), {src, dst}, packs)) {
      using Bits = unsigned __int128;  // one 16-byte access (vec_access.cuh's store_pack)
      strided_copy_kernel<Bits, Bits><<<grid_for(packs.numel), kThreads, 0, stream>>>(
          reinterpret_cast<const Bits*>(src), reinterpret_cast<Bits*>(dst), packs);
      FSDP_CUDA_CHECK_LAUNCH();
      return;
    }
  }
  strided_copy_kernel<D, S><<<grid_for(l.numel), kThreads, 0, stream>>>(src, dst, l);
  FSDP_CUDA_CHECK_LAUNCH();
}

#define FSDP_POINTWISE(T)                                                                   \
  template void strided_unary<T>(UnaryKind, const T*, T*, const StridedLayout&, double,     \
                                 cudaStream_t);                                             \
  template void strided_binary<T>(BinaryKind, const T*, const T*, T*, const StridedLayout&, \
                                  double, cudaStream_t);
FSDP_POINTWISE(float)
FSDP_POINTWISE(bf16)
FSDP_POINTWISE(fp16)
FSDP_POINTWISE(double)
#undef FSDP_POINTWISE

#define FSDP_COMPARE(T)                                                                            \
  template void strided_compare<T>(CompareKind, const T*, const T*, bool*, const StridedLayout&,   \
                                   cudaStream_t);                                                  \
  template void strided_eq_scalar<T>(const T*, double, bool*, const StridedLayout&, cudaStream_t); \
  template void strided_logical_not<T>(const T*, bool*, const StridedLayout&, cudaStream_t);
FSDP_COMPARE(float)
FSDP_COMPARE(bf16)
FSDP_COMPARE(fp16)
FSDP_COMPARE(double)
FSDP_COMPARE(std::int64_t)
FSDP_COMPARE(std::int32_t)
FSDP_COMPARE(bool)
#undef FSDP_COMPARE

#define FSDP_SELECT(T)                                                                      \
  template void strided_where<T>(const bool*, const T*, const T*, T*, const StridedLayout&, \
                                 cudaStream_t);                                             \
  template void strided_masked_fill<T>(const T*, const bool*, T, T*, const StridedLayout&,  \
                                       cudaStream_t);
FSDP_SELECT(std::uint8_t)
FSDP_SELECT(std::uint16_t)
FSDP_SELECT(std::uint32_t)
FSDP_SELECT(std::uint64_t)
#undef FSDP_SELECT

#define FSDP_COPY(D, S) \
  template void strided_copy<D, S>(const S*, D*, const StridedLayout&, cudaStream_t)
// Every ordered pair of the dtypes' storage types (the pairs of one type are unused but for
// uint8's, whose bytes are uint8: kernel_table.cpp moves a copy of one dtype as bytes).
#define FSDP_COPY_TO(D)       \
  FSDP_COPY(D, float);        \
  FSDP_COPY(D, double);       \
  FSDP_COPY(D, bf16);         \
  FSDP_COPY(D, fp16);         \
  FSDP_COPY(D, std::int64_t); \
  FSDP_COPY(D, std::int32_t); \
  FSDP_COPY(D, std::uint8_t); \
  FSDP_COPY(D, bool)
FSDP_COPY_TO(float);
FSDP_COPY_TO(double);
FSDP_COPY_TO(bf16);
FSDP_COPY_TO(fp16);
FSDP_COPY_TO(std::int64_t);
FSDP_COPY_TO(std::int32_t);
FSDP_COPY_TO(std::uint8_t);
FSDP_COPY_TO(bool);
#undef FSDP_COPY_TO
// The other element sizes' bytes.
FSDP_COPY(std::uint16_t, std::uint16_t);
FSDP_COPY(std::uint32_t, std::uint32_t);
FSDP_COPY(std::uint64_t, std::uint64_t);
#undef FSDP_COPY

}  // namespace fsdp::cuda
