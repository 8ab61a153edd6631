#include "models/functional.h"

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/ops.h"

namespace fsdp::models {

// replaced by core's fused op
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  FSDP_CHECK(x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(-1), ValueError,
             "rms_norm: weight {} does not match the last dimension of input {}",
             shape_str(weight.shape()), shape_str(x.shape()));
  const bool upcast = x.dtype() != DType::Float32 && x.dtype() != DType::Float64;
  const Tensor x32 = upcast ? to_dtype(x, DType::Float32) : x;
  const Tensor var = mean(mul(x32, x32), {-1}, /*keepdim=*/true);
  Tensor y = mul(x32, rsqrt(add(var, eps)));
  if (upcast) y = to_dtype(y, x.dtype());
  return mul(weight, y);
}

// replaced by core's fused op
Tensor silu(const Tensor& a) {
  return mul(a, sigmoid(a));
}

// replaced by core's fused op
Tensor apply_rotary(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  const std::int64_t d = x.size(-1);
  FSDP_CHECK(x.dim() == 4 && d % 2 == 0 && cos.dim() == 2 && cos.shape() == sin.shape() &&
                 cos.size(0) == x.size(2) && cos.size(1) == d,
             ValueError,
             "apply_rotary: expected x (B, H, S, D) with even D and cos/sin (S, D), got x {} "
             "cos {} sin {}",
             shape_str(x.shape()), shape_str(cos.shape()), shape_str(sin.shape()));
  const Tensor rotated = cat({neg(narrow(x, -1, d / 2, d / 2)), narrow(x, -1, 0, d / 2)}, -1);
  return add(mul(x, cos), mul(rotated, sin));
}

// replaced by core's fused op
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask, bool is_causal,
                                    std::optional<double> scale, bool enable_gqa) {
  FSDP_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && k.shape() == v.shape() &&
                 q.size(0) == k.size(0) && q.size(3) == k.size(3),
             ValueError,
             "scaled_dot_product_attention: expected q (B, H, L, D), k and v (B, Hkv, S, D), got "
             "q {} k {} v {}",
             shape_str(q.shape()), shape_str(k.shape()), shape_str(v.shape()));
  const std::int64_t heads = q.size(1), kv_heads = k.size(1);
  Tensor key = k, value = v;
  if (heads != kv_heads) {
    FSDP_CHECK(enable_gqa && heads % kv_heads == 0, ValueError,
               "scaled_dot_product_attention: {} query heads and {} key/value heads need "
               "enable_gqa and a multiple",
               heads, kv_heads);
    // repeat_kv: query head n reads kv head n / (heads / kv_heads).
    const auto repeat = [&](const Tensor& t) {
      const Shape& s = t.shape();
      return reshape(expand(unsqueeze(t, 2), {s[0], kv_heads, heads / kv_heads, s[2], s[3]}),
                     {s[0], heads, s[2], s[3]});
    };
    key = repeat(k);
    value = repeat(v);
  }
  const double s = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  Tensor scores = mul(matmul(q, transpose(key, -2, -1)), s);
  const std::int64_t L = q.size(2), S = k.size(2);
  if (is_causal && !q.is_meta()) {  // a meta tensor has no values to mask
    std::vector<double> keep(static_cast<std::size_t>(L * S));
    for (std::int64_t i = 0; i < L; ++i)
      for (std::int64_t j = 0; j < S; ++j) keep[static_cast<std::size_t>(i * S + j)] = j > i;
    scores = masked_fill(scores, from_vector(keep, {L, S}, TensorOptions(DType::Bool, q.device())),
                         -INFINITY);
  }
  if (attn_mask.defined()) {
    scores = attn_mask.dtype() == DType::Bool
                 ? masked_fill(scores, logical_not(attn_mask), -INFINITY)
                 : add(scores, attn_mask);
  }
  return matmul(softmax(scores, -1), value);
}

// replaced by core's op
Tensor rotary_inv_freq(std::int64_t dim, double theta) {
  FSDP_CHECK(dim > 0 && dim % 2 == 0, ValueError, "rotary_inv_freq: dim {} must be even and > 0",
             dim);
  std::vector<double> inv(static_cast<std::size_t>(dim / 2));
  const float base = static_cast<float>(theta);
  for (std::int64_t i = 0; i < dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    inv[static_cast<std::size_t>(i)] = 1.0f / std::pow(base, exponent);
  }
  return from_vector(inv, {dim / 2}, DType::Float32);
}

// replaced by core's op
std::pair<Tensor, Tensor> rotary_cos_sin(const Tensor& inv_freq, std::int64_t p0, std::int64_t S,
                                         DType dtype) {
  const std::int64_t half = inv_freq.numel(), dim = 2 * half;
  if (inv_freq.is_meta())
    return {empty({S, dim}, TensorOptions(dtype, inv_freq.device())),
            empty({S, dim}, TensorOptions(dtype, inv_freq.device()))};
  const std::vector<double> inv = inv_freq.to_vector();
  std::vector<double> c(static_cast<std::size_t>(S * dim)), s(c.size());
  for (std::int64_t p = 0; p < S; ++p)
    for (std::int64_t j = 0; j < half; ++j) {
      const float f = static_cast<float>(p0 + p) * static_cast<float>(inv[std::size_t(j)]);
      const auto at = static_cast<std::size_t>(p * dim + j);
      c[at] = c[at + std::size_t(half)] = std::cos(f);
      s[at] = s[at + std::size_t(half)] = std::sin(f);
    }
  return {from_vector(c, {S, dim}, TensorOptions(dtype, inv_freq.device())),
          from_vector(s, {S, dim}, TensorOptions(dtype, inv_freq.device()))};
}

}  // namespace fsdp::models
