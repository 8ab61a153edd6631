// Device dispatch: the kernels of every op, one table of function pointers per device type (as the
// allocators are registered per device type). An op keeps its checks, shape and dtype logic and
// autograd record, allocates its outputs on the inputs' device (common_device, new_tensor) and
// runs `kernels(device).<family>(...)`. Kernels take Tensors (outputs first, already allocated)
// and plain values; the kind of an element-wise map is an enum, not a lambda, so that a table can
// be filled by code that is compiled elsewhere (a device's own kernels). docs/devices.md.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/kernels/index_bounds.h"
#include "core/kernels/kernel_kinds.h"
#include "core/optim/update_kernels.h"
#include "core/tensor.h"

namespace fsdp {

class Generator;

// A random fill: Uniform draws [a, b); Normal, mean a and std b; Integer, low + draw % range;
// Keep, 1 where a uniform draw is >= a (dropout's mask: kept with probability 1 - a), else 0.
enum class RandomKind : std::uint8_t { Uniform, Normal, Integer, Keep };
struct RandomSpec {
  RandomKind kind;
  double a = 0, b = 0;
  std::int64_t low = 0;
  std::uint64_t range = 1;
};

// split_heads' layout: packed (L, N, parts * heads * hd) <-> parts of (N * heads, L, hd).
struct HeadsLayout {
  std::int64_t L, N, parts, heads, hd;
  std::int64_t row() const { return parts * heads * hd; }  // one (l, n) row of packed
};

// An input read as (n, c, s): position (i, j) has its c class scores (a loss) or channels
// (batch norm) s elements apart.
struct NcsLayout {
  std::int64_t n = 1, c = 0, s = 1;
};

// Where an attention operand's rows are: element (b, h, i, c) at b * batch + h * head + i * row
// + c (the last dim has unit stride; a 0 stride broadcasts). Strided q, k and v let
// scaled_dot_product_attention read a (B, S, H, D) projection transposed without a copy.
struct AttentionStrides {
  std::int64_t batch = 0, head = 0, row = 0;
};

// An attention tensor's strides as AttentionStrides: (B, H, rows, cols), or (B, rows, cols) for
// one head (head 0).
inline AttentionStrides attention_strides(const Tensor& t) {
  return t.dim() == 4 ? AttentionStrides{t.stride(0), t.stride(1), t.stride(2)}
                      : AttentionStrides{t.stride(0), 0, t.stride(1)};
}

// blocked_attention's and scaled_dot_product_attention's sizes: q (B, H, L, D), k (B, KV, S, D),
// v (B, KV, S, Dv), out (B, H, L, Dv), lse (B, H, L) contiguous; query head h uses kv head
// h / (H / KV) (grouped-query attention); scores = scale q k^T + mask, the mask additive (of the
// compute dtype: q's, float32 for 16-bit q) with its own strides (row: between queries; keys are
// contiguous), causal = top-left (query i sees keys j <= i). out, and the backward's dout, dq, dk
// and dv, may be views with unit last stride (packed_causal_attention's heads of one buffer; a
// kernel that needs them dense copies). 16-bit operands are computed in float32, lse float32.
struct AttentionDims {
  std::int64_t B, L, S, D, Dv;
  std::int64_t H = 1, KV = 1;
  double scale = 1.0;
  bool causal = false;
  // A row whose every key is masked: output 0 and no gradient (torch's scaled_dot_product_
  // attention) rather than nan (softmax's, blocked_attention's).
  bool masked_rows_zero = false;
  AttentionStrides q, k, v, mask;
};

struct KernelTable {
  // Element-wise (core/ops/elementwise.cpp, compare.cpp, inplace.cpp). out may be a (in-place).
  void (*binary)(BinaryKind kind, const Tensor& out, const Tensor& a, const Tensor& b,
                 double alpha);
  void (*unary)(UnaryKind kind, const Tensor& out, const Tensor& a, double scalar);
  void (*compare)(CompareKind kind, const Tensor& out, const Tensor& a, const Tensor& b);
  void (*eq_scalar)(const Tensor& out, const Tensor& a, double b);
  void (*logical_not)(const Tensor& out, const Tensor& a);
  void (*where)(const Tensor& out, const Tensor& condition, const Tensor& a, const Tensor& b);
  void (*masked_fill)(const Tensor& out, const Tensor& a, const Tensor& mask, double value);

