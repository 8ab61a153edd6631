#include "core/cuda/kernel_table.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include "core/cuda/cuda_check.h"
#include "core/cuda/devices.h"
#include "core/cuda/flash_attention.h"
#include "core/cuda/gemm.h"
#include "core/cuda/index_fault.h"
#include "core/cuda/kernels.h"
#include "core/cuda/launch.h"
#include "core/cuda/streams.h"
#include "core/device_copy.h"
#include "core/error.h"
#include "core/kernels/kernel_families.h"
#include "core/kernels/kernel_names.h"
#include "core/matmul_precision.h"
#include "core/random.h"

namespace fsdp::cuda {
namespace {

// The device of a kernel: that of its first CUDA tensor ("cuda" is cuda:0); `d` starts as cuda.
void find_device(Device& d, const Tensor& t) {
  if (d.index < 0 && t.defined() && t.device().is_cuda()) d = stream_device(t.device());
}
void find_device(Device& d, const std::vector<Tensor>& ts) {
  for (const auto& t : ts) find_device(d, t);
}
template <typename A>
void find_device(Device&, const A&) {}

[[noreturn]] void missing(const char* family, Device device, const std::string& what = "") {
  throw NotImplementedError(fmt::format("{}: no CUDA kernel yet{}{} (device {})", family,
                                        what.empty() ? "" : " for ", what, device.str()));
}

// A family without a CUDA kernel: every entry of the table is this until it has one.
template <typename Member>
struct Missing;
template <typename... A>
struct Missing<void (*KernelTable::*)(A...)> {
  template <auto Member>
  static void run(A... args) {
    Device device(DeviceType::CUDA);
    (find_device(device, args), ...);
    missing(kernel_name<Member>(), stream_device(device));
  }
};

// Where a kernel runs: its device current on this thread, the current stream's handle.
struct Launch {
  explicit Launch(Device d)
      : device(stream_device(d)),
        index(checked_index(device)),
        guard(index),
        stream(streams().native(current_stream(device))) {}
  Device device;
  int index;
  DeviceGuard guard;
  cudaStream_t stream;
};

// The dtypes the kernels store as float or 16 bits (bf16, fp16) and compute in float.
bool is_float_or_16bit(DType t) {
  return t == DType::Float32 || t == DType::BFloat16 || t == DType::Float16;
}

std::string layout_of(const Tensor& t) {
  return fmt::format("{} of shape {}{}", dtype_name(t.dtype()), shape_str(t.shape()),
                     t.is_contiguous() ? "" : " (strided)");
}

// Calls f.template operator()<T>() with T float, bf16 or fp16 for the dtype (one of
// is_float_or_16bit's: callers check first).
template <typename F>
void float_or_16bit(DType t, F&& f) {
  if (t == DType::Float32)
    f.template operator()<float>();
  else if (t == DType::BFloat16)
    f.template operator()<bf16>();
  else
    f.template operator()<fp16>();
}

template <typename T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

// A 0-d cpu operand (PyTorch's scalar rule) as a tensor on `device`: kernels read device memory.
Tensor on_device(const Tensor& t, Device device) {
  if (!t.defined() || !t.device().is_cpu()) return t;
  Tensor d = new_tensor(t.shape(), t.dtype(), device);
  d.copy_(t);
  return d;
}

// The output's sizes and each operand's strides broadcast to them (stride 0 along a broadcast
// dim); false beyond the kernels' kMaxDims dims. Size-1 dims are dropped: they move nothing.
bool strided_layout(const Tensor& out, std::initializer_list<const Tensor*> operands,
                    StridedLayout& l) {
  const Shape& sizes = out.shape();
  const int nd = static_cast<int>(sizes.size());
  const Tensor* all[4] = {&out, nullptr, nullptr, nullptr};
  int k = 1;
  for (const Tensor* t : operands) all[k++] = t;
  l = StridedLayout{};
  l.numel = out.numel();
  for (int d = 0; d < nd; ++d) {
    if (sizes[d] == 1) continue;
    if (l.ndim == kMaxDims) return false;
    l.size[l.ndim] = sizes[d];
    for (int j = 0; j < k; ++j) {
      const Tensor& t = *all[j];
      const int td = d - (nd - static_cast<int>(t.dim()));
      l.stride[j][l.ndim] = td < 0 || t.shape()[td] == 1 ? 0 : t.strides()[td];
    }
    ++l.ndim;
  }
  return true;
}

// Calls f.template operator()<T>() with T float, bf16, fp16 or double for the dtype; false for
// any other dtype.
template <typename F>
bool float_types(DType t, F&& f) {
  if (t == DType::Float64)
    f.template operator()<double>();
  else if (is_float_or_16bit(t))
    float_or_16bit(t, f);
  else
    return false;
  return true;
}

// Calls f.template operator()<T>() with T the storage type of any dtype (bool, the integers,
// float, double, bf16, fp16).
template <typename F>
void storage_types(DType t, F&& f) {
  switch (t) {
    case DType::Int64:
      return f.template operator()<std::int64_t>();
    case DType::Int32:
      return f.template operator()<std::int32_t>();
    case DType::UInt8:
      return f.template operator()<std::uint8_t>();
    case DType::Bool:
      return f.template operator()<bool>();
    default:
      float_types(t, f);
  }
}

// --- copies and fills

// Bytes between two contiguous tensors of one dtype and size, whichever devices (copy_bytes
// orders them on the current streams).
void copy_contiguous(const Tensor& dst, const Tensor& src) {
  copy_bytes(dst.data_ptr(), dst.device(), src.data_ptr(), src.device(), dst.nbytes());
}

void copy_on_device(const char* family, const Tensor& dst, const Tensor& src);

// Between the host and the device, the host side does any broadcast or conversion (a host
// buffer is prepared or read, as torch stages a pageable copy); a strided device side goes
// through a contiguous device buffer and the strided copy kernel.
void copy_through_host(const char* family, const Tensor& dst, const Tensor& src) {
  if (dst.device().is_cpu()) {
    Tensor from = src;
    if (!src.is_contiguous()) {
      from = new_tensor(src.shape(), src.dtype(), src.device());
      copy_on_device(family, from, src);
    }
    if (dst.is_contiguous() && dst.dtype() == src.dtype() && dst.shape() == src.shape())
      return copy_contiguous(dst, from);
    Tensor host = empty(src.shape(), TensorOptions(src.dtype(), kCPU));
    copy_contiguous(host, from);
    kernels(kCPU).copy_broadcast(dst, host);
    return;
  }
  Tensor host = src;
  if (!src.is_contiguous() || dst.dtype() != src.dtype() || dst.shape() != src.shape()) {
    host = empty(dst.shape(), TensorOptions(dst.dtype(), kCPU));
    kernels(kCPU).copy_broadcast(host, src);
  }
  if (dst.is_contiguous()) return copy_contiguous(dst, host);
  Tensor staged = new_tensor(dst.shape(), dst.dtype(), dst.device());
  copy_contiguous(staged, host);
  copy_on_device(family, dst, staged);
}

// The strided copy of one storage type: `bytes` picks the unsigned integer of that size.
void strided_copy_bytes(std::size_t bytes, const Tensor& dst, const Tensor& src,
                        const StridedLayout& l, cudaStream_t stream) {
  switch (bytes) {
    case 1:
      return strided_copy(ptr<const std::uint8_t>(src), ptr<std::uint8_t>(dst), l, stream);
    case 2:
      return strided_copy(ptr<const std::uint16_t>(src), ptr<std::uint16_t>(dst), l, stream);
    case 4:
      return strided_copy(ptr<const std::uint32_t>(src), ptr<std::uint32_t>(dst), l, stream);
    default:
      return strided_copy(ptr<const std::uint64_t>(src), ptr<std::uint64_t>(dst), l, stream);
  }
}

void copy_on_device(const char* family, const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  const DType dd = dst.dtype(), sd = src.dtype();
  const bool dense = dst.is_contiguous() && src.is_contiguous() && dst.shape() == src.shape();
  if (dense && dd == sd) return copy_contiguous(dst, src);
  const Device device = stream_device(dst.device());
  StridedLayout l;
  if (!strided_layout(dst, {&src}, l))
    missing(family, device, fmt::format("{} to {}", layout_of(src), layout_of(dst)));
  Launch launch(device);
  if (dd == sd) return strided_copy_bytes(dtype_size(dd), dst, src, l, launch.stream);
  // Dense float32 <-> 16 bits: the 16-byte-load kernels.
  const DType narrow = dd == DType::Float32 ? sd : dd, wide = dd == DType::Float32 ? dd : sd;
  if (dense && wide == DType::Float32 && (narrow == DType::BFloat16 || narrow == DType::Float16)) {
    float_or_16bit(narrow, [&]<typename T>() {
      if constexpr (!std::is_same_v<T, float>) {
        if (dd == DType::Float32)
          cast(ptr<const T>(src), ptr<float>(dst), dst.numel(), launch.stream);
        else
          cast(ptr<const float>(src), ptr<T>(dst), dst.numel(), launch.stream);
      }
    });
    return;
  }
  storage_types(dd, [&]<typename D>() {
    storage_types(sd, [&]<typename S>() {
      if constexpr (!std::is_same_v<D, S>)  // same dtypes moved as bytes above
        strided_copy(ptr<const S>(src), ptr<D>(dst), l, launch.stream);
    });
  });
}

void copy(const Tensor& dst, const Tensor& src) {
  if (dst.device().is_cpu() || src.device().is_cpu()) return copy_through_host("copy", dst, src);
  copy_on_device("copy", dst, src);
}

void copy_broadcast(const Tensor& dst, const Tensor& src) {
  if (dst.device().is_cpu() || src.device().is_cpu())
    return copy_through_host("copy_broadcast", dst, src);
  copy_on_device("copy_broadcast", dst, src);
}

void fill(const Tensor& t, double value) {
  if (t.numel() == 0) return;
  if (t.is_contiguous()) {
    Launch l(t.device());
    // Zero is all-zero bits in every dtype (0.0f, 0, false): one memset.
    if (value == 0.0 && !std::signbit(value))
      return FSDP_CUDA_CHECK(cudaMemsetAsync(t.data_ptr(), 0, t.nbytes(), l.stream));
    if (is_float_or_16bit(t.dtype()))
      return float_or_16bit(t.dtype(), [&]<typename T>() {
        cuda::fill<T>(ptr<T>(t), static_cast<float>(value), t.numel(), l.stream);
      });
  }
  // Any other dtype or layout: the value converted on the host (the CPU's conversion), then
  // broadcast from one device element by the strided copy.
  Tensor host = empty({}, TensorOptions(t.dtype(), kCPU));
  kernels(kCPU).fill(host, value);
  Tensor one = new_tensor({}, t.dtype(), t.device());
  copy_contiguous(one, host);
  copy_on_device("fill", t, one);
}

// nn.init's draws are made on the host (the CPU's numbers, as fake_cuda's): stored as values.
void store_values(const Tensor& t, const std::vector<double>& values) {
  Tensor host = empty(t.shape(), TensorOptions(t.dtype(), kCPU));
  kernels(kCPU).store_values(host, values);
  copy_through_host("store_values", t, host);
}

void random(const RandomSpec& spec, const Tensor& t, Generator& g) {
  Tensor host = empty(t.shape(), TensorOptions(t.dtype(), kCPU));
  kernels(kCPU).random(spec, host, g);
  copy_through_host("random", t, host);
}

// --- element-wise

void binary(BinaryKind kind, const Tensor& out, const Tensor& a_in, const Tensor& b_in,
            double alpha) {
  const Device device = stream_device(out.device());
  if (out.numel() == 0) return;
  const Tensor a = on_device(a_in, device), b = on_device(b_in, device);
  const bool contiguous = out.is_contiguous() && a.is_contiguous() && b.is_contiguous();
  if (contiguous && is_float_or_16bit(out.dtype()) &&
      ((kind == BinaryKind::Add && alpha == 1.0) || kind == BinaryKind::Mul)) {
    // The 16-byte-load kernels of elementwise.cu.
    const BroadcastGeometry geometry = broadcast_geometry(a.shape(), b.shape(), "binary");
    Launch l(device);
    const BinaryOp op = kind == BinaryKind::Add ? BinaryOp::Add : BinaryOp::Mul;
    float_or_16bit(out.dtype(), [&]<typename T>() {
      cuda::binary<T>(op, ptr<const T>(a), ptr<const T>(b), ptr<T>(out), geometry, l.stream);
    });
    return;
  }
  StridedLayout layout;
  if (!strided_layout(out, {&a, &b}, layout))
    missing("binary", device, fmt::format("{} dims", out.dim()));
  Launch l(device);
  const auto op = kind;
  if (!float_types(out.dtype(), [&]<typename T>() {
        strided_binary<T>(op, ptr<const T>(a), ptr<const T>(b), ptr<T>(out), layout, alpha,
                          l.stream);
      }))
    missing("binary", device, layout_of(out));
}

// The kernels' enums follow the table's (kernels.h cannot include the table: nvcc and fmt).

void unary(UnaryKind kind, const Tensor& out, const Tensor& a, double scalar) {
  const Device device = stream_device(out.device());
  if (out.numel() == 0) return;
  StridedLayout layout;
  if (!strided_layout(out, {&a}, layout))
    missing("unary", device, fmt::format("{} dims", out.dim()));
  Launch l(device);
  const auto op = kind;
  if (!float_types(out.dtype(), [&]<typename T>() {
        strided_unary<T>(op, ptr<const T>(a), ptr<T>(out), layout, scalar, l.stream);
      }))
    missing("unary", device, layout_of(out));
}

// --- comparisons and selections

// Calls f.template operator()<T>() with T the comparable storage type of the dtype (any but
// uint8); false for uint8.
template <typename F>
bool comparable_types(DType t, F&& f) {
  if (t == DType::UInt8) return false;
  storage_types(t, f);
  return true;
}

// Calls f.template operator()<U>() with U the unsigned integer of the dtype's element size.
template <typename F>
void bits_type(DType t, F&& f) {
  switch (dtype_size(t)) {
    case 1:
      return f.template operator()<std::uint8_t>();
    case 2:
      return f.template operator()<std::uint16_t>();
    case 4:
      return f.template operator()<std::uint32_t>();
    default:
      return f.template operator()<std::uint64_t>();
  }
}

void compare(CompareKind kind, const Tensor& out, const Tensor& a_in, const Tensor& b_in) {
  const Device device = stream_device(out.device());
  if (out.numel() == 0) return;
  const Tensor a = on_device(a_in, device), b = on_device(b_in, device);
  StridedLayout layout;
  if (!strided_layout(out, {&a, &b}, layout))
    missing("compare", device, fmt::format("{} dims", out.dim()));
  Launch l(device);
  const auto op = kind;
  if (!comparable_types(a.dtype(), [&]<typename T>() {
        strided_compare<T>(op, ptr<const T>(a), ptr<const T>(b), ptr<bool>(out), layout, l.stream);
      }))
    missing("compare", device, layout_of(a));
}

void eq_scalar(const Tensor& out, const Tensor& a, double b) {
  const Device device = stream_device(out.device());
  if (out.numel() == 0) return;
  StridedLayout layout;
  if (!strided_layout(out, {&a}, layout))
    missing("eq_scalar", device, fmt::format("{} dims", out.dim()));
  Launch l(device);
  if (!comparable_types(a.dtype(), [&]<typename T>() {
        strided_eq_scalar<T>(ptr<const T>(a), b, ptr<bool>(out), layout, l.stream);
      }))
    missing("eq_scalar", device, layout_of(a));
}

void logical_not(const Tensor& out, const Tensor& a) {
  const Device device = stream_device(out.device());
  if (out.numel() == 0) return;
  StridedLayout layout;
  if (!strided_layout(out, {&a}, layout))
    missing("logical_not", device, fmt::format("{} dims", out.dim()));
  Launch l(device);
  if (!comparable_types(a.dtype(), [&]<typename T>() {
        strided_logical_not<T>(ptr<const T>(a), ptr<bool>(out), layout, l.stream);
      }))
    missing("logical_not", device, layout_of(a));
}

void where(const Tensor& out, const Tensor& condition, const Tensor& a_in, const Tensor& b_in) {
  const Device device = stream_device(out.device());
  if (out.numel() == 0) return;
  const Tensor c = on_device(condition, device), a = on_device(a_in, device),
               b = on_device(b_in, device);
  StridedLayout layout;
  if (!strided_layout(out, {&c, &a, &b}, layout))
    missing("where", device, fmt::format("{} dims", out.dim()));
  Launch l(device);
  bits_type(out.dtype(), [&]<typename U>() {
    strided_where<U>(ptr<const bool>(c), ptr<const U>(a), ptr<const U>(b), ptr<U>(out), layout,
                     l.stream);
  });
}

void masked_fill(const Tensor& out, const Tensor& a, const Tensor& mask_in, double value) {
  const Device device = stream_device(out.device());
  if (out.numel() == 0) return;
  const Tensor mask = on_device(mask_in, device);
  StridedLayout layout;
  if (!strided_layout(out, {&a, &mask}, layout))
    missing("masked_fill", device, fmt::format("{} dims", out.dim()));
  // The value in the element's bits, converted by the CPU (its rounding, as fill's).
  Tensor host = empty({}, TensorOptions(out.dtype(), kCPU));
  kernels(kCPU).fill(host, value);
  Launch l(device);
  bits_type(out.dtype(), [&]<typename U>() {
    strided_masked_fill<U>(ptr<const U>(a), ptr<const bool>(mask), *ptr<const U>(host), ptr<U>(out),
                           layout, l.stream);
  });
}

void masked_scale(const Tensor& y, const Tensor& x, const Tensor& mask, double scale) {
  const Device device = stream_device(y.device());
  if (y.numel() == 0) return;
  StridedLayout layout;
  if (!strided_layout(y, {&x, &mask}, layout) ||
      (y.dtype() != DType::Float32 && y.dtype() != DType::Float64))
    missing("masked_scale", device, layout_of(y));
  Launch l(device);
  if (y.dtype() == DType::Float32)
    strided_masked_scale(ptr<const float>(x), ptr<const std::uint8_t>(mask), ptr<float>(y), scale,
                         layout, l.stream);
  else
    strided_masked_scale(ptr<const double>(x), ptr<const std::uint8_t>(mask), ptr<double>(y), scale,
                         layout, l.stream);
}

// --- rows by index: the kernels check the indices on the device (index_fault.h)

// index_select_rows / index_add_rows of the index's integer type.
template <typename F>
void with_index_type(const Tensor& index, F&& f) {
  if (index.dtype() == DType::Int32)
    f.template operator()<std::int32_t>();
  else
    f.template operator()<std::int64_t>();
}

void index_select(const Tensor& out, const Tensor& src, const Tensor& index,
                  const IndexBounds& bounds, std::int64_t outer, std::int64_t inner) {
  const Device device = stream_device(out.device());
  if (out.numel() == 0) return;
  if (!src.is_contiguous() || !out.is_contiguous() || !index.is_contiguous())
    missing("index_select", device, layout_of(src));
  Launch l(device);
  IndexFault* fault = index_fault_record(l.index);
  bits_type(out.dtype(), [&]<typename U>() {
    with_index_type(index, [&]<typename I>() {
      index_select_rows<U, I>(ptr<const U>(src), ptr<const I>(index), ptr<U>(out), outer,
                              index.numel(), inner, bounds, fault, l.stream);
    });
  });
}

void index_add(const Tensor& grad, const Tensor& src, const Tensor& index,
               const IndexBounds& bounds, std::int64_t outer, std::int64_t inner) {
  const Device device = stream_device(grad.device());
  if (src.numel() == 0) return;
  if (!src.is_contiguous() || !grad.is_contiguous() || !index.is_contiguous())
    missing("index_add", device, layout_of(src));
  Launch l(device);
  IndexFault* fault = index_fault_record(l.index);
  if (!float_types(grad.dtype(), [&]<typename T>() {
        with_index_type(index, [&]<typename I>() {
          index_add_rows<T, I>(ptr<const T>(src), ptr<const I>(index), ptr<T>(grad), outer,
                               index.numel(), inner, bounds, fault, l.stream);
        });
      }))
    missing("index_add", device, layout_of(grad));
}

// --- reductions over any dims

// a's dims split into kept (the outputs, in order) and reduced ones; false beyond kMaxDims of
// either (size-1 dims dropped).
bool reduce_layout(const Tensor& a, const std::vector<bool>& mask, ReduceLayout& l) {
  l = ReduceLayout{};
  for (std::int64_t d = 0; d < a.dim(); ++d) {
    const std::int64_t size = a.shape()[d], stride = a.strides()[d];
    if (size == 1) continue;
    if (mask[d]) {
      if (l.reduced == kMaxDims) return false;
      l.reduced_size[l.reduced] = size;
      l.reduced_stride[l.reduced++] = stride;
      l.count *= size;
    } else {
      if (l.kept == kMaxDims) return false;
      l.kept_size[l.kept] = size;
      l.kept_stride[l.kept++] = stride;
      l.outputs *= size;
    }
  }
  return true;
}

void sum(const Tensor& out, const Tensor& a, const std::vector<bool>& mask, bool mean,
         std::int64_t count) {
  const Device device = stream_device(out.device());
  ReduceLayout l;
  if (out.dtype() != a.dtype() || !reduce_layout(a, mask, l))
    missing("sum", device, fmt::format("{} into {}", layout_of(a), layout_of(out)));
  if (out.numel() == 0) return;
  Launch launch(device);
  const double scale = mean ? 1.0 / static_cast<double>(count) : 1.0;
  if (!float_types(out.dtype(), [&]<typename T>() {
        reduce_sum<T>(ptr<const T>(a), ptr<T>(out), l, scale, launch.stream);
      }))
    missing("sum", device, layout_of(a));
}

void amax(const Tensor& out, const Tensor& a, const std::vector<bool>& mask) {
  const Device device = stream_device(out.device());
  ReduceLayout l;
  if (out.dtype() != a.dtype() || !reduce_layout(a, mask, l))
    missing("amax", device, fmt::format("{} into {}", layout_of(a), layout_of(out)));
  if (out.numel() == 0) return;
  Launch launch(device);
  if (!float_types(out.dtype(), [&]<typename T>() {
        reduce_max<T>(ptr<const T>(a), ptr<T>(out), l, launch.stream);
      }))
    missing("amax", device, layout_of(a));
}

// --- activations: every kind (relu, tanh, sigmoid, gelu in both forms, silu), float32/bf16/fp16

void activation(ActivationKind kind, const Tensor& y, const Tensor& x) {
  const Device device = stream_device(y.device());
  if (!is_float_or_16bit(y.dtype())) missing("activation", device, layout_of(y));
  if (y.numel() == 0) return;
  Launch l(device);
  float_or_16bit(y.dtype(), [&]<typename T>() {
    activation_forward<T>(kind, ptr<const T>(x), ptr<T>(y), y.numel(), l.stream);
  });
}

void activation_backward(ActivationKind kind, const Tensor& dx, const Tensor& saved,
                         const Tensor& g) {
  const Device device = stream_device(dx.device());
  if (!is_float_or_16bit(dx.dtype())) missing("activation_backward", device, layout_of(dx));
  if (dx.numel() == 0) return;
  Launch l(device);
  float_or_16bit(dx.dtype(), [&]<typename T>() {
    cuda::activation_backward<T>(kind, ptr<const T>(saved), ptr<const T>(g), ptr<T>(dx), dx.numel(),
                                 l.stream);
  });
}

// --- gradient clipping (core/nn/clip_grad.cpp)

// t's elements as float64 on the device, contiguous (the CPU's norm shares are double).
Tensor as_float64(const char* family, const Tensor& t, cudaStream_t stream) {
  Tensor wide = new_tensor(t.shape(), DType::Float64, t.device());
  StridedLayout l;
  if (!strided_layout(wide, {&t}, l)) missing(family, stream_device(t.device()), layout_of(t));
  if (t.dtype() == DType::Float32) {
    strided_copy(ptr<const float>(t), ptr<double>(wide), l, stream);
  } else if (t.dtype() == DType::BFloat16 || t.dtype() == DType::Float16) {
    // through float (exact: float holds every bf16 and fp16 value)
    Tensor f = new_tensor(t.shape(), DType::Float32, t.device());
    copy_on_device(family, f, t);
    strided_layout(wide, {&f}, l);
    strided_copy(ptr<const float>(f), ptr<double>(wide), l, stream);
  } else if (t.dtype() == DType::Float64) {
    strided_copy_bytes(8, wide, t, l, stream);
  } else {
    missing(family, stream_device(t.device()), layout_of(t));
  }
  return wide;
}

// out (0-d float64) = sum |x|^p, or max |x| for p = inf, in double as the CPU's.
void norm_partial(const Tensor& out, const Tensor& t, double p) {
  const Device device = stream_device(out.device());
  if (!(p > 0) || (std::isinf(p) && p < 0)) missing("norm_partial", device, fmt::format("p {}", p));
  Launch l(device);
  const Tensor x = as_float64("norm_partial", t, l.stream);
  StridedLayout self;
  strided_layout(x, {&x}, self);
  strided_unary<double>(UnaryKind::Abs, ptr<const double>(x), ptr<double>(x), self, 0.0, l.stream);
  ReduceLayout all;
  all.reduced = 1;
  all.reduced_size[0] = x.numel();
  all.reduced_stride[0] = 1;
  all.count = x.numel();
  if (std::isinf(p)) {
    if (x.numel() == 0) return fill(out, 0.0);
    return reduce_max<double>(ptr<const double>(x), ptr<double>(out), all, l.stream);
  }
  if (p != 1.0)
    strided_unary<double>(UnaryKind::Pow, ptr<const double>(x), ptr<double>(x), self, p, l.stream);
  reduce_sum<double>(ptr<const double>(x), ptr<double>(out), all, 1.0, l.stream);
}

// t clamped into [lo, hi] in place; nan stays nan (maximum and minimum propagate it).
void clamp_(const Tensor& t, double lo, double hi) {
  if (!float_types(t.dtype(), []<typename>() {}))
    missing("clamp_", stream_device(t.device()), layout_of(t));
  if (t.numel() == 0) return;
  for (auto [kind, bound] : {std::pair{BinaryKind::Maximum, lo}, {BinaryKind::Minimum, hi}}) {
    if (std::isinf(bound)) continue;  // no bound on that side
    binary(kind, t, t, scalar_tensor(bound, TensorOptions(t.dtype(), kCPU)), 1.0);
  }
}

// --- mse_loss (core/functional/mse_loss.cpp), from the element-wise and reduction kernels in
// the CPU's order: the difference in x's dtype, its square summed in double.

void mse_loss(const Tensor& out, const Tensor& x, const Tensor& t, bool none, bool mean) {
  const Device device = stream_device(out.device());
  if (x.dtype() != DType::Float32 && x.dtype() != DType::Float64)
    missing("mse_loss", device, layout_of(x));
  if (none) {
    binary(BinaryKind::Sub, out, x, t, 1.0);
    unary(UnaryKind::Square, out, out, 0.0);
    return;
  }
  Tensor diff = new_tensor(x.shape(), x.dtype(), device);
  binary(BinaryKind::Sub, diff, x, t, 1.0);
  Launch l(device);
  const Tensor wide = as_float64("mse_loss", diff, l.stream);
  StridedLayout self;
  strided_layout(wide, {&wide}, self);
  strided_unary<double>(UnaryKind::Square, ptr<const double>(wide), ptr<double>(wide), self, 0.0,
                        l.stream);
  ReduceLayout all;
  all.reduced = 1;
  all.reduced_size[0] = all.count = wide.numel();
  all.reduced_stride[0] = 1;
  Tensor total = new_tensor({}, DType::Float64, device);
  if (wide.numel() == 0)
    fill(total, 0.0);
  else
    reduce_sum<double>(ptr<const double>(wide), ptr<double>(total), all,
                       mean ? 1.0 / static_cast<double>(wide.numel()) : 1.0, l.stream);
  copy_on_device("mse_loss", out, total);
}

void mse_loss_backward(const Tensor& d, const Tensor& x, const Tensor& t, const Tensor& g,
                       double scale) {
  const Device device = stream_device(d.device());
  if (x.dtype() != DType::Float32 && x.dtype() != DType::Float64)
    missing("mse_loss_backward", device, layout_of(x));
  binary(BinaryKind::Sub, d, x, t, 1.0);
  if (g.numel() == d.numel()) {
    binary(BinaryKind::Mul, d, d, g, 1.0);
    unary(UnaryKind::MulScalar, d, d, scale);  // exact for 2: 2 (x - t) g == ((x - t) g) 2
  } else {
    // The CPU's rounding: k = g scale in the dtype, then k (x - t), all on the device.
    Tensor k = new_tensor({}, d.dtype(), d.device());
    unary(UnaryKind::MulScalar, k, g, scale);
    binary(BinaryKind::Mul, d, d, k, 1.0);
  }
}

// --- classification losses (class_loss.cu): targets checked on the device (index_fault.h),
// the upstream gradient read on the device (float64, one or one per position)

void cross_entropy(const Tensor& losses, const Tensor& lse, const Tensor& x, const Tensor& targets,
                   const NcsLayout& layout, const IndexBounds& bounds, double label_smoothing) {
  const Device device = stream_device(losses.device());
  Launch l(device);
  IndexFault* fault = index_fault_record(l.index);
  if (!float_types(x.dtype(), [&]<typename T>() {
        cross_entropy_positions<T>(ptr<const T>(x), ptr<const std::int64_t>(targets),
                                   ptr<double>(losses), ptr<double>(lse), layout.n, layout.c,
                                   layout.s, bounds, fault, label_smoothing, l.stream);
      }))
    missing("cross_entropy", device, layout_of(x));
}

void cross_entropy_backward(const Tensor& dx, const Tensor& x, const Tensor& lse,
                            const Tensor& targets, const Tensor& grads, const NcsLayout& layout,
                            const IndexBounds& bounds, double label_smoothing) {
  const Device device = stream_device(dx.device());
  Launch l(device);
  IndexFault* fault = index_fault_record(l.index);
  const bool per_position = grads.numel() != 1;
  if (!float_types(x.dtype(), [&]<typename T>() {
        cross_entropy_positions_backward<T>(
            ptr<const T>(x), ptr<const double>(lse), ptr<const std::int64_t>(targets),
            ptr<const double>(grads), per_position, ptr<T>(dx), layout.n, layout.c, layout.s,
            bounds, fault, label_smoothing, l.stream);
      }))
    missing("cross_entropy_backward", device, layout_of(x));
}

void nll_loss(const Tensor& losses, const Tensor& x, const Tensor& targets, const NcsLayout& layout,
              const IndexBounds& bounds) {
  const Device device = stream_device(losses.device());
  Launch l(device);
  IndexFault* fault = index_fault_record(l.index);
  if (!float_types(x.dtype(), [&]<typename T>() {
        nll_positions<T>(ptr<const T>(x), ptr<const std::int64_t>(targets), ptr<double>(losses),
                         layout.n, layout.c, layout.s, bounds, fault, l.stream);
      }))
    missing("nll_loss", device, layout_of(x));
}

void nll_loss_backward(const Tensor& dx, const Tensor& targets, const Tensor& grads,
                       const NcsLayout& layout, const IndexBounds& bounds) {
  const Device device = stream_device(dx.device());
  Launch l(device);
  IndexFault* fault = index_fault_record(l.index);
  const bool per_position = grads.numel() != 1;
  if (!float_types(dx.dtype(), [&]<typename T>() {
        nll_positions_backward<T>(ptr<const std::int64_t>(targets), ptr<const double>(grads),
                                  per_position, ptr<T>(dx), layout.n, layout.c, layout.s, bounds,
                                  fault, l.stream);
      }))
    missing("nll_loss_backward", device, layout_of(dx));
}

void sum_in_order(const Tensor& out, const Tensor& count, const Tensor& values,
                  const Tensor& targets, std::int64_t ignore_index) {
  const Device device = stream_device(out.device());
  if (values.dtype() != DType::Float64 || !values.is_contiguous())
    missing("sum_in_order", device, layout_of(values));
  Launch l(device);
  Tensor total = out.dtype() == DType::Float64 ? out : new_tensor({}, DType::Float64, device);
  cuda::sum_in_order(ptr<const double>(values), values.numel(),
                     targets.defined() ? ptr<const std::int64_t>(targets) : nullptr, ignore_index,
                     count.defined() ? ptr<double>(count) : nullptr, ptr<double>(total), l.stream);
  if (out.dtype() != DType::Float64) copy_on_device("sum_in_order", out, total);
}

// --- attention heads: split_heads and merge_heads are strided copies, each part of the packed
// (L, N, parts * heads * hd) rows walked as (N, heads, L, hd), the order of a contiguous
// (N * heads, L, hd) part; part 0 divided by first_divisor afterwards (one rounding, as the
// CPU's: the copy is exact).

StridedLayout heads_layout(const HeadsLayout& h, bool to_packed) {
  StridedLayout l;
  l.ndim = 4;
  const std::int64_t size[4] = {h.N, h.heads, h.L, h.hd};
  const std::int64_t part[4] = {h.heads * h.L * h.hd, h.L * h.hd, h.hd, 1};
  const std::int64_t packed[4] = {h.row(), h.hd, h.N * h.row(), 1};
  for (int d = 0; d < 4; ++d) {
    l.size[d] = size[d];
    l.stride[0][d] = to_packed ? packed[d] : part[d];
    l.stride[1][d] = to_packed ? part[d] : packed[d];
    l.numel *= size[d];
  }
  return l;
}

void move_part(DType dtype, void* dst, const void* src, const StridedLayout& l, double divisor,
               cudaStream_t stream) {
  bits_type(dtype, [&]<typename U>() {
    strided_copy(static_cast<const U*>(src), static_cast<U*>(dst), l, stream);
  });
  if (divisor == 1.0) return;
  StridedLayout in_place = l;
  for (int d = 0; d < l.ndim; ++d) in_place.stride[1][d] = l.stride[0][d];
  float_types(dtype, [&]<typename T>() {
    strided_unary<T>(UnaryKind::DivScalar, static_cast<const T*>(dst), static_cast<T*>(dst),
                     in_place, divisor, stream);
  });
}

void split_heads(const std::vector<Tensor>& heads, const Tensor& packed, const HeadsLayout& layout,
                 double first_divisor) {
  const Device device = stream_device(packed.device());
  if (!float_types(packed.dtype(), []<typename>() {}))
    missing("split_heads", device, layout_of(packed));
  Launch l(device);
  const StridedLayout walk = heads_layout(layout, false);
  const std::size_t es = dtype_size(packed.dtype());
  for (std::int64_t p = 0; p < layout.parts; ++p)
    move_part(packed.dtype(), heads[p].data_ptr(),
              static_cast<const char*>(packed.data_ptr()) + p * layout.heads * layout.hd * es, walk,
              p == 0 ? first_divisor : 1.0, l.stream);
}

void merge_heads(const Tensor& packed, const std::vector<Tensor>& heads, const HeadsLayout& layout,
                 double first_divisor) {
  const Device device = stream_device(packed.device());
  if (!float_types(packed.dtype(), []<typename>() {}))
    missing("merge_heads", device, layout_of(packed));
  Launch l(device);
  const StridedLayout walk = heads_layout(layout, true);
  const std::size_t es = dtype_size(packed.dtype());
  for (std::int64_t p = 0; p < layout.parts; ++p) {
    char* to = static_cast<char*>(packed.data_ptr()) + p * layout.heads * layout.hd * es;
    if (heads[p].defined()) {
      move_part(packed.dtype(), to, heads[p].data_ptr(), walk, p == 0 ? first_divisor : 1.0,
                l.stream);
      continue;
    }
    // An undefined part gives zeros: its slice of the packed rows, from one zero element.
    const Tensor zero = new_tensor({}, packed.dtype(), device);
    FSDP_CUDA_CHECK(cudaMemsetAsync(zero.data_ptr(), 0, es, l.stream));
    StridedLayout from_zero = walk;
    for (int d = 0; d < walk.ndim; ++d) from_zero.stride[1][d] = 0;
    move_part(packed.dtype(), to, zero.data_ptr(), from_zero, 1.0, l.stream);
  }
}

// --- softmax along a dim (softmax_rows.cu)

void softmax(const Tensor& y, const Tensor& x, std::int64_t outer, std::int64_t n,
             std::int64_t inner, bool log) {
  const Device device = stream_device(y.device());
  Launch l(device);
  if (!float_types(x.dtype(), [&]<typename T>() {
        softmax_rows<T>(ptr<const T>(x), nullptr, ptr<T>(y), outer, n, inner, 1, log, l.stream);
      }))
    missing("softmax", device, layout_of(x));
}

void softmax_backward(const Tensor& dx, const Tensor& y, const Tensor& g, std::int64_t outer,
                      std::int64_t n, std::int64_t inner, bool log) {
  const Device device = stream_device(dx.device());
  Launch l(device);
  if (!float_types(y.dtype(), [&]<typename T>() {
        softmax_rows_backward<T>(ptr<const T>(y), ptr<const T>(g), ptr<T>(dx), outer, n, inner, log,
                                 l.stream);
      }))
    missing("softmax_backward", device, layout_of(y));
}

void masked_softmax(const Tensor& y, const Tensor& x, const Tensor& m, std::int64_t mask_stride) {
  const Device device = stream_device(y.device());
  const std::int64_t B = x.shape()[0], L = x.shape()[1], S = x.shape()[2];
  Launch l(device);
  // A shared (L, S) mask repeats every L rows; a per-batch one never does.
  const std::int64_t mask_rows = mask_stride == 0 ? L : B * L;
  if (!float_types(x.dtype(), [&]<typename T>() {
        softmax_rows<T>(ptr<const T>(x), ptr<const T>(m), ptr<T>(y), B * L, S, 1, mask_rows, false,
                        l.stream);
      }))
    missing("masked_softmax", device, layout_of(x));
}

// --- layer norm (layer_norm.cu): float32, bf16 or fp16 rows; the statistics float32, the
// weight and bias (one dtype) float32 or the rows' 16-bit dtype, read and written as they are.

// Calls f.template operator()<P>() for the parameters' storage type (float, or T's 16-bit
// type); false when the kernels do not take that dtype (or w and b differ).
template <typename T, typename F>
bool with_layer_norm_params(const Tensor& w, const Tensor& b, F&& f) {
  const Tensor& p = w.defined() ? w : b;
  if (w.defined() && b.defined() && w.dtype() != b.dtype()) return false;
  if (!p.defined() || p.dtype() == DType::Float32) {
    f.template operator()<float>();
    return true;
  }
  if constexpr (!std::is_same_v<T, float>) {
    if (p.dtype() == (std::is_same_v<T, bf16> ? DType::BFloat16 : DType::Float16)) {
      f.template operator()<T>();
      return true;
    }
  }
  return false;
}

template <typename P>
P* optional_ptr(const Tensor& t) {
  return t.defined() ? ptr<P>(t) : nullptr;
}

void layer_norm(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                const Tensor& w, const Tensor& b, std::int64_t n, double eps) {
  const Device device = stream_device(y.device());
  if (!is_float_or_16bit(x.dtype()) || mean.dtype() != DType::Float32)
    missing("layer_norm", device, layout_of(x));
  if (x.numel() == 0) return;
  bool taken = true;
  Launch l(device);
  float_or_16bit(x.dtype(), [&]<typename T>() {
    taken = with_layer_norm_params<T>(w, b, [&]<typename P>() {
      layer_norm_forward<T, P>(ptr<const T>(x), optional_ptr<const P>(w), optional_ptr<const P>(b),
                               ptr<T>(y), ptr<float>(mean), ptr<float>(rstd), x.numel() / n, n,
                               static_cast<float>(eps), l.stream);
    });
  });
  if (!taken) missing("layer_norm", device, layout_of(w.defined() ? w : b));
}

// dw and db (the parameters' dtype) are overwritten; the partial sums live in a scratch tensor
// from the caching allocator.
void layer_norm_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& x,
                         const Tensor& w, const Tensor& mean, const Tensor& rstd, const Tensor& g,
                         std::int64_t n) {
  const Device device = stream_device(dx.device());
  if (!is_float_or_16bit(x.dtype()) || !dx.defined() || mean.dtype() != DType::Float32 ||
      (w.defined() && dw.defined() && dw.dtype() != w.dtype()) ||
      (dw.defined() && db.defined() && dw.dtype() != db.dtype()))
    missing("layer_norm_backward", device, layout_of(x));
  if (n == 0) return;
  const std::int64_t rows = x.numel() / n;
  const Tensor& p = dw.defined() ? dw : db;
  Tensor scratch;
  if (p.defined())
    scratch = new_tensor({layer_norm_backward_scratch(rows, n)}, DType::Float32, device);
  bool taken = true;
  Launch l(device);
  float_or_16bit(x.dtype(), [&]<typename T>() {
    taken = with_layer_norm_params<T>(w.defined() ? w : p, p, [&]<typename P>() {
      ::fsdp::cuda::layer_norm_backward<T, P>(
          ptr<const T>(g), ptr<const T>(x), optional_ptr<const P>(w), ptr<const float>(mean),
          ptr<const float>(rstd), ptr<T>(dx), optional_ptr<P>(dw), optional_ptr<P>(db),
          optional_ptr<float>(scratch), rows, n, l.stream);
    });
  });
  if (!taken) missing("layer_norm_backward", device, layout_of(w.defined() ? w : p));
}

// --- max along a dim (max_dim.cu): float32/bf16/fp16/float64, any layout of a (a strided one
// through a contiguous copy), the kernels on (outer, n, inner) around the dim.

struct AroundDim {
  std::int64_t outer = 1, n = 1, inner = 1;
};
AroundDim around_dim(const Shape& shape, std::int64_t dim) {
  AroundDim r;
  for (std::int64_t d = 0; d < static_cast<std::int64_t>(shape.size()); ++d)
    (d < dim ? r.outer : d == dim ? r.n : r.inner) *= shape[d];
  return r;
}

Tensor contiguous_on_device(const char* family, const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor c = new_tensor(t.shape(), t.dtype(), t.device());
  copy_on_device(family, c, t);
  return c;
}

void max_dim(const Tensor& values, const Tensor& indices, const Tensor& a, std::int64_t dim) {
  const Device device = stream_device(values.device());
  const AroundDim r = around_dim(a.shape(), dim);
  if (a.numel() == 0) return;
  const Tensor ac = contiguous_on_device("max_dim", a);
  Launch l(device);
  if (!float_types(a.dtype(), [&]<typename T>() {
        cuda::max_dim<T>(ptr<const T>(ac), ptr<T>(values), ptr<std::int64_t>(indices), r.outer, r.n,
                         r.inner, l.stream);
      }))
    missing("max_dim", device, layout_of(a));
}

void max_dim_backward(const Tensor& grad, const Tensor& g, const Tensor& indices,
                      std::int64_t dim) {
  const Device device = stream_device(grad.device());
  if (!grad.is_contiguous()) missing("max_dim_backward", device, layout_of(grad));
  const AroundDim r = around_dim(grad.shape(), dim);
  if (grad.numel() == 0) return;
  const Tensor gc = contiguous_on_device("max_dim_backward", g);
  const Tensor ic = contiguous_on_device("max_dim_backward", indices);
  Launch l(device);
  if (!float_types(grad.dtype(), [&]<typename T>() {
        cuda::max_dim_backward<T>(ptr<T>(grad), ptr<const T>(gc), ptr<const std::int64_t>(ic),
                                  r.outer, r.n, r.inner, l.stream);
      }))
    missing("max_dim_backward", device, layout_of(grad));
}

// --- the Hugging Face models' norms (rms_norm.cu) and rotary embedding (rotary.cu): float32 or
// 16-bit, every operand of x's dtype but the statistics (float32, the compute dtype).

void rms_norm(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& w, std::int64_t n,
              double eps) {
  const Device device = stream_device(y.device());
  if (!is_float_or_16bit(x.dtype()) || (w.defined() && w.dtype() != x.dtype()) ||
      rstd.dtype() != DType::Float32)
    missing("rms_norm", device, layout_of(x));
  if (x.numel() == 0) return;
  Launch l(device);
  float_or_16bit(x.dtype(), [&]<typename T>() {
    rms_norm_forward<T>(ptr<const T>(x), w.defined() ? ptr<const T>(w) : nullptr, ptr<T>(y),
                        ptr<float>(rstd), x.numel() / n, n, static_cast<float>(eps), l.stream);
  });
}

// dw += (float sums): the functional layer keeps float64 parameter sums.
void accumulate_into(const Tensor& sum64, const Tensor& part32, cudaStream_t stream) {
  Tensor wide = new_tensor(part32.shape(), DType::Float64, sum64.device());
  StridedLayout l;
  strided_layout(wide, {&part32}, l);
  strided_copy(ptr<const float>(part32), ptr<double>(wide), l, stream);
  strided_layout(sum64, {&sum64, &wide}, l);
  strided_binary<double>(BinaryKind::Add, ptr<const double>(sum64), ptr<const double>(wide),
                         ptr<double>(sum64), l, 1.0, stream);
}

void rms_norm_backward(const Tensor& dx, const Tensor& dw, const Tensor& x, const Tensor& w,
                       const Tensor& rstd, const Tensor& g, std::int64_t n) {
  const Device device = stream_device(dx.device());
  if (!is_float_or_16bit(x.dtype()) || (w.defined() && w.dtype() != x.dtype()) ||
      rstd.dtype() != DType::Float32 || g.dtype() != x.dtype())
    missing("rms_norm_backward", device, layout_of(x));
  if (x.numel() == 0) return;
  Launch l(device);
  const Tensor dw32 = dw.defined() ? new_tensor({n}, DType::Float32, device) : Tensor();
  float_or_16bit(x.dtype(), [&]<typename T>() {
    cuda::rms_norm_backward<T>(ptr<const T>(g), ptr<const T>(x),
                               w.defined() ? ptr<const T>(w) : nullptr, ptr<const float>(rstd),
                               ptr<T>(dx), dw.defined() ? ptr<float>(dw32) : nullptr, x.numel() / n,
                               n, l.stream);
  });
  if (dw.defined()) accumulate_into(dw, dw32, l.stream);
}

void rotary(const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin,
            std::int64_t table_batch, bool transpose) {
  const Device device = stream_device(out.device());
  if (!is_float_or_16bit(x.dtype()) || cos.dtype() != x.dtype() || sin.dtype() != x.dtype() ||
      out.dim() != 4 || x.stride(3) != 1)
    missing("rotary", device, layout_of(x));
  if (out.numel() == 0) return;
  const RotaryGeometry g{.B = out.size(0),
                         .H = out.size(1),
                         .S = out.size(2),
                         .D = out.size(3),
                         .x_batch = x.stride(0),
                         .x_head = x.stride(1),
                         .x_row = x.stride(2),
                         .table_batch = table_batch};
  Launch l(device);
  float_or_16bit(x.dtype(), [&]<typename T>() {
    cuda::rotary<T>(ptr<const T>(x), ptr<const T>(cos), ptr<const T>(sin), ptr<T>(out), g,
                    transpose, l.stream);
  });
}

// --- products through cuBLASLt

// One cuBLASLt handle per thread and device (a handle is not thread-safe; gemm.h).
Gemm& gemm_for(int index) {
  thread_local std::array<std::unique_ptr<Gemm>, CudaStreams::kMaxDevices> handles;
  auto& h = handles[index];
  if (!h) h = std::make_unique<Gemm>();  // on the device the caller's Launch made current
  return *h;
}

// float32 products in float32, or TF32 when set_float32_matmul_precision allows (torch's).
GemmPrecision precision_of(const char* family, const Tensor& t) {
  if (t.dtype() == DType::Float32)
    return float32_matmul_precision() == Float32MatmulPrecision::Highest ? GemmPrecision::FP32
                                                                         : GemmPrecision::TF32;
  if (t.dtype() == DType::BFloat16) return GemmPrecision::BF16;
  if (t.dtype() == DType::Float16) return GemmPrecision::FP16;
  missing(family, stream_device(t.device()), layout_of(t));
}

// A product's operand as cuBLASLt reads it: the logical (rows, cols) matrix of t's last two dims
// is row-major (unit column stride), or the transpose of a row-major one (unit row stride: the
// backward's transposed views), each with its leading dim; anything else is copied contiguous
// first (`keep` holds the copy).
struct GemmOperand {
  const void* ptr = nullptr;
  bool trans = false;
  std::int64_t ld = 0, batch_stride = 0;
  Tensor keep;
};

GemmOperand gemm_operand(const char* family, const Tensor& t) {
  const std::int64_t nd = t.dim(), rows = t.shape()[nd - 2], cols = t.shape()[nd - 1];
  const std::int64_t sr = t.strides()[nd - 2], sc = t.strides()[nd - 1];
  GemmOperand o;
  o.ptr = t.data_ptr();
  o.batch_stride = nd == 3 ? t.strides()[0] : 0;
  if ((cols == 1 || sc == 1) && (rows == 1 || sr >= cols)) {
    o.ld = rows == 1 ? std::max<std::int64_t>(cols, 1) : sr;
    return o;
  }
  if ((rows == 1 || sr == 1) && (cols == 1 || sc >= rows)) {
    o.trans = true;
    o.ld = cols == 1 ? std::max<std::int64_t>(rows, 1) : sc;
    return o;
  }
  o.keep = new_tensor(t.shape(), t.dtype(), t.device());
  copy_on_device(family, o.keep, t);
  o.ptr = o.keep.data_ptr();
  o.ld = cols;
  o.batch_stride = nd == 3 ? rows * cols : 0;
  return o;
}

void linear(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias) {
  const Device device = stream_device(out.device());
  const GemmPrecision precision = precision_of("linear", out);
  const std::int64_t out_features = w.shape()[0], in_features = w.shape()[1];
  if (out.numel() == 0) return;
  if (in_features == 0) {  // an empty product: out is the bias, or zeros
    fill(out, 0.0);
    if (bias.defined()) binary(BinaryKind::Add, out, out, bias, 1.0);
    return;
  }
  // x (rows, in) . w^T: w^T is read through w's strides, as the CPU's.
  const GemmOperand a = gemm_operand("linear", x), b = gemm_operand("linear", w.t());
  const Tensor bc =
      bias.defined() && !bias.is_contiguous() ? on_device(bias.contiguous(), device) : bias;
  Launch l(device);
  GemmArgs g;
  g.precision = precision;
  g.m = out.numel() / out_features;
  g.n = out_features;
  g.k = in_features;
  g.a = a.ptr;
  g.trans_a = a.trans;
  g.lda = a.ld;
  g.b = b.ptr;
  g.trans_b = b.trans;
  g.ldb = b.ld;
  g.c = out.data_ptr();
  if (bc.defined()) {
    g.epilogue = GemmEpilogue::Bias;
    g.bias = bc.data_ptr();
  }
  gemm_for(l.index).run(g, l.stream);
}

void bmm(const Tensor& out, const Tensor& a_in, const Tensor& b_in) {
  const Device device = stream_device(out.device());
  const GemmPrecision precision = precision_of("bmm", out);
  if (out.numel() == 0) return;
  if (a_in.shape()[2] == 0) return fill(out, 0.0);
  const GemmOperand a = gemm_operand("bmm", a_in), b = gemm_operand("bmm", b_in);
  Launch l(device);
  GemmArgs g;
  g.precision = precision;
  g.batch = a_in.shape()[0];
  g.m = a_in.shape()[1];
  g.k = a_in.shape()[2];
  g.n = b_in.shape()[2];
  g.a = a.ptr;
  g.trans_a = a.trans;
  g.lda = a.ld;
  g.stride_a = a.batch_stride;
  g.b = b.ptr;
  g.trans_b = b.trans;
  g.ldb = b.ld;
  g.stride_b = b.batch_stride;
  g.c = out.data_ptr();
  g.stride_c = g.m * g.n;
  gemm_for(l.index).run(g, l.stream);
}

// 16-bit linear's backward (bf16 or fp16): gx = g w, gw = g^T x through cuBLASLt (float
// accumulation), gb the column sums of g in float, rounded once. g (rows, out) and x (rows, in)
// contiguous, w (out, in) by its strides.
void linear_backward16(const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& g,
                       const Tensor& x, const Tensor& w, std::int64_t in_features) {
  const Device device = stream_device(g.device());
  if (g.dtype() != DType::BFloat16 && g.dtype() != DType::Float16)
    missing("linear_backward16", device, layout_of(g));
  const GemmPrecision precision = precision_of("linear_backward16", g);
  const std::int64_t rows = g.shape()[0], out_features = g.shape()[1];
  if (rows == 0) {
    for (const Tensor* t : {&gw, &gb})
      if (t->defined()) fill(*t, 0.0);
    return;
  }
  if (gx.defined()) {
    const GemmOperand b = gemm_operand("linear_backward16", w);
    Launch l(device);
    GemmArgs a;
    a.precision = precision;
    a.m = rows;
    a.n = in_features;
    a.k = out_features;
    a.a = g.data_ptr();
    a.b = b.ptr;
    a.trans_b = b.trans;
    a.ldb = b.ld;
    a.c = gx.data_ptr();
    gemm_for(l.index).run(a, l.stream);
  }
  Launch l(device);
  bool bias_summed = false;
  if (gw.defined()) {
    GemmArgs a;
    a.precision = precision;
    a.m = out_features;
    a.n = in_features;
    a.k = rows;
    a.a = g.data_ptr();
    a.trans_a = true;  // g^T
    a.b = x.data_ptr();
    a.c = gw.data_ptr();
    if (gb.defined()) {  // gb = g^T's sums over the rows, in the product's epilogue
      a.epilogue = GemmEpilogue::BiasGradA;
      a.bias = gb.data_ptr();
      bias_summed = gemm_for(l.index).try_run(a, l.stream);
      a.epilogue = GemmEpilogue::None;
      a.bias = nullptr;
    }
    if (!bias_summed) gemm_for(l.index).run(a, l.stream);
  }
  if (gb.defined() && !bias_summed) {  // no weight gradient, or no algorithm with the epilogue
    const Tensor sums = new_tensor({out_features}, DType::Float32, device);
    float_or_16bit(g.dtype(), [&]<typename T>() {
      if constexpr (!std::is_same_v<T, float>) {
        sum_over_rows<T>(ptr<const T>(g), ptr<float>(sums), rows, out_features, l.stream);
        cast(ptr<const float>(sums), ptr<T>(gb), out_features, l.stream);
      }
    });
  }
}

// --- blocked attention (float32), composed: scores by cuBLASLt, the mask added and the rows
// normalised by softmax_rows (which saves lse), products by cuBLASLt; the backward recomputes P
// and takes dS from softmax_rows_backward (sum(dP P) = sum(dO O) per row). The scores are held
// whole (B, L, S): the flash kernels (flash_attention.h) take 16-bit causal attention without.

// The rows a mask repeats over: one (L, S) mask for every batch entry, or one per entry. The
// composed kernels take blocked_attention's case only: one head per batch entry, q already
// scaled, no causal flag, contiguous operands (scaled_dot_product_attention's GQA, scale,
// causal and strided forms wait for the flash kernels).
std::int64_t attention_mask_rows(const char* family, const Tensor& q, const Tensor& mask,
                                 const AttentionDims& d) {
  const Device device = stream_device(q.device());
  if (d.H != 1 || d.KV != 1 || d.scale != 1.0 || d.causal || d.masked_rows_zero)
    missing(family, device,
            fmt::format("H {} KV {} scale {} causal {}", d.H, d.KV, d.scale, d.causal));
  if (d.q.batch != d.L * d.D || d.q.row != d.D || d.k.batch != d.S * d.D || d.k.row != d.D ||
      d.v.batch != d.S * d.Dv || d.v.row != d.Dv)
    missing(family, device, "strided q, k or v");
  if (!mask.defined()) return 1;
  if (d.mask.batch == 0) return d.L;
  if (d.mask.batch == d.L * d.S) return d.B * d.L;
  missing(family, device, fmt::format("a mask batch stride of {}", d.mask.batch));
}

// C (batch of m x n) = op(A) op(B) + beta C, float32, dense row-major operands.
void batched_gemm(int index, cudaStream_t stream, std::int64_t batch, std::int64_t m,
                  std::int64_t n, std::int64_t k, const float* a, bool trans_a, const float* b,
                  bool trans_b, float* c, float beta) {
  GemmArgs g;
  g.precision = GemmPrecision::FP32;
  g.batch = batch;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = a;
  g.b = b;
  g.c = c;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.stride_a = m * k;
  g.stride_b = k * n;
  g.stride_c = m * n;
  g.beta = beta;
  gemm_for(index).run(g, stream);
}

// Causal self-attention without a mask (GPT's, scaled_dot_product_attention's is_causal), the
// scores never held: float32, bf16 or fp16, one kv head per query head, any strides. bf16 and
// fp16 at head dim 64, 96 or 128 with 16-byte aligned rows take the flash tiles
// (flash_attention.h), which read and write every operand in place (q, k, v views of a packed
// projection; o, dq, dk, dv views of merged buffers); the rest take attention.cu's one-warp-per-row
// kernels when q, k and v are dense, else the general kernels' strided reads (outputs through dense
// stand-ins). Grouped-query heads (H a multiple of KV) only for the flash tiles; the one-warp
// kernels take H == KV.
bool fused_causal(const Tensor& q, const Tensor& mask, const AttentionDims& d) {
  return d.causal && !mask.defined() && is_float_or_16bit(q.dtype()) && d.L == d.S && d.D == d.Dv &&
         d.D >= 1 && d.D <= kMaxAttentionHeadDim && d.KV >= 1 && d.H % d.KV == 0;
}

// q, k and v as the one-warp kernels read them: dense (batch * heads, t, hd).
bool dense_qkv(const Tensor& q, const Tensor& k, const Tensor& v) {
  return q.is_contiguous() && k.is_contiguous() && v.is_contiguous();
}

// The table's strides as the kernels take them.
AttentionOperandStrides operand_strides(const AttentionStrides& s) {
  return {.batch = s.batch, .head = s.head, .row = s.row};
}

// The flash tiles' geometry over the tensors' own strides, if the tiles apply to them (16 bits,
// head dim 64, 96 or 128, rows contiguous and 16-byte aligned): q, k, v, out, then for the backward
// dout, dq, dk, dv (FlashGeometry's operands in order).
std::optional<FlashGeometry> flash_geometry(const AttentionDims& d,
                                            std::initializer_list<const Tensor*> tensors) {
  static constexpr AttentionOperandStrides FlashGeometry::*kOperands[] = {
      &FlashGeometry::q,    &FlashGeometry::k,  &FlashGeometry::v,  &FlashGeometry::o,
      &FlashGeometry::dout, &FlashGeometry::dq, &FlashGeometry::dk, &FlashGeometry::dv};
  const DType dt = tensors.begin()[0]->dtype();
  if (dt != DType::BFloat16 && dt != DType::Float16) return std::nullopt;
  FlashGeometry g{.B = d.B,
                  .H = d.H,
                  .group = d.H / d.KV,
                  .t = d.L,
                  .hd = d.D,
                  .scale = static_cast<float>(d.scale)};
  std::array<const void*, 8> p{};
  std::size_t i = 0;
  for (const Tensor* t : tensors) {
    if (t->stride(t->dim() - 1) != 1) return std::nullopt;
    g.*kOperands[i] = operand_strides(attention_strides(*t));
    p[i++] = t->data_ptr();
  }
  if (!flash_attention_applies(g, {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]}))
    return std::nullopt;
  return g;
}

