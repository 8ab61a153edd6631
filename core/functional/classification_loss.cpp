// Classification losses with class-index targets: cross_entropy (fused log-softmax + nll, with
// label smoothing) and nll_loss. Inputs are (N, C), (N, C, d1, ...) or (C); targets (N),
// (N, d1, ...) or a 0-d tensor. The input is read as (N, C, S): position (n, s) has its C class
// scores S elements apart. Targets equal to ignore_index contribute nothing, and "mean" divides
// by the number of targets that are not ignored, as torch does (0 / 0 = nan when all are).
#include <cmath>
#include <limits>
#include <vector>

#include "core/dispatch/intercept.h"
#include "core/functional/functional_common.h"
#include "core/functional/vec_math.h"
#include "core/ops.h"

namespace fsdp {
namespace {

enum class Reduction { None, Mean, Sum };

Reduction parse_reduction(const std::string& r, const char* op) {
  if (r == "mean") return Reduction::Mean;
  if (r == "sum") return Reduction::Sum;
  FSDP_CHECK(r == "none", ValueError,
             "{}: '{}' is not a valid value for reduction (expected 'mean', 'sum' or 'none')", op,
             r);
  return Reduction::None;
}

struct LossLayout {
  std::int64_t n = 1, c = 0, s = 1;
  Shape out_shape;  // shape of the unreduced loss (= target's shape)
};

// Checks input/target shapes and dtypes as torch's nll_loss does.
LossLayout loss_layout(const Tensor& input, const Tensor& target, const char* op) {
  functional::check_floating(input, op, "input");
  FSDP_CHECK(target.dtype() == DType::Int64, RuntimeError,
             "{}: expected a target of class indices of dtype int64, but got {} (shape {})", op,
             dtype_name(target.dtype()), shape_str(target.shape()));
  const Shape& in = input.shape();
  const Shape& tg = target.shape();
  LossLayout l;
  FSDP_CHECK(!in.empty(), ValueError,
             "{}: expected an input of 1 or more dimensions, got a 0-d "
             "tensor",
             op);
  if (in.size() == 1) {
    FSDP_CHECK(tg.empty(), RuntimeError,
               "{}: for an input of shape {} (C), expected a 0-d target, got shape {}", op,
               shape_str(in), shape_str(tg));
    l.c = in[0];
    return l;
  }
  FSDP_CHECK(!tg.empty() && in[0] == tg[0], ValueError,
             "{}: expected input batch_size ({}) to match target batch_size ({}) (input shape {}, "
             "target shape {})",
             op, in[0], tg.empty() ? 0 : tg[0], shape_str(in), shape_str(tg));
  Shape expected{in[0]};
  for (std::size_t i = 2; i < in.size(); ++i) expected.push_back(in[i]);
  FSDP_CHECK(tg == expected, RuntimeError, "{}: expected target size {}, got {} (input shape {})",
             op, shape_str(expected), shape_str(tg), shape_str(in));
  l.n = in[0];
  l.c = in[1];
  for (std::size_t i = 2; i < in.size(); ++i) l.s *= in[i];
  l.out_shape = tg;
  return l;
}

// Target class of every position, checked against the class count (ignore_index passes).
std::vector<std::int64_t> checked_targets(const Tensor& target, const LossLayout& l,
                                          std::int64_t ignore_index, const char* op) {
  Tensor t = functional::contiguous_as(target, DType::Int64);
  const std::int64_t* p = t.data<std::int64_t>();
  std::vector<std::int64_t> out(p, p + t.numel());
  for (auto v : out)
    FSDP_CHECK(v == ignore_index || (v >= 0 && v < l.c), IndexError,
               "{}: target {} is out of bounds (expected a class index in [0, {}) or "
               "ignore_index {})",
               op, v, l.c, ignore_index);
  return out;
}

// Per-position losses -> the reduced (or unreduced) result in `dtype`.
Tensor reduce_loss(const std::vector<double>& losses, std::int64_t valid, Reduction r,
                   const Shape& out_shape, DType dtype) {
  if (r == Reduction::None) return from_vector(losses, out_shape, TensorOptions(dtype));
  double total = 0;
  for (double v : losses) total += v;
  if (r == Reduction::Mean) total /= static_cast<double>(valid);
  return scalar_tensor(total, TensorOptions(dtype));
}

// d loss / d (loss of position p): the upstream gradient spread back through the reduction.
std::vector<double> position_grads(const Tensor& grad, std::int64_t positions, std::int64_t valid,
                                   Reduction r) {
  std::vector<double> gp(static_cast<std::size_t>(positions));
  if (r == Reduction::None) {
    auto g = grad.to_vector();
    std::copy(g.begin(), g.end(), gp.begin());
  } else {
    double g = grad.item();
    if (r == Reduction::Mean) g /= static_cast<double>(valid);
    std::fill(gp.begin(), gp.end(), g);
  }
  return gp;
}

// Per position: lse = logsumexp over classes, and sum of the class scores (for smoothing).
template <typename T>
void class_stats(const T* x, const LossLayout& l, double* lse, double* sum_x) {
  const std::int64_t c = l.c, s = l.s;
  std::vector<T> scratch(static_cast<std::size_t>(c));
  T* e = scratch.data();
  for (std::int64_t i = 0; i < l.n; ++i) {
    if (s == 1) {  // the common (N, C) case: a contiguous row per position, vectorised passes
      const T* p = x + i * c;
      T mx = functional::row_max(p, c);
      if (std::isinf(mx) && mx < 0) mx = 0;
      for (std::int64_t k = 0; k < c; ++k) e[k] = functional::fast_exp(p[k] - mx);
      lse[i] = std::log(functional::row_sum<T>(c, [e](std::int64_t k) { return e[k]; })) + mx;
      sum_x[i] = functional::row_sum<T>(c, [p](std::int64_t k) { return p[k]; });
      continue;
    }
    for (std::int64_t j = 0; j < s; ++j) {
      const T* p = x + i * c * s + j;
      double mx = -std::numeric_limits<double>::infinity();
      double sx = 0;
      for (std::int64_t k = 0; k < c; ++k) {
        mx = std::max<double>(mx, p[k * s]);
        sx += p[k * s];
      }
      if (std::isinf(mx) && mx < 0) mx = 0;
      const T m = static_cast<T>(mx);
      double acc = 0;
      for (std::int64_t k = 0; k < c; ++k) acc += functional::fast_exp(p[k * s] - m);
      lse[i * s + j] = std::log(acc) + mx;
      sum_x[i * s + j] = sx;
    }
  }
}

}  // namespace

Tensor cross_entropy(const Tensor& input, const Tensor& target, std::int64_t ignore_index,
                     const std::string& reduction, double label_smoothing) {
  FSDP_DISPATCH("cross_entropy", cross_entropy, input, target, ignore_index, reduction,
                label_smoothing);
  const char* op = "cross_entropy";
  const Reduction red = parse_reduction(reduction, op);
  FSDP_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, RuntimeError,
             "cross_entropy: label_smoothing must be between 0.0 and 1.0, got {}", label_smoothing);
  FSDP_CHECK(!is_floating(target.dtype()), NotImplementedError,
             "cross_entropy: class-probability targets (floating target of shape {}) are not "
             "supported; pass int64 class indices",
             shape_str(target.shape()));
  const LossLayout l = loss_layout(input, target, op);
  const Shape result_shape = red == Reduction::None ? l.out_shape : Shape{};
  if (functional::any_meta({&input, &target}, op))
    return functional::meta_empty(result_shape, input.dtype());