  // Reductions (core/ops/reduce.cpp); `mask` marks the reduced dims of a, out is contiguous.
  void (*sum)(const Tensor& out, const Tensor& a, const std::vector<bool>& mask, bool mean,
              std::int64_t count);
  void (*amax)(const Tensor& out, const Tensor& a, const std::vector<bool>& mask);
  // values and indices in keepdim layout or not (contiguous), the maximum along `dim`.
  void (*max_dim)(const Tensor& values, const Tensor& indices, const Tensor& a, std::int64_t dim);
  // grad (zeros, a's shape) [indices at dim] = g; g and indices in keepdim shape.
  void (*max_dim_backward)(const Tensor& grad, const Tensor& g, const Tensor& indices,
                           std::int64_t dim);

  // Copies and fills (core/tensor.cpp, core/ops/shape.cpp, join.cpp).
  void (*copy)(const Tensor& dst, const Tensor& src);  // same shape, any strides and dtypes
  void (*copy_broadcast)(const Tensor& dst, const Tensor& src);  // Tensor::copy_ after its checks
  void (*fill)(const Tensor& t, double value);
  // t (contiguous, values.size() elements) = values converted to t's dtype (nn.init's host draws).
  void (*store_values)(const Tensor& t, const std::vector<double>& values);
  // out rows [o, i] = src rows [o, bounds.row(index[i])] of `inner` elements; src contiguous
  // (bounds.size rows); index int64 or int32, contiguous, on out's device, each index checked by
  // the kernel against `bounds` (index_bounds.h: no host read of the indices).
  void (*index_select)(const Tensor& out, const Tensor& src, const Tensor& index,
                       const IndexBounds& bounds, std::int64_t outer, std::int64_t inner);
  // grad rows [o, bounds.row(index[i])] += src rows [o, i] (index_select's backward).
  void (*index_add)(const Tensor& grad, const Tensor& src, const Tensor& index,
                    const IndexBounds& bounds, std::int64_t outer, std::int64_t inner);

  // Random fills in row-major order from g (core/ops/random.cpp).
  void (*random)(const RandomSpec& spec, const Tensor& t, Generator& g);

  // Products (core/ops/linalg.cpp). bmm: out (B, m, n) contiguous = a (B, m, k) . b (B, k, n).
  void (*bmm)(const Tensor& out, const Tensor& a, const Tensor& b);
  // out (rows, out_features) contiguous = x (rows, in) . w^T (+ bias, contiguous, or undefined).
  void (*linear)(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias);
  // 16-bit linear backward in one pass: g (rows, out) and x (rows, in) contiguous, w (out, in);
  // gx, gw, gb each optional (undefined), x needed for gw, w for gx.
  void (*linear_backward16)(const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& g,
                            const Tensor& x, const Tensor& w, std::int64_t in_features);
  // The largest weight (out * in elements) this device's linear_backward16 takes; larger ones
  // take the separate products (the CPU's converts the weight and its gradient whole).
  std::int64_t linear_backward16_max_weight;

  // Attention (core/ops/attention_heads.cpp, blocked_attention.cpp, packed_causal_attention.cpp).
  void (*split_heads)(const std::vector<Tensor>& heads, const Tensor& packed,
                      const HeadsLayout& layout, double first_divisor);
  // packed = the parts back in packed layout; undefined parts give zeros.
  void (*merge_heads)(const Tensor& packed, const std::vector<Tensor>& heads,
                      const HeadsLayout& layout, double first_divisor);
  // blocked attention (an online softmax over blocks of keys, float32/float64, 16-bit in float32):
  // out and lse (the row log-sum-exp of the scaled, masked scores) from q, k, v and the mask
  // (undefined: none).
  void (*blocked_attention)(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                            const Tensor& v, const Tensor& mask, const AttentionDims& dims);
  // dq, dk, dv (overwritten; views allowed, AttentionDims) recomputed block by block from lse.
  void (*blocked_attention_backward)(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                     const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& mask, const Tensor& out, const Tensor& lse,
                                     const Tensor& dout, const AttentionDims& dims);

