// scaled_dot_product_attention with torch's semantics (scale, top-left causal mask, bool or
// additive masks broadcast to (B, H, L, S), grouped-query heads), on blocked_attention's kernel:
// an online softmax over blocks of keys that never holds an (L, S) matrix, skips the blocks
// above the causal diagonal, reads kv head h / (H / KV) in place of a repeat_kv copy and reads
// q, k and v through their strides (a (B, S, H, D) projection transposed needs no copy). The
// backward recomputes each block from the saved row log-sum-exp. 16-bit inputs compute in
// float32, as Llama's softmax does. A row whose every key is masked gives 0, as torch's does.
#include <cmath>
#include <limits>

#include "core/dispatch/intercept.h"
#include "core/functional/functional_common.h"
#include "core/kernels/kernel_table.h"
#include "core/ops.h"
#include "core/ops/op_utils.h"

namespace fsdp {
namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

// A (B, H, rows, cols) tensor whose rows are a row apart. One row's stride is never stepped, so
// a view may carry any (is_contiguous ignores it: a transposed (.., D, 1) view has row stride
// 1), but the kernels hand it to BLAS as a leading dimension, which must span a row.
Tensor rows_a_row_apart(const Tensor& t) {
  if (t.size(2) != 1 || t.stride(2) >= t.size(3)) return t;
  Shape strides = t.strides();
  strides[2] = t.size(3);
  return make_view(t, t.shape(), strides, t.storage_offset());
}

// `t` as the kernel reads it: its compute dtype, unit stride in the last dim and rows at least
// a row apart (BLAS's leading dimension); a view when it already is, else a contiguous copy.
Tensor operand(const Tensor& t, DType cd) {
  const bool strided_ok = t.dtype() == cd && t.stride(3) == 1 && t.stride(2) >= t.size(3) &&
                          t.stride(1) >= 0 && t.stride(0) >= 0;
  return rows_a_row_apart(strided_ok ? t.detach() : functional::contiguous_as(t, cd));
}

// The mask as the kernel reads it: additive in the compute dtype (a bool mask's false is
// -inf), four dims of size 1 or the scores', keys contiguous; strides 0 where it broadcasts.
Tensor additive_mask(const Tensor& mask, const Shape& scores, DType cd, AttentionStrides& st) {
  Shape shape(4 - static_cast<std::size_t>(mask.dim()), 1);
  for (std::int64_t i = 0; i < mask.dim(); ++i) shape.push_back(mask.size(i));
  Tensor m = mask.detach().reshape(shape);
  if (shape[3] != scores[3]) {  // broadcast over keys: the kernel reads keys contiguously
    shape[3] = scores[3];
    m = m.expand(shape);
  }
  Tensor add;
  if (m.dtype() == DType::Bool) {
    add = masked_fill(zeros(shape, TensorOptions(cd, m.device())), logical_not(m),
                      -std::numeric_limits<double>::infinity());
  } else {
    add = functional::contiguous_as(m, cd);
  }
  st = {shape[0] == 1 ? 0 : shape[1] * shape[2] * shape[3], shape[1] == 1 ? 0 : shape[2] * shape[3],
        shape[2] == 1 ? 0 : shape[3]};
  return add;
}

void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                  bool is_causal, bool enable_gqa) {
  for (const Tensor* t : {&q, &k, &v})
    FSDP_CHECK(t->defined(), RuntimeError, "{}: query, key and value must be defined", kOp);
  const std::string shapes = fmt::format("query {}, key {}, value {}", shape_str(q.shape()),
                                         shape_str(k.shape()), shape_str(v.shape()));
  FSDP_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, RuntimeError,
             "{}: expected query (B, H, L, D), key (B, KV, S, D) and value (B, KV, S, Dv) of 4 "
             "dims, got {}",
             kOp, shapes);
  FSDP_CHECK(q.dtype() == k.dtype() && k.dtype() == v.dtype(), RuntimeError,
             "{}: Expected query, key, and value to have the same dtype, but got query.dtype: {} "
             "key.dtype: {} and value.dtype: {} instead.",
             kOp, dtype_name(q.dtype()), dtype_name(k.dtype()), dtype_name(v.dtype()));
  functional::check_floating(q, kOp, "query");
  FSDP_CHECK(q.size(0) == k.size(0) && k.size(0) == v.size(0), RuntimeError,
             "{}: expected query, key and value of one batch size, got {}", kOp, shapes);
  FSDP_CHECK(q.size(3) == k.size(3), RuntimeError,
             "{}: expected query and key of one head dim, got {}", kOp, shapes);
  FSDP_CHECK(k.size(2) == v.size(2), RuntimeError,
             "{}: expected key and value of one sequence length, got {}", kOp, shapes);
  FSDP_CHECK(k.size(1) == v.size(1), RuntimeError,
             "{}: expected key and value of one number of heads, got {}", kOp, shapes);
  if (enable_gqa) {
    FSDP_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, RuntimeError,
               "{}: Number of heads in key and value must divide the number of heads in query "
               "({})",
               kOp, shapes);
  } else {
    FSDP_CHECK(q.size(1) == k.size(1), RuntimeError,
               "{}: query has {} heads and key and value {}; they must be equal unless "
               "enable_gqa=true ({})",
               kOp, q.size(1), k.size(1), shapes);
  }
  if (!mask.defined()) return;
  FSDP_CHECK(!is_causal, RuntimeError,
             "{}: Explicit attn_mask should not be set when is_causal=True", kOp);
  FSDP_CHECK(
      mask.dtype() == DType::Bool || mask.dtype() == DType::Float32 || mask.dtype() == q.dtype(),
      RuntimeError,
      "{}: Expected attn_mask dtype to be bool or float or to match query dtype, but got "
      "attn_mask.dtype: {} and query.dtype: {} instead.",
      kOp, dtype_name(mask.dtype()), dtype_name(q.dtype()));
  const Shape scores{q.size(0), q.size(1), q.size(2), k.size(2)};
  bool fits = mask.dim() <= 4;
  for (std::int64_t i = 0; fits && i < mask.dim(); ++i) {
    const std::int64_t m = mask.size(mask.dim() - 1 - i), s = scores[std::size_t(3 - i)];
    fits = m == 1 || m == s;
  }
  FSDP_CHECK(fits, RuntimeError,
             "{}: attn_mask of shape {} is not broadcastable to the scores' shape (B, H, L, S) = "
             "{} ({})",
             kOp, shape_str(mask.shape()), shape_str(scores), shapes);
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask, bool is_causal,
                                    std::optional<double> scale, bool enable_gqa) {
  FSDP_DISPATCH(kOp, scaled_dot_product_attention, q, k, v, attn_mask, is_causal, scale,
                enable_gqa);
  check_inputs(q, k, v, attn_mask, is_causal, enable_gqa);
  const Device dev = common_device(kOp, {&q, &k, &v, &attn_mask});
  const DType dt = q.dtype();
  const Shape out_shape{q.size(0), q.size(1), q.size(2), v.size(3)};
  if (dev.is_meta()) return functional::meta_empty(out_shape, dt);

  AttentionDims d{q.size(0), q.size(2), k.size(2), q.size(3), v.size(3)};
  d.H = q.size(1);
  d.KV = k.size(1);
  d.scale = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(d.D));
  d.causal = is_causal;
  d.masked_rows_zero = true;
  const DType cd = functional::compute_dtype(dt);
  // 16-bit operands go to the kernels as they are, views included (a device's 16-bit attention
  // kernels read them through their strides; the CPU's widens them to float32 itself): no
  // float32 copies held.
  const bool narrow = functional::is_16bit_float(dt);
  const DType od = narrow ? dt : cd;  // the operands' and the output's dtype
  Tensor qc = operand(q, od), kc = operand(k, od), vc = operand(v, od);
  d.q = attention_strides(qc);
  d.k = attention_strides(kc);
  d.v = attention_strides(vc);
  Tensor mask;
  if (attn_mask.defined()) mask = additive_mask(attn_mask, {d.B, d.H, d.L, d.S}, cd, d.mask);
  Tensor out = new_tensor(out_shape, od, dev);
  Tensor lse = new_tensor({d.B, d.H, d.L}, cd, dev);
  if (out.numel() > 0) kernels(dev).blocked_attention(out, lse, qc, kc, vc, mask, d);
  Tensor result = functional::to_result_dtype(out, dt);
  autograd::record(
      "ScaledDotProductAttentionBackward", {q, k, v}, {result}, {qc, kc, vc, out, lse},
      [d, dt, od, mask](const autograd::variable_list& s,
                        const autograd::variable_list& g) -> autograd::variable_list {
        if (!g[0].defined()) return {Tensor(), Tensor(), Tensor()};
        const Device dev = common_device("scaled_dot_product_attention backward", {&g[0], &s[0]});
        Tensor dout = rows_a_row_apart(functional::contiguous_as(g[0], od));
        // The kernel overwrites the gradients; with no output element there is no gradient.
        const bool run = dout.numel() > 0;
        auto grad = [&](const Shape& shape) {
          return run ? new_tensor(shape, od, dev) : zeros(shape, TensorOptions(od, dev));
        };
        Tensor dq = grad({d.B, d.H, d.L, d.D}), dk = grad({d.B, d.KV, d.S, d.D});
        Tensor dv = grad({d.B, d.KV, d.S, d.Dv});
        if (run)
          kernels(dev).blocked_attention_backward(dq, dk, dv, s[0], s[1], s[2], mask, s[3], s[4],
                                                  dout, d);
        return {functional::to_result_dtype(dq, dt), functional::to_result_dtype(dk, dt),
                functional::to_result_dtype(dv, dt)};
      });
  return result;
}

}  // namespace fsdp