  const DType out_dtype = input.dtype();
  const DType cd = functional::compute_dtype(out_dtype);
  const std::int64_t positions = l.n * l.s;
  std::vector<std::int64_t> tg = checked_targets(target, l, ignore_index, op);
  Tensor x = functional::contiguous_as(input, cd);
  std::vector<double> lse(static_cast<std::size_t>(positions));
  std::vector<double> sum_x(static_cast<std::size_t>(positions));
  std::vector<double> losses(static_cast<std::size_t>(positions), 0.0);
  const double eps = label_smoothing;
  const double cnum = static_cast<double>(l.c);
  std::int64_t valid = 0;
  dispatch_float(cd, op, [&]<typename T>() {
    const T* xp = x.data<T>();
    class_stats<T>(xp, l, lse.data(), sum_x.data());
    for (std::int64_t p = 0; p < positions; ++p) {
      const std::int64_t t = tg[static_cast<std::size_t>(p)];
      if (t == ignore_index) continue;
      ++valid;
      const std::int64_t i = p / l.s, j = p % l.s;
      const double xt = xp[(i * l.c + t) * l.s + j];
      const double lp = lse[static_cast<std::size_t>(p)];
      double loss = (1.0 - eps) * (lp - xt);
      if (eps > 0) loss += eps * (lp - sum_x[static_cast<std::size_t>(p)] / cnum);
      losses[static_cast<std::size_t>(p)] = loss;
    }
  });
  Tensor out = reduce_loss(losses, valid, red, result_shape, out_dtype);
  Tensor lse_t = from_vector(lse, {positions}, TensorOptions(DType::Float64));