// Where a kernel that writes densely writes `t`: t itself when contiguous, else a fresh tensor
// that write_back copies into t after.
Tensor dense_output(const Tensor& t) {
  return t.is_contiguous() ? t : new_tensor(t.shape(), t.dtype(), t.device());
}

// `target` gets what a kernel wrote to its stand-in `written` (dense_output's), if that is
// another tensor.
void write_back(const char* family, const Tensor& target, const Tensor& written) {
  if (!written.is_same(target)) copy_on_device(family, target, written);
}

// scaled_dot_product_attention's other forms (the Hugging Face models': grouped-query heads, a
// scale, the causal flag, strided q/k/v, an additive float32 mask): sdpa_attention.cu, float32
// or 16-bit, head dims up to 128, the scores never held.
bool general_attention(const Tensor& q, const Tensor& mask, const AttentionDims& d) {
  return is_float_or_16bit(q.dtype()) && d.D >= 1 && d.D <= kMaxAttentionHeadDim && d.Dv >= 1 &&
         d.Dv <= kMaxAttentionHeadDim && d.KV >= 1 && d.H % d.KV == 0 &&
         (!mask.defined() || mask.dtype() == DType::Float32);
}

AttentionGeometry attention_geometry(const AttentionDims& d) {
  return AttentionGeometry{.B = d.B,
                           .H = d.H,
                           .KV = d.KV,
                           .L = d.L,
                           .S = d.S,
                           .D = d.D,
                           .Dv = d.Dv,
                           .scale = static_cast<float>(d.scale),
                           .causal = d.causal,
                           .masked_rows_zero = d.masked_rows_zero,
                           .q = operand_strides(d.q),
                           .k = operand_strides(d.k),
                           .v = operand_strides(d.v),
                           .mask = operand_strides(d.mask)};
}

