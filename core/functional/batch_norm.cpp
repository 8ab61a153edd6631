// batch_norm for inputs (N, C), (N, C, L), (N, C, H, W), (N, C, D, H, W): per-channel statistics
// over every dim but 1. The input is read as (N, C, S) with S the product of the spatial dims.
//
// Training: normalises with the batch mean and biased variance, and (when given) updates the
// running stats in place, exactly as torch's functional form:
//   running_mean = (1 - momentum) * running_mean + momentum * mean
//   running_var  = (1 - momentum) * running_var  + momentum * var * count / (count - 1)
// `momentum` is always a number here; the module turns torch's momentum=None (cumulative moving
// average) into momentum = 1 / num_batches_tracked before calling, as torch's _BatchNorm does.
// Eval: normalises with the running stats. Backward covers both modes.
#include <cmath>
#include <vector>

#include "core/dispatch/intercept.h"
#include "core/functional/functional_common.h"
#include "core/kernels/cpu/row_kernels.h"
#include "core/ops.h"

namespace fsdp {
namespace {

// True if some defined tensor is on the meta device; otherwise checks they are all on the cpu.
bool any_meta(std::initializer_list<const Tensor*> ts, const char* op) {
  bool meta = false;
  for (const Tensor* t : ts)
    if (t->defined() && t->is_meta()) meta = true;
  if (meta) return true;
  for (const Tensor* t : ts)
    if (t->defined()) check_cpu(*t, op);
  return false;
}

struct BnLayout {
  std::int64_t n = 0, c = 0, s = 1;
};

// Per-channel mean and biased variance (two passes, double accumulation).
template <typename T>
void channel_stats(const T* x, const BnLayout& l, std::vector<double>& mean,
                   std::vector<double>& var) {
  const double count = static_cast<double>(l.n * l.s);
  for (std::int64_t ch = 0; ch < l.c; ++ch) {
    double s = 0;
    for (std::int64_t i = 0; i < l.n; ++i) {
      const T* p = x + (i * l.c + ch) * l.s;
      for (std::int64_t j = 0; j < l.s; ++j) s += p[j];
    }
    const double mu = s / count;
    double ss = 0;
    for (std::int64_t i = 0; i < l.n; ++i) {
      const T* p = x + (i * l.c + ch) * l.s;
      for (std::int64_t j = 0; j < l.s; ++j) {
        const double d = static_cast<double>(p[j]) - mu;
        ss += d * d;
      }
    }
    mean[static_cast<std::size_t>(ch)] = mu;
    var[static_cast<std::size_t>(ch)] = ss / count;
  }
}

// y = (x - mean) * invstd * w + b, per channel (w, b optional).
template <typename T>
void normalize(const T* x, T* y, const T* mean, const T* invstd, const T* w, const T* b,
               const BnLayout& l) {
  for (std::int64_t i = 0; i < l.n; ++i)
    for (std::int64_t ch = 0; ch < l.c; ++ch) {
      const T scale = invstd[ch] * (w ? w[ch] : T(1));
      const T mu = mean[ch], shift = b ? b[ch] : T(0);
      const std::int64_t base = (i * l.c + ch) * l.s;
      for (std::int64_t j = 0; j < l.s; ++j) y[base + j] = (x[base + j] - mu) * scale + shift;
    }
}

// Backward. Per channel: sum_g = sum(g), sum_gx = sum(g * xhat) with xhat = (x - mean) * invstd;
//   training: dx = w * invstd * (g - sum_g / count - xhat * sum_gx / count)
//   eval:     dx = w * invstd * g      (the statistics are constants)
//   dw = sum_gx, db = sum_g.
template <typename T>
void batch_norm_backward(const T* x, const T* g, const T* mean, const T* invstd, const T* w, T* dx,
                         double* dw, double* db, const BnLayout& l, bool training) {
  const double count = static_cast<double>(l.n * l.s);
  for (std::int64_t ch = 0; ch < l.c; ++ch) {
    const T mu = mean[ch], is = invstd[ch];
    double sum_g = 0, sum_gx = 0;
    for (std::int64_t i = 0; i < l.n; ++i) {
      const std::int64_t base = (i * l.c + ch) * l.s;
      for (std::int64_t j = 0; j < l.s; ++j) {
        sum_g += g[base + j];
        sum_gx += static_cast<double>(g[base + j]) * ((x[base + j] - mu) * is);
      }
    }
    if (dw) dw[ch] = sum_gx;
    if (db) db[ch] = sum_g;
    if (!dx) continue;
    const T k = is * (w ? w[ch] : T(1));
    const T mean_g = training ? static_cast<T>(sum_g / count) : T(0);
    const T mean_gx = training ? static_cast<T>(sum_gx / count) : T(0);
    for (std::int64_t i = 0; i < l.n; ++i) {
      const std::int64_t base = (i * l.c + ch) * l.s;
      for (std::int64_t j = 0; j < l.s; ++j) {
        const T xhat = (x[base + j] - mu) * is;
        dx[base + j] = k * (g[base + j] - mean_g - xhat * mean_gx);
      }
    }
  }
}

// running = (1 - momentum) * running + momentum * value, in place in running's own dtype.
void update_running(const Tensor& running, const std::vector<double>& value, double momentum) {
  running.storage()->bump_version();
  void* p = running.data_ptr();
  const std::int64_t stride = running.dim() == 1 ? running.stride(0) : 1;
  const DType d = running.dtype();
  for (std::size_t ch = 0; ch < value.size(); ++ch) {
    const auto o = static_cast<std::int64_t>(ch) * stride;
    store_double(p, d, o, (1.0 - momentum) * load_double(p, d, o) + momentum * value[ch]);
  }
}

void check_channel_tensor(const Tensor& t, std::int64_t c, const char* what, const Shape& input) {
  if (!t.defined()) return;
  FSDP_CHECK(t.numel() == c, RuntimeError,
             "batch_norm: {} should contain {} elements (one per channel of input of shape {}), "
             "not {} (shape {})",
             what, c, shape_str(input), t.numel(), shape_str(t.shape()));
  functional::check_floating(t, "batch_norm", what);
}

}  // namespace

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps) {
  FSDP_DISPATCH("batch_norm", batch_norm, input, running_mean, running_var, weight, bias, training,
                momentum, eps);
  const char* op = "batch_norm";
  functional::check_floating(input, op, "input");
  FSDP_CHECK(input.dim() >= 2, ValueError,
             "batch_norm: expected an input of 2 or more dimensions (N, C, ...), got shape {}",
             shape_str(input.shape()));
  const Shape in_shape = input.shape();
  BnLayout l;
  l.n = in_shape[0];
  l.c = in_shape[1];
  for (std::size_t i = 2; i < in_shape.size(); ++i) l.s *= in_shape[i];
  check_channel_tensor(running_mean, l.c, "running_mean", in_shape);
  check_channel_tensor(running_var, l.c, "running_var", in_shape);
  check_channel_tensor(weight, l.c, "weight", in_shape);
  check_channel_tensor(bias, l.c, "bias", in_shape);
  FSDP_CHECK(training || (running_mean.defined() && running_var.defined()), RuntimeError,
             "batch_norm: running_mean and running_var must be defined in evaluation mode "
             "(training=false)");
  if (training)
    FSDP_CHECK(l.n * l.s > 1, ValueError,
               "batch_norm: expected more than 1 value per channel when training, got input "
               "size {}",
               shape_str(in_shape));
  if (any_meta({&input, &running_mean, &running_var, &weight, &bias}, op))
    return functional::meta_empty(in_shape, input.dtype());

  const DType out_dtype = input.dtype();
  const DType cd = functional::compute_dtype(out_dtype);
  Tensor x = functional::contiguous_as(input, cd);
  Tensor w = weight.defined() ? functional::contiguous_as(weight, cd) : Tensor();
  Tensor b = bias.defined() ? functional::contiguous_as(bias, cd) : Tensor();
  const auto cs = static_cast<std::size_t>(l.c);
  std::vector<double> mean(cs), var(cs);
  if (training) {
    dispatch_float(cd, op, [&]<typename T>() { channel_stats<T>(x.data<T>(), l, mean, var); });
    const std::int64_t count = l.n * l.s;
    if (running_mean.defined()) update_running(running_mean, mean, momentum);
    if (running_var.defined()) {
      std::vector<double> unbiased(cs);
      const double f = static_cast<double>(count) / static_cast<double>(count - 1);
      for (std::size_t ch = 0; ch < cs; ++ch) unbiased[ch] = var[ch] * f;
      update_running(running_var, unbiased, momentum);
    }
  } else {
    mean = running_mean.to_vector();
    var = running_var.to_vector();
  }
  // Saved as fresh tensors, so later in-place updates of the running stats cannot touch them.
  std::vector<double> invstd(cs);
  for (std::size_t ch = 0; ch < cs; ++ch) invstd[ch] = 1.0 / std::sqrt(var[ch] + eps);
  Tensor mean_t = from_vector(mean, {l.c}, TensorOptions(cd));
  Tensor invstd_t = from_vector(invstd, {l.c}, TensorOptions(cd));

  Tensor y = empty(in_shape, TensorOptions(cd));
  dispatch_float(cd, op, [&]<typename T>() {
    normalize<T>(x.data<T>(), y.data<T>(), mean_t.data<T>(), invstd_t.data<T>(),
                 functional::ptr_or_null<T>(w), functional::ptr_or_null<T>(b), l);
  });
  Tensor out = functional::to_result_dtype(y, out_dtype);

  const bool has_w = weight.defined(), has_b = bias.defined();
  const DType w_dtype = has_w ? weight.dtype() : cd, b_dtype = has_b ? bias.dtype() : cd;
  const Shape w_shape = has_w ? weight.shape() : Shape{l.c};
  const Shape b_shape = has_b ? bias.shape() : Shape{l.c};
  autograd::record(
      "NativeBatchNormBackward", {input, weight, bias}, {out}, {input, weight, mean_t, invstd_t},
      [l, cd, out_dtype, training, has_w, has_b, w_dtype, b_dtype, in_shape, w_shape, b_shape](
          const autograd::variable_list& saved, const autograd::variable_list& grads) {
        autograd::variable_list result(3);
        if (!grads[0].defined()) return result;
        Tensor xs = functional::contiguous_as(saved[0], cd);
        Tensor ws = has_w ? functional::contiguous_as(saved[1], cd) : Tensor();
        Tensor g = functional::contiguous_as(grads[0], cd);
        Tensor dx = empty(in_shape, TensorOptions(cd));
        const auto cs = static_cast<std::size_t>(l.c);
        std::vector<double> dw(cs), db(cs);
        dispatch_float(cd, "batch_norm", [&]<typename T>() {
          batch_norm_backward<T>(xs.data<T>(), g.data<T>(), saved[2].data<T>(), saved[3].data<T>(),
                                 functional::ptr_or_null<T>(ws), dx.data<T>(), dw.data(), db.data(),
                                 l, training);
        });
        result[0] = functional::to_result_dtype(dx, out_dtype);
        if (has_w) result[1] = from_vector(dw, w_shape, TensorOptions(w_dtype));
        if (has_b) result[2] = from_vector(db, b_shape, TensorOptions(b_dtype));
        return result;
      });
  return out;
}

}  // namespace fsdp