  autograd::record("CrossEntropyBackward", {input, target}, {out}, {input, target, lse_t},
                   [l, cd, out_dtype, red, valid, ignore_index, eps, positions](
                       const autograd::variable_list& saved, const autograd::variable_list& grads) {
                     autograd::variable_list result(2);
                     if (!grads[0].defined()) return result;
                     std::vector<std::int64_t> t =
                         checked_targets(saved[1], l, ignore_index, "cross_entropy");
                     std::vector<double> gp = position_grads(grads[0], positions, valid, red);
                     Tensor xs = functional::contiguous_as(saved[0], cd);
                     const double* lse = saved[2].data<double>();
                     Tensor dx = zeros(xs.shape(), TensorOptions(cd));
                     const double smooth = eps / static_cast<double>(l.c);
                     dispatch_float(cd, "cross_entropy", [&]<typename T>() {
                       const T* xp = xs.data<T>();
                       T* dp = dx.data<T>();
                       for (std::int64_t p = 0; p < positions; ++p) {
                         const std::int64_t tp = t[static_cast<std::size_t>(p)];
                         if (tp == ignore_index) continue;
                         const std::int64_t i = p / l.s, j = p % l.s;
                         const T g = static_cast<T>(gp[static_cast<std::size_t>(p)]);
                         const T lp = static_cast<T>(lse[p]), sm = static_cast<T>(smooth);
                         const T* xr = xp + i * l.c * l.s + j;
                         T* dr = dp + i * l.c * l.s + j;
                         if (l.s == 1) {
                           for (std::int64_t k = 0; k < l.c; ++k)
                             dr[k] = g * (functional::fast_exp(xr[k] - lp) - sm);
                         } else {
                           for (std::int64_t k = 0; k < l.c; ++k)
                             dr[k * l.s] = g * (functional::fast_exp(xr[k * l.s] - lp) - sm);
                         }
                         dp[(i * l.c + tp) * l.s + j] -= g * static_cast<T>(1.0 - eps);
                       }
                     });
                     result[0] = functional::to_result_dtype(dx, out_dtype);
                     return result;
                   });
  return out;
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, std::int64_t ignore_index,
                const std::string& reduction) {
  FSDP_DISPATCH("nll_loss", nll_loss, log_probs, target, ignore_index, reduction);
  const char* op = "nll_loss";
  const Reduction red = parse_reduction(reduction, op);
  const LossLayout l = loss_layout(log_probs, target, op);
  const Shape result_shape = red == Reduction::None ? l.out_shape : Shape{};
  if (functional::any_meta({&log_probs, &target}, op))
    return functional::meta_empty(result_shape, log_probs.dtype());

  const DType out_dtype = log_probs.dtype();
  const DType cd = functional::compute_dtype(out_dtype);
  const std::int64_t positions = l.n * l.s;
  std::vector<std::int64_t> tg = checked_targets(target, l, ignore_index, op);
  Tensor x = functional::contiguous_as(log_probs, cd);
  std::vector<double> losses(static_cast<std::size_t>(positions), 0.0);
  std::int64_t valid = 0;
  dispatch_float(cd, op, [&]<typename T>() {
    const T* xp = x.data<T>();
    for (std::int64_t p = 0; p < positions; ++p) {
      const std::int64_t t = tg[static_cast<std::size_t>(p)];
      if (t == ignore_index) continue;
      ++valid;
      const std::int64_t i = p / l.s, j = p % l.s;
      losses[static_cast<std::size_t>(p)] = -static_cast<double>(xp[(i * l.c + t) * l.s + j]);
    }
  });
  Tensor out = reduce_loss(losses, valid, red, result_shape, out_dtype);

  const Shape in_shape = log_probs.shape();
  autograd::record(
      "NllLossBackward", {log_probs, target}, {out}, {target},
      [l, cd, out_dtype, red, valid, ignore_index, positions, in_shape](
          const autograd::variable_list& saved, const autograd::variable_list& grads) {
        autograd::variable_list result(2);
        if (!grads[0].defined()) return result;
        std::vector<std::int64_t> t = checked_targets(saved[0], l, ignore_index, "nll_loss");
        std::vector<double> gp = position_grads(grads[0], positions, valid, red);
        Tensor dx = zeros(in_shape, TensorOptions(cd));
        dispatch_float(cd, "nll_loss", [&]<typename T>() {
          T* dp = dx.data<T>();
          for (std::int64_t p = 0; p < positions; ++p) {
            const std::int64_t tp = t[static_cast<std::size_t>(p)];
            if (tp == ignore_index) continue;
            const std::int64_t i = p / l.s, j = p % l.s;
            dp[(i * l.c + tp) * l.s + j] = static_cast<T>(-gp[static_cast<std::size_t>(p)]);
          }
        });
        result[0] = functional::to_result_dtype(dx, out_dtype);
        return result;
      });
  return out;
}

}  // namespace fsdp