void general_attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q,
                               const Tensor& k, const Tensor& v, const Tensor& mask,
                               const AttentionDims& d) {
  if (d.B * d.H * d.L == 0) return;
  Launch l(stream_device(out.device()));
  float_or_16bit(q.dtype(), [&]<typename T>() {
    sdpa_forward<T>(ptr<const T>(q), ptr<const T>(k), ptr<const T>(v),
                    mask.defined() ? ptr<const float>(mask) : nullptr, ptr<T>(out), ptr<float>(lse),
                    attention_geometry(d), l.stream);
  });
}

// dk, dv are float in the kernel: 16-bit ones come through float buffers, rounded once.
void general_attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& mask, const Tensor& out, const Tensor& lse,
                                const Tensor& dout, const AttentionDims& d) {
  if (dk.numel() + dq.numel() == 0) return;
  const Device device = stream_device(dq.device());
  Launch l(device);
  float_or_16bit(q.dtype(), [&]<typename T>() {
    constexpr bool kFloat = std::is_same_v<T, float>;
    const Tensor dk32 = kFloat ? dk : new_tensor(dk.shape(), DType::Float32, device);
    const Tensor dv32 = kFloat ? dv : new_tensor(dv.shape(), DType::Float32, device);
    sdpa_backward<T>(ptr<const T>(q), ptr<const T>(k), ptr<const T>(v),
                     mask.defined() ? ptr<const float>(mask) : nullptr, ptr<const T>(out),
                     ptr<const T>(dout), ptr<const float>(lse), ptr<T>(dq), ptr<float>(dk32),
                     ptr<float>(dv32), attention_geometry(d), l.stream);
    if constexpr (!kFloat) {
      cast(ptr<const float>(dk32), ptr<T>(dk), dk.numel(), l.stream);
      cast(ptr<const float>(dv32), ptr<T>(dv), dv.numel(), l.stream);
    }
  });
}