  // Activations (core/functional/activations.cpp): y = f(x) over contiguous operands of one
  // dtype (float32/float64, or 16-bit floats computed in float32 a chunk at a time; Relu also
  // integers). Backward: dx = f'(saved, g), `saved` the output for relu, tanh and sigmoid, the
  // input for gelu and silu.
  void (*activation)(ActivationKind kind, const Tensor& y, const Tensor& x);
  void (*activation_backward)(ActivationKind kind, const Tensor& dx, const Tensor& saved,
                              const Tensor& g);
  // dropout (core/functional/dropout.cpp): y = mask ? x * scale : 0, contiguous, x and y of one
  // dtype (float32/float64), mask uint8.
  void (*masked_scale)(const Tensor& y, const Tensor& x, const Tensor& mask, double scale);
  // softmax / log_softmax (core/functional/softmax.cpp) of x read as (outer, n, inner) around
  // the dim, contiguous; x and y of one dtype: float32/float64, or 16-bit when inner == 1.
  void (*softmax)(const Tensor& y, const Tensor& x, std::int64_t outer, std::int64_t n,
                  std::int64_t inner, bool log);
  // dx from the output y and the gradient g (same layout and dtype rules).
  void (*softmax_backward)(const Tensor& dx, const Tensor& y, const Tensor& g, std::int64_t outer,
                           std::int64_t n, std::int64_t inner, bool log);
  // y = softmax over the last dim of x (B, L, S) + m (L, S) or (B, L, S), contiguous; mask_stride
  // is L * S for a per-batch mask, else 0.
  void (*masked_softmax)(const Tensor& y, const Tensor& x, const Tensor& m,
                         std::int64_t mask_stride);

  // rms_norm (core/functional/rms_norm.cpp) over rows of n elements, contiguous, x, y and w
  // (optional) of one dtype (16-bit computed in float32), rstd (one per row) in the compute dtype:
  // y = w * round(x * rstd), rstd = 1 / sqrt(mean(x^2) + eps), round() to x's dtype (Llama's).
  void (*rms_norm)(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& w,
                   std::int64_t n, double eps);
  // dx (x's dtype), dw (float64, zero-filled, optional) the weight's sums.
  void (*rms_norm_backward)(const Tensor& dx, const Tensor& dw, const Tensor& x, const Tensor& w,
                            const Tensor& rstd, const Tensor& g, std::int64_t n);
  // Rotary embedding (core/functional/rotary.cpp): out (B, H, S, D) contiguous = x cos +
  // rotate_half(x) sin, x read through its strides (unit stride in the last dim), cos and sin
  // contiguous (S, D) or (B, S, D) (table_batch: S * D, or 0), all of one dtype. `transpose`
  // gives the backward: out = x cos + rotate_half^T(x sin).
  void (*rotary)(const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin,
                 std::int64_t table_batch, bool transpose);

  // layer_norm (core/functional/layer_norm.cpp) over rows of n elements, contiguous: x and y of
  // one dtype (float32/float64, or 16-bit computed in float32), mean and rstd (one per row) in
  // the compute dtype; w and b (optional, contiguous, one dtype) in the compute dtype or, when x
  // is 16-bit, x's dtype: read as they are, never cast first.
  void (*layer_norm)(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                     const Tensor& w, const Tensor& b, std::int64_t n, double eps);
  // dx (x's dtype); dw and db (optional, n elements, the parameters' dtype) overwritten with the
  // parameter gradients, summed over rows in at least float32 and across partial sums in double.
  void (*layer_norm_backward)(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& x,
                              const Tensor& w, const Tensor& mean, const Tensor& rstd,
                              const Tensor& g, std::int64_t n);

  // Classification losses (core/functional/classification_loss.cpp): per-position losses
  // (float64, 0 where the target is ignore_index) of x (n, c, s) contiguous, any floating dtype
  // (cross_entropy's 16-bit x computed in float32; nll_loss's x float32/float64);
  // targets int64, contiguous (n * s), on x's device, checked by the kernel against `bounds`
  // (class_target_bounds: c classes, ignore_index); cross_entropy also writes the log-sum-exp
  // per position.
  void (*cross_entropy)(const Tensor& losses, const Tensor& lse, const Tensor& x,
                        const Tensor& targets, const NcsLayout& layout, const IndexBounds& bounds,
                        double label_smoothing);
  // dx (x's dtype, every element written: zeros where the target is ignored) from x, lse and
  // the upstream gradient of each position's loss: `grads`
  // float64, contiguous, one element (every position's) or n * s.
  void (*cross_entropy_backward)(const Tensor& dx, const Tensor& x, const Tensor& lse,
                                 const Tensor& targets, const Tensor& grads,
                                 const NcsLayout& layout, const IndexBounds& bounds,
                                 double label_smoothing);
  void (*nll_loss)(const Tensor& losses, const Tensor& x, const Tensor& targets,
                   const NcsLayout& layout, const IndexBounds& bounds);
  void (*nll_loss_backward)(const Tensor& dx, const Tensor& targets, const Tensor& grads,
                            const NcsLayout& layout, const IndexBounds& bounds);
  // out (0-d) = the float64 values summed in order; with targets (int64, contiguous) divided by
  // the number of them that are not ignore_index ("mean": 0 / 0 = nan), that count also written
  // to `count` (0-d float64, for the backward).
  void (*sum_in_order)(const Tensor& out, const Tensor& count, const Tensor& values,
                       const Tensor& targets, std::int64_t ignore_index);

