#include "core/nn/multihead_attention.h"

#include <cmath>
#include <limits>

#include "core/dispatch/dispatch_mode.h"
#include "core/functional/masked_softmax.h"
#include "core/nn/init.h"
#include "core/nn/linear.h"
#include "core/ops.h"
#include "core/ops/attention_heads.h"
#include "core/ops/blocked_attention.h"
#include "core/ops/packed_causal_attention.h"
#include "core/warnings.h"

namespace fsdp::nn {

Tensor optional_tensor_arg(const Value& v, const char* name) {
  if (v.is_none()) return Tensor();
  FSDP_CHECK(v.is_tensor(), TypeError, "argument '{}' must be a Tensor or None, not {}", name,
             v.type_name());
  return v.tensor();
}

namespace {

// A bool/uint8 mask (true = masked) or a float mask (added) as an additive float mask.
Tensor additive_mask(const Tensor& mask, DType dtype, const char* what) {
  if (!mask.defined()) return mask;
  Tensor m = mask;
  if (m.dtype() == DType::UInt8) {
    warn(
        fmt::format("Byte tensor for {} in nn.MultiheadAttention is deprecated. Use bool tensor "
                    "instead.",
                    what));
    m = m.to(DType::Bool);
  }
  if (m.dtype() == DType::Bool)
    return masked_fill(zeros(m.shape(), TensorOptions(dtype, m.device())), m,
                       -std::numeric_limits<double>::infinity());
  FSDP_CHECK(m.is_floating_point(), AssertionError,
             "only bool and floating types of {} are supported (got {})", what,
             dtype_name(m.dtype()));
  return m.dtype() == dtype ? m : m.to(dtype);
}

// Appends one zero column on the last dimension (torch's pad(mask, (0, 1))).
Tensor pad_last(const Tensor& m) {
  if (!m.defined()) return m;
  Shape s = m.shape();
  s.back() = 1;
  return cat({m, zeros(s, TensorOptions(m.dtype(), m.device()))}, -1);
}
}  // namespace

MultiheadAttention::MultiheadAttention(std::int64_t e, std::int64_t h, double p, bool bias,
                                       TensorOptions options)
    : MultiheadAttention(
          e, h, MultiheadAttentionOptions{.dropout = p, .bias = bias, .tensor = options}) {}

MultiheadAttention::MultiheadAttention(std::int64_t e, std::int64_t h,
                                       const MultiheadAttentionOptions& o)
    : Module(static_class()),
      embed_dim(e),
      kdim(o.kdim.value_or(e)),
      vdim(o.vdim.value_or(e)),
      num_heads(h),
      head_dim(h > 0 ? e / h : 0),
      dropout(o.dropout),
      batch_first(o.batch_first),
      add_zero_attn(o.add_zero_attn),
      qkv_same_embed_dim(kdim == e && vdim == e),
      options_(o) {
  FSDP_CHECK(e > 0 && h > 0, ValueError,
             "embed_dim and num_heads must be greater than 0, got embed_dim={} and num_heads={} "
             "instead",
             e, h);
  FSDP_CHECK(head_dim * h == e, AssertionError,
             "embed_dim must be divisible by num_heads (embed_dim={}, num_heads={})", e, h);
  options_.tensor = o.tensor.with_requires_grad(false);
  const TensorOptions& t = options_.tensor;
  if (!qkv_same_embed_dim) {
    register_parameter("q_proj_weight", empty({e, e}, t));
    register_parameter("k_proj_weight", empty({e, kdim}, t));
    register_parameter("v_proj_weight", empty({e, vdim}, t));
    register_parameter("in_proj_weight", Tensor());
  } else {
    register_parameter("in_proj_weight", empty({3 * e, e}, t));
    register_parameter("q_proj_weight", Tensor());
    register_parameter("k_proj_weight", Tensor());
    register_parameter("v_proj_weight", Tensor());
  }
  register_parameter("in_proj_bias", o.bias ? empty({3 * e}, t) : Tensor());
  register_module("out_proj", std::make_shared<NonDynamicallyQuantizableLinear>(e, e, o.bias, t));
  if (o.add_bias_kv) {
    register_parameter("bias_k", empty({1, 1, e}, t));
    register_parameter("bias_v", empty({1, 1, e}, t));
  }
  reset_parameters();  // out_proj initialised itself when it was built
}

void MultiheadAttention::reset_parameters() {
  if (qkv_same_embed_dim) {
    init::xavier_uniform_(param("in_proj_weight"));
  } else {
    init::xavier_uniform_(param("q_proj_weight"));
    init::xavier_uniform_(param("k_proj_weight"));
    init::xavier_uniform_(param("v_proj_weight"));
  }
  if (param("in_proj_bias").defined()) {
    init::zeros_(param("in_proj_bias"));
    init::zeros_(child("out_proj")->param("bias"));
  }
  if (has_parameter("bias_k")) {
    init::xavier_normal_(param("bias_k"));
    init::xavier_normal_(param("bias_v"));
  }
}

ModulePtr MultiheadAttention::clone_structure() const {
  MultiheadAttentionOptions o = options_;
  o.tensor = o.tensor.with_device(kMeta);
  return std::make_shared<MultiheadAttention>(embed_dim, num_heads, o);
}

Value MultiheadAttention::forward(const Args& args) {
  FSDP_CHECK(args.size() >= 3, TypeError,
             "MultiheadAttention.forward() missing required arguments: expected query, key and "
             "value (got {} positional arguments)",
             args.size());
  AttentionArgs a;
  a.key_padding_mask = optional_tensor_arg(args.get(3, "key_padding_mask"), "key_padding_mask");
  a.need_weights = args.get(4, "need_weights").to_bool_or(true);
  a.attn_mask = optional_tensor_arg(args.get(5, "attn_mask"), "attn_mask");
  a.average_attn_weights = args.get(6, "average_attn_weights").to_bool_or(true);
  a.is_causal = args.get(7, "is_causal").to_bool_or(false);
  auto [out, weights] = forward(args.tensor(0), args.tensor(1), args.tensor(2), a);
  return Value(std::vector<Value>{Value(out), weights.defined() ? Value(weights) : Value()});
}

std::pair<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query_in, const Tensor& key_in,
                                                      const Tensor& value_in,
                                                      const AttentionArgs& a) {
  const bool batched = query_in.dim() == 3;
  FSDP_CHECK(query_in.dim() == 3 || query_in.dim() == 2, ValueError,
             "MultiheadAttention: query should be unbatched 2D or batched 3D tensor but received "
             "{}-D query tensor",
             query_in.dim());
  FSDP_CHECK(key_in.dim() == query_in.dim() && value_in.dim() == query_in.dim(), ValueError,
             "MultiheadAttention: query, key and value must have the same number of dimensions "
             "(got {}, {} and {})",
             query_in.dim(), key_in.dim(), value_in.dim());
  FSDP_CHECK(!a.is_causal || a.attn_mask.defined(), RuntimeError,
             "Need attn_mask if specifying the is_causal hint. You may use the Transformer module "
             "method `generate_square_subsequent_mask` to create this mask.");
  // Work in (L, N, E) layout, as torch's functional form does (batch_first's packed causal path
  // excepted: batch_major_rows below).
  Tensor q = query_in, k = key_in, v = value_in, kpm = a.key_padding_mask;
  if (batched && batch_first) {
    q = q.transpose(0, 1);
    k = k.transpose(0, 1);
    v = v.transpose(0, 1);
  }
  if (!batched) {
    q = q.unsqueeze(1);
    k = k.unsqueeze(1);
    v = v.unsqueeze(1);
    if (kpm.defined()) kpm = kpm.unsqueeze(0);
  }
  const std::int64_t tgt_len = q.size(0), bsz = q.size(1), E = embed_dim, H = num_heads;
  FSDP_CHECK(q.size(2) == E, AssertionError, "was expecting embedding dimension of {}, but got {}",
             E, q.size(2));
  FSDP_CHECK(k.size(0) == v.size(0) && k.size(1) == v.size(1), AssertionError,
             "key shape {} does not match value shape {}", shape_str(key_in.shape()),
             shape_str(value_in.shape()));

  // Input projections.
  const Tensor& b = param("in_proj_bias");
  auto bias_part = [&](std::int64_t i) { return b.defined() ? b.narrow(0, i * E, E) : Tensor(); };
  Tensor wq, wk, wv;
  if (qkv_same_embed_dim) {
    const Tensor& w = param("in_proj_weight");
    wq = w.narrow(0, 0, E);
    wk = w.narrow(0, E, E);
    wv = w.narrow(0, 2 * E, E);
  } else {
    wq = param("q_proj_weight");
    wk = param("k_proj_weight");
    wv = param("v_proj_weight");
  }
  const bool self_attention =
      qkv_same_embed_dim && query_in.is_same(key_in) && key_in.is_same(value_in);
  // split_heads and masked_softmax are core ops like any other (dispatch modes and meta tensors
  // see them), so tracing, fake mode and selective checkpointing take the fast path too.
  const bool fused_heads = self_attention && !has_parameter("bias_k") && !add_zero_attn &&
                           is_floating(q.dtype()) && param("in_proj_weight").dtype() == q.dtype();
  const double p = is_training() ? dropout : 0.0;
  // torch's multi_head_attention_forward: with no key padding mask and no weights asked for, the
  // is_causal hint stands for attn_mask (scaled_dot_product_attention's is_causal; the fused
  // causal kernels, no (L, S) scores). Not with bias_k or add_zero_attn, whose extra key breaks
  // the top-left causal shape, nor with dropout. With the fused heads (GPT's blocks), the heads
  // are read from the projection and written merged in place (core/ops/packed_causal_attention.h).
  const bool causal_hint_asked =
      a.is_causal && !a.key_padding_mask.defined() && !a.need_weights && p == 0.0;
  const bool packed_causal = fused_heads && causal_hint_asked;
  // batch_first's packed causal path (GPT's blocks) keeps the caller's (N, L) row order: the
  // in-projection reads the (N, L, E) input in place, the attention reads the (N, L, 3E) product
  // as an (L, N, 3E) view and writes its output N-major, out_proj reads those rows in place and
  // the output is (N, L, E) as it comes: no transposition copy forward or backward.
  const bool batch_major_rows = packed_causal && batched && batch_first;
  Tensor proj;
  if (self_attention) {
    // Self-attention: one product with the packed weight, as torch's _in_projection_packed.
    proj = batch_major_rows ? linear(query_in, param("in_proj_weight"), b).transpose(0, 1)
                            : linear(q, param("in_proj_weight"), b);
    if (packed_causal) {
      // q, k and v stay parts of proj.
    } else if (fused_heads) {
      // Straight into heads, q scaled: one pass forward and backward (core/ops/attention_heads.h).
      std::vector<Tensor> qkv = split_heads(proj, 3, H, std::sqrt(static_cast<double>(head_dim)));
      q = qkv[0];
      k = qkv[1];
      v = qkv[2];
    } else {
      q = proj.narrow(-1, 0, E);
      k = proj.narrow(-1, E, E);
      v = proj.narrow(-1, 2 * E, E);
    }
  } else {
    q = linear(q, wq, bias_part(0));
    k = linear(k, wk, bias_part(1));
    v = linear(v, wv, bias_part(2));
  }

  const std::int64_t kv_len = packed_causal ? tgt_len : fused_heads ? k.size(1) : k.size(0);  // S
  // Masks as additive float masks: attn_mask (1 or N*H, L, S).
  Tensor mask = additive_mask(a.attn_mask, q.dtype(), "attn_mask");
  if (mask.defined()) {
    if (mask.dim() == 2) {
      FSDP_CHECK(mask.size(0) == tgt_len && mask.size(1) == kv_len, RuntimeError,
                 "The shape of the 2D attn_mask is {}, but should be ({}, {}).",
                 shape_str(mask.shape()), tgt_len, kv_len);
      mask = mask.unsqueeze(0);
    } else if (mask.dim() == 3) {
      FSDP_CHECK(mask.size(0) == bsz * H && mask.size(1) == tgt_len && mask.size(2) == kv_len,
                 RuntimeError, "The shape of the 3D attn_mask is {}, but should be ({}, {}, {}).",
                 shape_str(mask.shape()), bsz * H, tgt_len, kv_len);
    } else {
      throw RuntimeError(fmt::format("attn_mask's dimension {} is not supported", mask.dim()));
    }
  }
  kpm = additive_mask(kpm, q.dtype(), "key_padding_mask");
  if (packed_causal) {
    const Tensor merged = packed_causal_attention(proj, H, 1.0 / std::sqrt(double(head_dim)));
    if (batch_major_rows)  // merged is an (L, N, E) view of (N, L, E) rows
      return finish(merged.transpose(0, 1).reshape({bsz * tgt_len, E}), Tensor(), batched, tgt_len,
                    bsz, tgt_len, a, /*batch_major_rows=*/true);
    return finish(merged.reshape({tgt_len * bsz, E}), Tensor(), batched, tgt_len, bsz, tgt_len, a);
  }

  if (has_parameter("bias_k")) {
    k = cat({k, param("bias_k").expand({1, bsz, E})}, 0);
    v = cat({v, param("bias_v").expand({1, bsz, E})}, 0);
    mask = pad_last(mask);
    kpm = pad_last(kpm);
  }
  // Heads: (L, N, E) -> (N*H, L, head_dim).
  if (!fused_heads) {
    q = q.contiguous().view({tgt_len, bsz * H, head_dim}).transpose(0, 1);
    k = k.contiguous().view({k.size(0), bsz * H, head_dim}).transpose(0, 1);
    v = v.contiguous().view({v.size(0), bsz * H, head_dim}).transpose(0, 1);
  }
  if (add_zero_attn) {
    Tensor z = zeros({bsz * H, 1, head_dim}, TensorOptions(k.dtype(), k.device()));
    k = cat({k, z}, 1);
    v = cat({v, z}, 1);
    mask = pad_last(mask);
    kpm = pad_last(kpm);
  }
  const std::int64_t src_len = k.size(1);
  if (kpm.defined()) {
    FSDP_CHECK(kpm.dim() == 2 && kpm.size(0) == bsz && kpm.size(1) == src_len, AssertionError,
               "expecting key_padding_mask shape of ({}, {}), but got {}", bsz, src_len,
               shape_str(kpm.shape()));
    kpm =
        kpm.view({bsz, 1, 1, src_len}).expand({bsz, H, 1, src_len}).reshape({bsz * H, 1, src_len});
    mask = mask.defined() ? add(mask, kpm) : kpm;
  }

  // Scaled dot-product attention.
  if (!fused_heads) q = div(q, std::sqrt(static_cast<double>(head_dim)));
  // Long sequences without weights or dropout: keys in blocks, no (L, S) scores held.
  const DType dt = q.dtype();
  const bool blocked = !a.need_weights && p == 0.0 && src_len > kBlockedAttentionMinKeys &&
                       (dt == DType::Float32 || dt == DType::Float64) && !q.is_meta() &&
                       !dispatch::any_mode_active() &&
                       (!mask.defined() || (mask.dtype() == dt && !mask.requires_grad()));
  const bool causal_hint = causal_hint_asked && !has_parameter("bias_k") && !add_zero_attn &&
                           src_len == tgt_len && is_floating(dt);
  Tensor attn, out;
  if (causal_hint) {
    const Shape heads{bsz, H, tgt_len, head_dim};
    out = scaled_dot_product_attention(q.reshape(heads), k.reshape(heads), v.reshape(heads), {},
                                       true, 1.0)  // q is scaled already
              .reshape({bsz * H, tgt_len, head_dim});
  } else if (blocked) {
    out = blocked_attention(q, k, v, mask);
  } else {
    Tensor scores = bmm(q, k.transpose(1, 2));
    // A (1 or N*H, L, S) mask is added inside the softmax (one tensor and pass fewer).
    const bool fuse_mask = mask.defined() && mask.dim() == 3 && mask.size(1) == tgt_len &&
                           mask.dtype() == dt && !mask.requires_grad() && is_floating(dt);
    if (fuse_mask) {
      attn = masked_softmax(scores, mask);
    } else {
      if (mask.defined()) scores = add(mask, scores);
      attn = softmax(scores, -1);
    }
    if (p > 0.0) attn = fsdp::dropout(attn, p, true);
    out = bmm(attn, v);  // (N*H, L, head_dim)
  }
  return finish(out.transpose(0, 1).contiguous().view({tgt_len * bsz, E}), attn, batched, tgt_len,
                bsz, src_len, a);
}

std::pair<Tensor, Tensor> MultiheadAttention::finish(const Tensor& merged, const Tensor& attn,
                                                     bool batched, std::int64_t tgt_len,
                                                     std::int64_t bsz, std::int64_t src_len,
                                                     const AttentionArgs& a,
                                                     bool batch_major_rows) {
  // Through the slot: a wrapped out_proj runs through its wrapper. Its rows are (l, n) ordered,
  // or (n, l) on batch_first's packed causal path (batch_major_rows), where they stay the
  // caller's.
  Tensor out = call_child("out_proj", merged);
  out =
      batch_major_rows ? out.view({bsz, tgt_len, embed_dim}) : out.view({tgt_len, bsz, embed_dim});
  Tensor weights;
  if (a.need_weights) {
    weights = attn.view({bsz, num_heads, tgt_len, src_len});
    if (a.average_attn_weights) weights = div(sum(weights, {1}), static_cast<double>(num_heads));
    if (!batched) weights = weights.squeeze(0);
  }
  if (!batched)
    out = out.squeeze(1);
  else if (batch_first && !batch_major_rows)
    out = out.transpose(0, 1);
  return {out, weights};
}

}  // namespace fsdp::nn