void blocked_attention(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                       const Tensor& v, const Tensor& mask, const AttentionDims& d) {
  const Device device = stream_device(out.device());
  if (fused_causal(q, mask, d)) {
    if (d.B * d.H * d.L == 0) return;
    if (const auto g = flash_geometry(d, {&q, &k, &v, &out})) {
      Launch l(device);
      float_or_16bit(q.dtype(), [&]<typename T>() {
        if constexpr (!std::is_same_v<T, float>)
          flash_attention_forward<T>(ptr<const T>(q), ptr<const T>(k), ptr<const T>(v), ptr<T>(out),
                                     ptr<float>(lse), *g, l.stream);
      });
      return;
    }
  }
  if (!out.is_contiguous()) {  // the kernels below write out densely
    const Tensor oc = dense_output(out);
    blocked_attention(oc, lse, q, k, v, mask, d);
    return write_back("blocked_attention", out, oc);
  }
  if (fused_causal(q, mask, d) && d.H == d.KV && dense_qkv(q, k, v)) {
    Launch l(device);
    float_or_16bit(q.dtype(), [&]<typename T>() {
      attention_forward<T>(ptr<const T>(q), ptr<const T>(k), ptr<const T>(v), ptr<T>(out),
                           ptr<float>(lse), d.B * d.H, d.L, d.D, static_cast<float>(d.scale),
                           l.stream);
    });
    return;
  }
  if (general_attention(q, mask, d)) return general_attention_forward(out, lse, q, k, v, mask, d);
  if (q.dtype() != DType::Float32 || d.D == 0) missing("blocked_attention", device, layout_of(q));
  const std::int64_t mask_rows = attention_mask_rows("blocked_attention", q, mask, d);
  if (d.B * d.L == 0) return;
  if (d.S == 0) missing("blocked_attention", device, "no keys");
  Launch l(device);
  const Tensor scores = new_tensor({d.B, d.L, d.S}, DType::Float32, device);
  const Tensor p = new_tensor({d.B, d.L, d.S}, DType::Float32, device);
  batched_gemm(l.index, l.stream, d.B, d.L, d.S, d.D, ptr<const float>(q), false,
               ptr<const float>(k), true, ptr<float>(scores), 0.0f);
  softmax_rows<float>(ptr<const float>(scores), mask.defined() ? ptr<const float>(mask) : nullptr,
                      ptr<float>(p), d.B * d.L, d.S, 1, mask_rows, false, l.stream,
                      ptr<float>(lse));
  batched_gemm(l.index, l.stream, d.B, d.L, d.Dv, d.S, ptr<const float>(p), false,
               ptr<const float>(v), false, ptr<float>(out), 0.0f);
}