  // batch_norm (core/functional/batch_norm.cpp) over x (n, c, s) contiguous float32/float64:
  // per-channel mean and biased variance (float64, two passes)...
  void (*batch_norm_stats)(const Tensor& mean, const Tensor& var, const Tensor& x,
                           const NcsLayout& layout);
  // ...running = (1 - momentum) running + momentum value in place (running: c elements, any
  // floating dtype, strided; value float64)...
  void (*running_update)(const Tensor& running, const Tensor& value, double momentum);
  // ...y = (x - mean) invstd w + b per channel (w, b optional; mean, invstd of x's dtype)...
  void (*batch_norm)(const Tensor& y, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                     const Tensor& w, const Tensor& b, const NcsLayout& layout);
  // ...and backward: dx (optional) and the per-channel sums dw, db (float64).
  void (*batch_norm_backward)(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& x,
                              const Tensor& g, const Tensor& mean, const Tensor& invstd,
                              const Tensor& w, const NcsLayout& layout, bool training);

  // mse_loss (core/functional/mse_loss.cpp), x and t contiguous of one dtype (float32/float64):
  // out = (x - t)^2 of x's shape when `none`, else the 0-d sum (or mean) accumulated in double.
  void (*mse_loss)(const Tensor& out, const Tensor& x, const Tensor& t, bool none, bool mean);
  // d = scale (x - t) g: g of x's shape (reduction none, scale 2), or one element (the upstream
  // gradient of the reduced loss, on the device: d = (g scale rounded to the dtype) (x - t)).
  void (*mse_loss_backward)(const Tensor& d, const Tensor& x, const Tensor& t, const Tensor& g,
                            double scale);

  // torch.nn.utils' gradient clipping (core/nn/clip_grad.cpp): out (0-d float64) = t's share of
  // a p-norm in double (sum |x|^p; max or min |x| for +-inf, nan propagating; for 0, 1 if any
  // element is non-zero)...
  void (*norm_partial)(const Tensor& out, const Tensor& t, double p);
  // ...and t clamped into [lo, hi] in place (nan stays nan).
  void (*clamp_)(const Tensor& t, double lo, double hi);
  // nn.Embedding's max_norm: the given rows of weight (contiguous float32/float64) whose
  // norm_type-norm exceeds max_norm scaled down to it, in place.
  void (*embedding_renorm_)(const Tensor& weight, const std::vector<std::int64_t>& rows,
                            double max_norm, double norm_type);

  // Optimizer updates of one contiguous parameter (core/optim): param, its gradient and state
  // of one dtype and shape; max_exp_avg_sq (amsgrad) and momentum_buffer may be undefined.
  void (*adam_update)(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                      const Tensor& exp_avg_sq, const Tensor& max_exp_avg_sq,
                      const optim::AdamScalars& scalars);
  void (*sgd_update)(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                     const optim::SgdScalars& scalars);
};

// Installs `table` for every device of `type` (null removes it). CPU's is built in.
void register_kernels(DeviceType type, const KernelTable* table);
// The kernels of `device`; a RuntimeError naming the device when none is registered.
const KernelTable& kernels(Device device);
bool has_kernels(Device device);  // false for meta

// The device an op runs on: that of its defined tensors (undefined ones are skipped), which must
// agree, else PyTorch's RuntimeError "<op>: Expected all tensors to be on the same device, but
// found at least two devices, cuda:0 and cpu!". A 0-d cpu tensor mixes with any device (PyTorch's
// scalar rule); meta mixes with any device and wins (shapes only). Storages must be alive; a
// device without kernels is a NotImplementedError naming the op, the device and the shape.
Device common_device(const char* op, std::initializer_list<const Tensor*> tensors);
Device common_device(const char* op, const std::vector<Tensor>& tensors);

// A fresh contiguous tensor (the outputs of ops).
Tensor new_tensor(const Shape& shape, DType dtype, Device device);

// An index or target tensor as the kernels take it: contiguous, detached, on `device` (a 0-d
// cpu one, PyTorch's scalar rule, copied over). Its values are never read on the host.
Tensor kernel_index(const Tensor& index, Device device);

}  // namespace fsdp
