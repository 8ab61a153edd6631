#include "models/attention.h"

#include <optional>
#include <vector>

#include "core/ops.h"

namespace fsdp::models {

namespace {

// true where query i (at absolute position past + i) sees key j: j <= past + i, and with a
// sliding window w also j > past + i - w (transformers' sliding_window_overlay).
Tensor causal_mask(std::int64_t past, std::int64_t S, std::optional<std::int64_t> window,
                   Device device) {
  std::vector<double> keep(static_cast<std::size_t>(S * (past + S)));
  for (std::int64_t i = 0; i < S; ++i)
    for (std::int64_t j = 0; j < past + S; ++j)
      keep[static_cast<std::size_t>(i * (past + S) + j)] =
          j <= past + i && (!window || j > past + i - *window);
  return from_vector(keep, {S, past + S}, TensorOptions(DType::Bool, device));
}

}  // namespace

Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                        double dropout_p, std::optional<std::int64_t> sliding_window,
                        std::optional<double> softcap) {
  const std::int64_t S = q.size(2), past = k.size(2) - S;
  const bool gqa = q.size(1) != k.size(1);
  // A window only masks keys once the sequence is longer than it.
  if (sliding_window && past + S <= *sliding_window) sliding_window.reset();
  if (dropout_p > 0.0 || softcap) {  // the scores themselves are needed: written out
    Tensor key = k, value = v;
    if (gqa) {
      const std::int64_t rep = q.size(1) / k.size(1);
      const auto repeat = [&](const Tensor& t) {
        const Shape& s = t.shape();
        return reshape(expand(unsqueeze(t, 2), {s[0], s[1], rep, s[2], s[3]}),
                       {s[0], s[1] * rep, s[2], s[3]});
      };
      key = repeat(k);
      value = repeat(v);
    }
    Tensor scores = mul(matmul(q, transpose(key, -2, -1)), scale);
    if (softcap) scores = mul(tanh(div(scores, *softcap)), *softcap);
    if ((S > 1 || sliding_window) && !q.is_meta())
      scores = masked_fill(scores, logical_not(causal_mask(past, S, sliding_window, q.device())),
                           -INFINITY);
    const Tensor probs = softmax(scores, -1);
    return matmul(dropout_p > 0.0 ? dropout(probs, dropout_p, /*training=*/true) : probs, value);
  }
  if (q.is_meta()) return scaled_dot_product_attention(q, k, v, {}, past == 0, scale, gqa);
  if (!sliding_window && past == 0)
    return scaled_dot_product_attention(q, k, v, {}, true, scale, gqa);
  if (!sliding_window && S == 1)
    return scaled_dot_product_attention(q, k, v, {}, false, scale, gqa);
  return scaled_dot_product_attention(q, k, v, causal_mask(past, S, sliding_window, q.device()),
                                      false, scale, gqa);
}

std::pair<Tensor, Tensor> with_history(const nn::Value& layer_past, Tensor k, Tensor v) {
  if (layer_past.is_none()) return {std::move(k), std::move(v)};
  return {cat({layer_past[0].tensor(), k}, 2), cat({layer_past[1].tensor(), v}, 2)};
}

Tensor merge_heads(const Tensor& x) {
  return reshape(transpose(x, 1, 2), {x.size(0), x.size(2), x.size(1) * x.size(3)});
}

Tensor split_heads(const Tensor& x, std::int64_t heads) {
  return transpose(reshape(x, {x.size(0), x.size(1), heads, x.size(2) / heads}), 1, 2);
}

}  // namespace fsdp::models