void blocked_attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& mask, const Tensor& out, const Tensor& lse,
                                const Tensor& dout, const AttentionDims& d) {
  (void)out;  // dS comes from P and dP (softmax's backward), not from O
  (void)lse;  // P is recomputed by the forward's softmax
  const Device device = stream_device(dq.device());
  if (fused_causal(q, mask, d)) {
    if (d.B * d.H * d.L == 0) return;
    // The flash tiles write dq, dk and dv once each, in T, wherever they are.
    if (const auto g = flash_geometry(d, {&q, &k, &v, &out, &dout, &dq, &dk, &dv})) {
      Launch l(device);
      float_or_16bit(q.dtype(), [&]<typename T>() {
        if constexpr (!std::is_same_v<T, float>)
          flash_attention_backward<T>(ptr<const T>(q), ptr<const T>(k), ptr<const T>(v),
                                      ptr<const T>(out), ptr<const T>(dout), ptr<const float>(lse),
                                      ptr<T>(dq), ptr<T>(dk), ptr<T>(dv), *g, l.stream);
      });
      return;
    }
  }
  if (!dq.is_contiguous() || !dk.is_contiguous() || !dv.is_contiguous() || !out.is_contiguous() ||
      !dout.is_contiguous()) {  // the kernels below read and write these densely
    const char* family = "blocked_attention_backward";
    const Tensor dqc = dense_output(dq), dkc = dense_output(dk), dvc = dense_output(dv);
    blocked_attention_backward(dqc, dkc, dvc, q, k, v, mask, contiguous_on_device(family, out), lse,
                               contiguous_on_device(family, dout), d);
    write_back(family, dq, dqc);
    write_back(family, dk, dkc);
    return write_back(family, dv, dvc);
  }
  if (fused_causal(q, mask, d) && d.H == d.KV && dense_qkv(q, k, v)) {
    // The one-warp kernels gather dk and dv with float atomics: 16-bit ones through float
    // buffers, rounded once.
    const bool wide = q.dtype() == DType::Float32;
    const Tensor dk32 = wide ? dk : new_tensor(dk.shape(), DType::Float32, device);
    const Tensor dv32 = wide ? dv : new_tensor(dv.shape(), DType::Float32, device);
    Launch l(device);
    float_or_16bit(q.dtype(), [&]<typename T>() {
      attention_backward<T>(ptr<const T>(q), ptr<const T>(k), ptr<const T>(v), ptr<const T>(out),
                            ptr<const T>(dout), ptr<const float>(lse), ptr<T>(dq), ptr<float>(dk32),
                            ptr<float>(dv32), d.B * d.H, d.L, d.D, static_cast<float>(d.scale),
                            l.stream);
    });
    write_back("blocked_attention_backward", dk, dk32);
    write_back("blocked_attention_backward", dv, dv32);
    return;
  }
  if (general_attention(q, mask, d))
    return general_attention_backward(dq, dk, dv, q, k, v, mask, out, lse, dout, d);
  if (q.dtype() != DType::Float32 || d.D == 0)
    missing("blocked_attention_backward", device, layout_of(q));
  const std::int64_t mask_rows = attention_mask_rows("blocked_attention_backward", q, mask, d);
  if (d.B * d.L * d.S == 0) {  // no scores: no gradient
    for (const Tensor* t : {&dq, &dk, &dv}) fill(*t, 0.0);
    return;
  }
  Launch l(device);
  const Tensor p = new_tensor({d.B, d.L, d.S}, DType::Float32, device);
  const Tensor dp = new_tensor({d.B, d.L, d.S}, DType::Float32, device);
  batched_gemm(l.index, l.stream, d.B, d.L, d.S, d.D, ptr<const float>(q), false,
               ptr<const float>(k), true, ptr<float>(dp), 0.0f);  // the scores, in dp for now
  softmax_rows<float>(ptr<const float>(dp), mask.defined() ? ptr<const float>(mask) : nullptr,
                      ptr<float>(p), d.B * d.L, d.S, 1, mask_rows, false, l.stream);
  // dV = P^T dO; dP = dO V^T; dS = P (dP - sum(dP P)); dQ = dS K; dK = dS^T Q.
  batched_gemm(l.index, l.stream, d.B, d.S, d.Dv, d.L, ptr<const float>(p), true,
               ptr<const float>(dout), false, ptr<float>(dv), 0.0f);
  batched_gemm(l.index, l.stream, d.B, d.L, d.S, d.Dv, ptr<const float>(dout), false,
               ptr<const float>(v), true, ptr<float>(dp), 0.0f);
  softmax_rows_backward<float>(ptr<const float>(p), ptr<const float>(dp), ptr<float>(dp), d.B * d.L,
                               d.S, 1, false, l.stream);
  batched_gemm(l.index, l.stream, d.B, d.L, d.D, d.S, ptr<const float>(dp), false,
               ptr<const float>(k), false, ptr<float>(dq), 0.0f);
  batched_gemm(l.index, l.stream, d.B, d.S, d.D, d.L, ptr<const float>(dp), true,
               ptr<const float>(q), false, ptr<float>(dk), 0.0f);
}

