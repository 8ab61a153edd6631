// The CPU reduction kernels: sum/mean, amax, max along a dim and its backward's scatter.
// Moved from core/ops/reduce.cpp.
#include <limits>
#include <memory>

#include "core/kernels/cpu/cpu_kernels.h"
#include "core/ops/op_utils.h"

namespace fsdp::cpu {
using namespace ops_detail;

namespace {

// Accumulator type: double for floating inputs (float32 sums accumulate beyond float32
// precision), int64 for integers and bools.
template <typename T>
using acc_t = std::conditional_t<std::is_floating_point_v<compute_t<T>>, double, std::int64_t>;

// Strides of an output laid out in keepdim shape, read at input positions (0 on reduced dims).
Shape output_strides_for_input(const Shape& in_shape, const std::vector<bool>& mask) {
  Shape keep = reduced_shape(in_shape, mask, true);
  Shape st = contiguous_strides(keep);
  for (std::size_t i = 0; i < mask.size(); ++i)
    if (mask[i]) st[i] = 0;
  return st;
}

template <typename C>
inline bool greater_or_nan(C x, C best) {
  if constexpr (std::is_floating_point_v<C>) {
    if (best != best) return false;
    if (x != x) return true;
  }
  return x > best;
}

}  // namespace

// Writes the sum (or mean) over the dims in mask into out (keepdim or not, contiguous).
void sum(const Tensor& out, const Tensor& a, const std::vector<bool>& mask, bool mean,
         std::int64_t count) {
  const DType out_dtype = out.dtype();
  const Shape so = output_strides_for_input(a.shape(), mask);
  const Shape& sa = a.strides();
  dispatch_all(a.dtype(), [&]<typename T>() {
    using A = acc_t<T>;
    std::vector<A> acc(static_cast<std::size_t>(out.numel()), A(0));
    const T* pa = a.data<T>();
    A* pacc = acc.data();
    for_each_run<2>(a.shape(), {&sa, &so}, [&](const auto& off, std::int64_t n, const auto& in) {
      const T* ap = pa + off[0];
      if (in[1] == 0) {
        A s = 0;
        if (in[0] == 1) {
          // Independent partial sums break the add-latency chain and let the compiler use SIMD.
          A part[8] = {};
          std::int64_t i = 0;
          for (; i + 8 <= n; i += 8)
            for (int j = 0; j < 8; ++j) part[j] += static_cast<A>(load(ap[i + j]));
          for (; i < n; ++i) s += static_cast<A>(load(ap[i]));
          s += ((part[0] + part[1]) + (part[2] + part[3])) +
               ((part[4] + part[5]) + (part[6] + part[7]));
        } else {
          for (std::int64_t i = 0; i < n; ++i) s += static_cast<A>(load(ap[i * in[0]]));
        }
        pacc[off[1]] += s;
      } else {
        A* op = pacc + off[1];
        for (std::int64_t i = 0; i < n; ++i) op[i * in[1]] += static_cast<A>(load(ap[i * in[0]]));
      }
    });
    dispatch_all(out_dtype, [&]<typename O>() {
      O* o = out.data<O>();
      for (std::size_t i = 0; i < acc.size(); ++i) {
        if (mean)
          o[i] = from_double<O>(static_cast<double>(acc[i]) / static_cast<double>(count));
        else
          o[i] = from_double<O>(static_cast<double>(acc[i]));
      }
    });
  });
}

// amax over the dims in mask (NaN propagates).
void amax(const Tensor& out, const Tensor& a, const std::vector<bool>& mask) {
  const Shape so = output_strides_for_input(a.shape(), mask);
  const Shape& sa = a.strides();
  dispatch_all(a.dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    // Not std::vector: vector<bool> has no element references.
    const auto nout = static_cast<std::size_t>(out.numel());
    std::unique_ptr<C[]> best(new C[nout]);
    C init = std::numeric_limits<C>::lowest();
    if constexpr (std::is_floating_point_v<C>) init = -std::numeric_limits<C>::infinity();
    std::fill(best.get(), best.get() + nout, init);
    const T* pa = a.data<T>();
    for_each_run<2>(a.shape(), {&sa, &so}, [&](const auto& off, std::int64_t n, const auto& in) {
      for (std::int64_t i = 0; i < n; ++i) {
        C x = load(pa[off[0] + i * in[0]]);
        C& b = best[static_cast<std::size_t>(off[1] + i * in[1])];
        if (greater_or_nan(x, b)) b = x;
      }
    });
    T* o = out.data<T>();
    for (std::size_t i = 0; i < nout; ++i) o[i] = store<T>(best[i]);
  });
}

void max_dim(const Tensor& values, const Tensor& indices, const Tensor& a, std::int64_t dim) {
  const auto d = static_cast<std::size_t>(dim);
  std::vector<bool> mask(static_cast<std::size_t>(a.dim()), false);
  if (a.dim() > 0) mask[d] = true;
  Shape keep = reduced_shape(a.shape(), mask, true);
  const Shape ko = contiguous_strides(keep);
  const Shape& sa = a.strides();
  const std::int64_t len = a.dim() > 0 ? a.shape()[d] : 1;
  const std::int64_t step = a.dim() > 0 ? sa[d] : 0;
  dispatch_all(a.dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    const T* pa = a.data<T>();
    T* pv = values.data<T>();
    std::int64_t* pi = indices.data<std::int64_t>();
    for_each_offset2(keep, sa, ko, [&](std::int64_t ia, std::int64_t io) {
      C best = load(pa[ia]);
      std::int64_t at = 0;
      for (std::int64_t k = 1; k < len; ++k) {
        C x = load(pa[ia + k * step]);
        if (greater_or_nan(x, best)) {
          best = x;
          at = k;
        }
      }
      pv[io] = store<T>(best);
      pi[io] = at;
    });
  });
}

// Scatters each gradient to the position of its maximum.
void max_dim_backward(const Tensor& grad, const Tensor& gk, const Tensor& ik, std::int64_t dim) {
  const auto d = static_cast<std::size_t>(dim);
  const bool scalar = grad.dim() == 0;
  Shape keep = gk.shape();
  const std::int64_t step = scalar ? 0 : grad.strides()[d];
  dispatch_all(grad.dtype(), [&]<typename T>() {
    T* pg = grad.data<T>();
    const T* pgk = gk.data<T>();
    const std::int64_t* pik = ik.data<std::int64_t>();
    Shape gstr = grad.strides();
    if (!scalar) gstr[d] = 0;
    // Walk the gradient (reduced dim pinned at 0), gk and ik together.
    Shape sizes = keep;
    Shape ikc = ik.strides();
    std::array<const Shape*, 3> st{&gstr, &gk.strides(), &ikc};
    for_each_run<3>(sizes, st, [&](const auto& off, std::int64_t n, const auto& in) {
      for (std::int64_t i = 0; i < n; ++i) {
        std::int64_t at = pik[off[2] + i * in[2]];
        pg[off[0] + i * in[0] + at * step] = pgk[off[1] + i * in[1]];
      }
    });
  });
}

}  // namespace fsdp::cpu
