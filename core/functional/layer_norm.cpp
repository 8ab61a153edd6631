// layer_norm over the trailing `normalized_shape` dims: each of the M rows of N elements is
// normalised with its own mean and biased variance, then scaled by weight and shifted by bias
// (both of shape normalized_shape, optional). Forward keeps per-row mean and 1/std for backward.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dispatch/intercept.h"
#include "core/functional/functional_common.h"
#include "core/functional/vec_math.h"
#include "core/ops.h"
#include "core/parallel.h"

namespace fsdp {
namespace {

template <typename T>
void layer_norm_forward(const T* x, const T* w, const T* b, T* y, T* mean_out, T* rstd_out,
                        std::int64_t m, std::int64_t n, double eps) {
  for (std::int64_t r = 0; r < m; ++r) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    const double s = functional::row_sum<T>(n, [xr](std::int64_t j) { return xr[j]; });
    const double mean = n > 0 ? s / static_cast<double>(n) : 0.0;
    const T m0 = static_cast<T>(mean);
    // Two passes (mean, then squared deviations): no cancellation for rows far from zero.
    const double ss = functional::row_sum<T>(n, [xr, m0](std::int64_t j) {
      const T d = xr[j] - m0;
      return d * d;
    });
    const double var = n > 0 ? ss / static_cast<double>(n) : 0.0;
    const T rstd = static_cast<T>(1.0 / std::sqrt(var + eps));
    const T mu = static_cast<T>(mean);
    mean_out[r] = mu;
    rstd_out[r] = rstd;
    if (w && b) {
      for (std::int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - mu) * rstd * w[j] + b[j];
    } else if (w) {
      for (std::int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - mu) * rstd * w[j];
    } else if (b) {
      for (std::int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - mu) * rstd + b[j];
    } else {
      for (std::int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - mu) * rstd;
    }
  }
}

// With xhat = (x - mean) * rstd and gh = g * w:
//   dx = rstd * (gh - mean(gh) - xhat * mean(gh * xhat)),  dw = sum_rows g * xhat,  db = sum_rows
//   g.
template <typename T>
void layer_norm_backward(const T* x, const T* w, const T* mean, const T* rstd, const T* g, T* dx,
                         double* dw, double* db, std::int64_t m, std::int64_t n) {
  for (std::int64_t r = 0; r < m; ++r) {
    const T* xr = x + r * n;
    const T* gr = g + r * n;
    const T mu = mean[r], rs = rstd[r];
    const double sum_gh =
        functional::row_sum<T>(n, [gr, w](std::int64_t j) { return w ? gr[j] * w[j] : gr[j]; });
    const double sum_gh_xhat = functional::row_sum<T>(n, [gr, w, xr, mu, rs](std::int64_t j) {
      return (w ? gr[j] * w[j] : gr[j]) * ((xr[j] - mu) * rs);
    });
    if (dw)
      for (std::int64_t j = 0; j < n; ++j)
        dw[j] += static_cast<double>(gr[j] * ((xr[j] - mu) * rs));
    if (db)
      for (std::int64_t j = 0; j < n; ++j) db[j] += static_cast<double>(gr[j]);
    if (!dx) continue;
    const T a = static_cast<T>(sum_gh / static_cast<double>(n));
    const T c = static_cast<T>(sum_gh_xhat / static_cast<double>(n));
    T* dr = dx + r * n;
    for (std::int64_t j = 0; j < n; ++j) {
      const T xhat = (xr[j] - mu) * rs;
      const T gh = w ? gr[j] * w[j] : gr[j];
      dr[j] = rs * (gh - a - xhat * c);
    }
  }
}

// dw[j] += sum_rows g * xhat and db[j] += sum_rows g for columns [j0, j1), rows in order (the
// sums layer_norm_backward makes, column by column so column ranges can run on threads).
template <typename T>
void layer_norm_param_grads(const T* x, const T* mean, const T* rstd, const T* g, double* dw,
                            double* db, std::int64_t m, std::int64_t n, std::int64_t j0,
                            std::int64_t j1) {
  for (std::int64_t r = 0; r < m; ++r) {
    const T* xr = x + r * n;
    const T* gr = g + r * n;
    const T mu = mean[r], rs = rstd[r];
    if (dw)
      for (std::int64_t j = j0; j < j1; ++j)
        dw[j] += static_cast<double>(gr[j] * ((xr[j] - mu) * rs));
    if (db)
      for (std::int64_t j = j0; j < j1; ++j) db[j] += static_cast<double>(gr[j]);
  }
}

Tensor from_doubles(const std::vector<double>& v, const Shape& shape, DType d) {
  return from_vector(v, shape, TensorOptions(d));
}

}  // namespace

Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  FSDP_DISPATCH("layer_norm", layer_norm, input, normalized_shape, weight, bias, eps);
  const char* op = "layer_norm";
  functional::check_floating(input, op, "input");
  const auto nd = static_cast<std::int64_t>(normalized_shape.size());
  const Shape& in_shape = input.shape();
  bool ok = input.dim() >= nd;
  for (std::int64_t i = 0; ok && i < nd; ++i)
    ok = in_shape[static_cast<std::size_t>(input.dim() - nd + i)] ==
         normalized_shape[static_cast<std::size_t>(i)];
  FSDP_CHECK(ok, RuntimeError,
             "layer_norm: given normalized_shape={}, expected input with shape [*, {}], but got "
             "input of size {}",
             shape_str(normalized_shape),
             shape_str(normalized_shape).substr(1, shape_str(normalized_shape).size() - 2),
             shape_str(in_shape));
  for (const auto* p : {&weight, &bias}) {
    if (!p->defined()) continue;
    FSDP_CHECK(p->shape() == normalized_shape, RuntimeError,
               "layer_norm: expected {} to be of same shape as normalized_shape, but got {} of "
               "shape {} and normalized_shape = {}",
               p == &weight ? "weight" : "bias", p == &weight ? "weight" : "bias",
               shape_str(p->shape()), shape_str(normalized_shape));
    functional::check_floating(*p, op, p == &weight ? "weight" : "bias");
  }
  if (functional::any_meta({&input, &weight, &bias}, op))
    return functional::meta_empty(in_shape, input.dtype());

  const DType out_dtype = input.dtype();
  const DType cd = functional::compute_dtype(out_dtype);
  const std::int64_t n = shape_numel(normalized_shape);
  const std::int64_t m = n > 0 ? input.numel() / n : 0;
  Tensor w = weight.defined() ? functional::contiguous_as(weight, cd) : Tensor();
  Tensor b = bias.defined() ? functional::contiguous_as(bias, cd) : Tensor();
  Tensor mean = empty({m}, TensorOptions(cd));
  Tensor rstd = empty({m}, TensorOptions(cd));
  Tensor out;
  if (functional::is_16bit_float(out_dtype) && input.is_contiguous()) {
    // 16-bit: blocks of rows converted to float32, normalised and rounded in one pass.
    out = empty(in_shape, TensorOptions(out_dtype));
    const auto* xs = input.data<std::uint16_t>();
    auto* ys = out.data<std::uint16_t>();
    functional::for_row_blocks(
        m, n, [&](std::int64_t r0, std::int64_t rows, float* xb, float* yb, float*) {
          convert_contiguous(xb, DType::Float32, xs + r0 * n, out_dtype, rows * n);
          layer_norm_forward<float>(xb, functional::ptr_or_null<float>(w),
                                    functional::ptr_or_null<float>(b), yb, mean.data<float>() + r0,
                                    rstd.data<float>() + r0, rows, n, eps);
          convert_contiguous(ys + r0 * n, out_dtype, yb, DType::Float32, rows * n);
        });
  } else {
    Tensor x = functional::contiguous_as(input, cd);
    Tensor y = empty(in_shape, TensorOptions(cd));
    dispatch_float(cd, op, [&]<typename T>() {
      const T* xs = x.data<T>();
      T* ys = y.data<T>();
      T* ms = mean.data<T>();
      T* rs = rstd.data<T>();
      parallel_for(0, m, functional::row_grain(n), [&](std::int64_t r0, std::int64_t r1) {
        layer_norm_forward<T>(xs + r0 * n, functional::ptr_or_null<T>(w),
                              functional::ptr_or_null<T>(b), ys + r0 * n, ms + r0, rs + r0, r1 - r0,
                              n, eps);
      });
    });
    out = functional::to_result_dtype(y, out_dtype);
  }

  const bool has_w = weight.defined(), has_b = bias.defined();
  const DType w_dtype = has_w ? weight.dtype() : cd, b_dtype = has_b ? bias.dtype() : cd;
  autograd::record(
      "NativeLayerNormBackward", {input, weight, bias}, {out}, {input, weight, mean, rstd},
      [m, n, cd, out_dtype, has_w, has_b, w_dtype, b_dtype, in_shape, normalized_shape](
          const autograd::variable_list& saved, const autograd::variable_list& grads) {
        autograd::variable_list result(3);
        if (!grads[0].defined()) return result;
        Tensor ws = has_w ? functional::contiguous_as(saved[1], cd) : Tensor();
        std::vector<double> dw(has_w ? static_cast<std::size_t>(n) : 0);
        std::vector<double> db(has_b ? static_cast<std::size_t>(n) : 0);
        const Tensor& g0 = grads[0];
        if (functional::is_16bit_float(out_dtype) && saved[0].dtype() == out_dtype &&
            saved[0].is_contiguous() && g0.dtype() == out_dtype && g0.is_contiguous()) {
          Tensor dx = empty(in_shape, TensorOptions(out_dtype));
          const auto* xs = saved[0].data<std::uint16_t>();
          const auto* gs = g0.data<std::uint16_t>();
          auto* ds = dx.data<std::uint16_t>();
          functional::for_row_blocks(
              m, n, [&](std::int64_t r0, std::int64_t rows, float* xb, float* db16, float* gb) {
                convert_contiguous(xb, DType::Float32, xs + r0 * n, out_dtype, rows * n);
                convert_contiguous(gb, DType::Float32, gs + r0 * n, out_dtype, rows * n);
                layer_norm_backward<float>(xb, functional::ptr_or_null<float>(ws),
                                           saved[2].data<float>() + r0, saved[3].data<float>() + r0,
                                           gb, db16, has_w ? dw.data() : nullptr,
                                           has_b ? db.data() : nullptr, rows, n);
                convert_contiguous(ds + r0 * n, out_dtype, db16, DType::Float32, rows * n);
              });
          result[0] = dx;
        } else {
          Tensor xs = functional::contiguous_as(saved[0], cd);
          Tensor g = functional::contiguous_as(g0, cd);
          Tensor dx = empty(in_shape, TensorOptions(cd));
          dispatch_float(cd, "layer_norm", [&]<typename T>() {
            const T *xp = xs.data<T>(), *mp = saved[2].data<T>(), *rp = saved[3].data<T>();
            const T* gp = g.data<T>();
            T* dp = dx.data<T>();
            // dx by rows, then the parameter gradients by columns, each across the threads.
            parallel_for(0, m, functional::row_grain(n), [&](std::int64_t r0, std::int64_t r1) {
              layer_norm_backward<T>(xp + r0 * n, functional::ptr_or_null<T>(ws), mp + r0, rp + r0,
                                     gp + r0 * n, dp + r0 * n, nullptr, nullptr, r1 - r0, n);
            });
            if (has_w || has_b)
              parallel_for(0, n, functional::row_grain(m), [&](std::int64_t j0, std::int64_t j1) {
                layer_norm_param_grads<T>(xp, mp, rp, gp, has_w ? dw.data() : nullptr,
                                          has_b ? db.data() : nullptr, m, n, j0, j1);
              });
          });
          result[0] = functional::to_result_dtype(dx, out_dtype);
        }
        if (has_w) result[1] = from_doubles(dw, normalized_shape, w_dtype);
        if (has_b) result[2] = from_doubles(db, normalized_shape, b_dtype);
        return result;
      });
  return out;
}

}  // namespace fsdp