// --- optimizers over contiguous float32 parameters (FSDP's flat shards)

void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                 const Tensor& exp_avg_sq, const Tensor& max_exp_avg_sq,
                 const optim::AdamScalars& s) {
  const Device device = stream_device(param.device());
  if (param.dtype() != DType::Float32) missing("adam_update", device, layout_of(param));
  // The kernel is AdamW's; Adam without weight decay is the same update.
  if (max_exp_avg_sq.defined() || s.maximize || (!s.decoupled && s.weight_decay != 0.0))
    missing("adam_update", device,
            max_exp_avg_sq.defined() ? "amsgrad"
            : s.maximize             ? "maximize"
                                     : "Adam's coupled weight decay");
  if (param.numel() == 0) return;
  Launch l(device);
  const AdamWArgs args{.lr = s.lr,
                       .beta1 = s.beta1,
                       .beta2 = s.beta2,
                       .eps = s.eps,
                       .weight_decay = s.weight_decay,
                       .step = s.step};
  adamw_step(ptr<float>(param), ptr<const float>(grad), ptr<float>(exp_avg), ptr<float>(exp_avg_sq),
             param.numel(), args, l.stream);
}

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                const optim::SgdScalars& s) {
  const Device device = stream_device(param.device());
  if (param.dtype() != DType::Float32) missing("sgd_update", device, layout_of(param));
  if (s.maximize) missing("sgd_update", device, "maximize");
  if (param.numel() == 0) return;
  Launch l(device);
  const SgdArgs args{.lr = float(s.lr),
                     .momentum = float(s.momentum),
                     .dampening = float(s.dampening),
                     .weight_decay = float(s.weight_decay),
                     .nesterov = s.nesterov,
                     .first_step = s.first_step};
  sgd_step(ptr<float>(param), ptr<const float>(grad),
           momentum_buffer.defined() ? ptr<float>(momentum_buffer) : nullptr, param.numel(), args,
           l.stream);
}

