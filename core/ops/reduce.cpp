// Reductions: sum, mean, max (all / along a dim with indices), amax, argmax, sum_to.
#include <cmath>
#include <limits>
#include <memory>

#include "core/dispatch/intercept.h"
#include "core/ops/elementwise_kernels.h"

namespace fsdp {
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

std::int64_t reduced_count(const Shape& shape, const std::vector<bool>& mask) {
  std::int64_t n = 1;
  for (std::size_t i = 0; i < shape.size(); ++i)
    if (mask[i]) n *= shape[i];
  return n;
}

// Writes the sum (or mean) over the dims in mask into out (keepdim or not, contiguous).
void sum_kernel(const Tensor& a, const std::vector<bool>& mask, const Tensor& out, bool mean,
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

// Sum (or mean) of `a` over the dims in `mask`.
Tensor sum_impl(const char* op, const Tensor& a, const std::vector<bool>& mask, bool keepdim,
                bool mean) {
  bool meta = check_devices(op, a);
  DType out_dtype = is_floating(a.dtype()) ? a.dtype() : DType::Int64;
  FSDP_CHECK(!mean || is_floating(a.dtype()), RuntimeError,
             "mean(): could not infer output dtype. Input dtype must be either a floating point "
             "or complex dtype. Got: {} (shape {})",
             dtype_name(a.dtype()), shape_str(a.shape()));
  Tensor out = new_tensor(reduced_shape(a.shape(), mask, keepdim), out_dtype, meta);
  const std::int64_t count = reduced_count(a.shape(), mask);
  if (!meta) sum_kernel(a, mask, out, mean, count);
  // Backward: broadcast the gradient back over the reduced dims (materialised, so a leaf
  // never receives a stride-0 gradient).
  autograd::record(mean ? "MeanBackward1" : "SumBackward1", {a}, {out}, {},
                   [s = a.shape(), mask, keepdim, mean, count](
                       const variable_list&, const variable_list& g) -> variable_list {
                     Tensor gk = keepdim ? g[0] : reshape(g[0], reduced_shape(s, mask, true));
                     if (mean) gk = div(gk, static_cast<double>(count));
                     return {contiguous(expand(gk, s))};
                   });
  return out;
}

template <typename C>
inline bool greater_or_nan(C x, C best) {
  if constexpr (std::is_floating_point_v<C>) {
    if (best != best) return false;
    if (x != x) return true;
  }
  return x > best;
}

// amax over the dims in mask (NaN propagates).
Tensor amax_impl(const char* op, const Tensor& a, const std::vector<bool>& mask, bool keepdim) {
  bool meta = check_devices(op, a);
  for (std::size_t i = 0; i < mask.size(); ++i)
    FSDP_CHECK(!mask[i] || a.shape()[i] > 0, IndexError,
               "{}(): Expected reduction dim {} to have non-zero size (tensor shape {})", op, i,
               shape_str(a.shape()));
  FSDP_CHECK(a.numel() > 0 || !mask.empty(), RuntimeError,
             "{}(): Expected reduction dim to be specified for input.numel() == 0.", op);
  Tensor out = new_tensor(reduced_shape(a.shape(), mask, keepdim), a.dtype(), meta);
  if (meta || a.numel() == 0) return out;
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
  return out;
}

// Gradient of an extremum that splits evenly between tied maxima.
Tensor evenly_distribute(const Tensor& input, const Tensor& out_keep, const Tensor& g_keep,
                         const std::vector<bool>& mask) {
  Tensor hit = eq(input, out_keep);
  std::vector<std::int64_t> dims;
  for (std::size_t i = 0; i < mask.size(); ++i)
    if (mask[i]) dims.push_back(static_cast<std::int64_t>(i));
  Tensor count = dims.empty() ? to_dtype(hit, DType::Int64) : sum(hit, dims, true);
  Tensor share = div(g_keep, count);
  return where(hit, share, zeros({}, TensorOptions(share.dtype(), share.device())));
}

}  // namespace

Tensor sum(const Tensor& a, const std::vector<std::int64_t>& dims, bool keepdim) {
  FSDP_DISPATCH("sum", sum, a, dims, keepdim);
  return sum_impl("sum", a, reduction_mask(dims, a.dim(), "sum"), keepdim, false);
}

Tensor mean(const Tensor& a, const std::vector<std::int64_t>& dims, bool keepdim) {
  FSDP_DISPATCH("mean", mean, a, dims, keepdim);
  return sum_impl("mean", a, reduction_mask(dims, a.dim(), "mean"), keepdim, true);
}

Tensor amax(const Tensor& a, const std::vector<std::int64_t>& dims, bool keepdim) {
  FSDP_DISPATCH("amax", amax, a, dims, keepdim);
  auto mask = reduction_mask(dims, a.dim(), "amax");
  Tensor out = amax_impl("amax", a, mask, keepdim);
  autograd::record(
      "AmaxBackward0", {a}, {out}, {a, out},
      [mask, keepdim](const variable_list& s, const variable_list& g) -> variable_list {
        Shape keep = reduced_shape(s[0].shape(), mask, true);
        Tensor ok = keepdim ? s[1] : reshape(s[1], keep);
        Tensor gk = keepdim ? g[0] : reshape(g[0], keep);
        return {evenly_distribute(s[0], ok, gk, mask)};
      });
  return out;
}

Tensor max(const Tensor& a) {
  FSDP_DISPATCH("max", max, a);
  FSDP_CHECK(a.numel() > 0 || a.is_meta(), RuntimeError,
             "max(): Expected reduction dim to be specified for input.numel() == 0. Specify the "
             "reduction dim with the 'dim' argument.");
  auto mask = reduction_mask({}, a.dim(), "max");
  Tensor out = amax_impl("max", a, mask, false);
  autograd::record(
      "MaxBackward1", {a}, {out}, {a, out},
      [mask](const variable_list& s, const variable_list& g) -> variable_list {
        Shape keep(s[0].shape().size(), 1);
        return {evenly_distribute(s[0], reshape(s[1], keep), reshape(g[0], keep), mask)};
      });
  return out;
}

std::pair<Tensor, Tensor> max(const Tensor& a, std::int64_t dim, bool keepdim) {
  FSDP_DISPATCH("max.dim", max, a, dim, keepdim);
  bool meta = check_devices("max", a);
  auto d = static_cast<std::size_t>(wrap_dim(dim, a.dim(), "max"));
  std::vector<bool> mask(static_cast<std::size_t>(a.dim()), false);
  if (a.dim() > 0) mask[d] = true;
  FSDP_CHECK(a.dim() == 0 || a.shape()[d] > 0, IndexError,
             "max(): Expected reduction dim {} to have non-zero size (tensor shape {})", d,
             shape_str(a.shape()));
  Shape out_shape = reduced_shape(a.shape(), mask, keepdim);
  Tensor values = new_tensor(out_shape, a.dtype(), meta);
  Tensor indices = new_tensor(out_shape, DType::Int64, meta);
  if (!meta && a.numel() > 0) {
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
  autograd::record(
      "MaxBackward0", {a}, {values}, {indices},
      [s = a.shape(), d, keepdim](const variable_list& sv,
                                  const variable_list& g) -> variable_list {
        // Scatter each gradient to the position of its maximum.
        Tensor gk = keepdim || s.empty() ? g[0] : unsqueeze(g[0], static_cast<std::int64_t>(d));
        Tensor ik = keepdim || s.empty() ? sv[0] : unsqueeze(sv[0], static_cast<std::int64_t>(d));
        Tensor grad = zeros(s, TensorOptions(g[0].dtype(), g[0].device()));
        if (grad.is_meta() || grad.numel() == 0) return {grad};
        Shape keep = gk.shape();
        const std::int64_t step = s.empty() ? 0 : grad.strides()[d];
        dispatch_all(grad.dtype(), [&]<typename T>() {
          T* pg = grad.data<T>();
          const T* pgk = gk.data<T>();
          const std::int64_t* pik = ik.data<std::int64_t>();
          Shape gstr = grad.strides();
          if (!s.empty()) gstr[d] = 0;
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
        return {grad};
      });
  return {values, indices};
}

Tensor argmax(const Tensor& a, std::int64_t dim, bool keepdim) {
  FSDP_DISPATCH("argmax", argmax, a, dim, keepdim);
  autograd::NoGradGuard ng;
  return max(a, dim, keepdim).second;
}

Tensor sum_to(const Tensor& a, const Shape& shape) {
  FSDP_DISPATCH("sum_to", sum_to, a, shape);
  if (a.shape() == shape) return a;
  const Shape& as = a.shape();
  FSDP_CHECK(shape.size() <= as.size(), RuntimeError,
             "sum_to: shape {} is not expandable to size {}", shape_str(shape), shape_str(as));
  const std::size_t lead = as.size() - shape.size();
  std::vector<bool> mask(as.size(), false);
  bool any = false;
  for (std::size_t i = 0; i < as.size(); ++i) {
    if (i < lead) {
      mask[i] = true;
    } else {
      std::int64_t want = shape[i - lead];
      FSDP_CHECK(want == as[i] || want == 1, RuntimeError,
                 "sum_to: shape {} is not expandable to size {}", shape_str(shape), shape_str(as));
      mask[i] = want == 1 && as[i] != 1;
    }
    any = any || mask[i];
  }
  Tensor r = any ? sum_impl("sum_to", a, mask, true, false) : a;
  return reshape(r, shape);
}

}  // namespace fsdp