KernelTable make_launching_table() {
  KernelTable t{};
#define FSDP_CUDA_MISSING(name) \
  t.name = &Missing<decltype(&KernelTable::name)>::run<&KernelTable::name>;
  FSDP_KERNEL_FAMILIES(FSDP_CUDA_MISSING)
#undef FSDP_CUDA_MISSING
  // The families with a CUDA kernel (README.md's list).
  t.binary = &binary;
  t.unary = &unary;
  t.sum = &sum;
  t.linear_backward16 = &linear_backward16;
  // cuBLASLt products with float32 accumulation and sum_over_rows: no size limit.
  t.linear_backward16_max_weight = std::numeric_limits<std::int64_t>::max();
  t.blocked_attention = &blocked_attention;
  t.blocked_attention_backward = &blocked_attention_backward;
  t.split_heads = &split_heads;
  t.merge_heads = &merge_heads;
  t.cross_entropy = &cross_entropy;
  t.cross_entropy_backward = &cross_entropy_backward;
  t.nll_loss = &nll_loss;
  t.nll_loss_backward = &nll_loss_backward;
  t.sum_in_order = &sum_in_order;
  t.mse_loss = &mse_loss;
  t.mse_loss_backward = &mse_loss_backward;
  t.norm_partial = &norm_partial;
  t.clamp_ = &clamp_;
  t.softmax = &softmax;
  t.softmax_backward = &softmax_backward;
  t.masked_softmax = &masked_softmax;
  t.layer_norm = &layer_norm;
  t.layer_norm_backward = &layer_norm_backward;
  t.rms_norm = &rms_norm;
  t.max_dim = &max_dim;
  t.max_dim_backward = &max_dim_backward;
  t.rms_norm_backward = &rms_norm_backward;
  t.rotary = &rotary;
  t.masked_scale = &masked_scale;
  t.index_select = &index_select;
  t.index_add = &index_add;
  t.compare = &compare;
  t.eq_scalar = &eq_scalar;
  t.logical_not = &logical_not;
  t.where = &where;
  t.masked_fill = &masked_fill;
  t.amax = &amax;
  t.copy = &copy;
  t.copy_broadcast = &copy_broadcast;
  t.fill = &fill;
  t.store_values = &store_values;
  t.random = &random;
  t.bmm = &bmm;
  t.linear = &linear;
  t.activation = &activation;
  t.activation_backward = &activation_backward;
  t.adam_update = &adam_update;
  t.sgd_update = &sgd_update;
  return t;
}

}  // namespace

const KernelTable& launching_kernel_table() {
  static const KernelTable table = make_launching_table();
  return table;
}

}  // namespace fsdp::cuda
