#include "models/rope.h"

#include <cmath>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "models/causal_lm.h"

namespace fsdp::models {

Tensor rope_inv_freq(const RopeParameters& rope, std::int64_t head_dim) {
  const Tensor base = rotary_inv_freq(head_dim, rope.rope_theta);
  if (rope.rope_type == "default") return base;
  std::vector<double> inv = base.to_vector();
  const auto f32 = [](double v) { return static_cast<float>(v); };
  const float factor = f32(rope.factor);
  for (double& x : inv) {
    const float v = f32(x);
    if (rope.rope_type == "linear") {
      x = v / factor;
      continue;
    }
    // _compute_llama3_parameters: wavelen = 2*pi / inv (torch: reciprocal, then * 2*pi); bands
    // compared in float32; the smooth band mixes (1 - s) * inv / factor + s * inv.
    const float lf = f32(rope.low_freq_factor), hf = f32(rope.high_freq_factor);
    const double old_len = static_cast<double>(rope.original_max_position_embeddings);
    const float low_wl = f32(old_len / rope.low_freq_factor);
    const float high_wl = f32(old_len / rope.high_freq_factor);
    const float wl = (1.0f / v) * f32(2 * M_PI);
    const float scaled = wl > low_wl ? v / factor : v;
    const bool medium = !(wl < high_wl) && !(wl > low_wl);
    if (medium) {
      const float s = ((1.0f / wl) * f32(old_len) - lf) / (hf - lf);
      x = (1.0f - s) * v / factor + s * v;
    } else {
      x = scaled;
    }
  }
  return from_vector(inv, base.shape(), DType::Float32);
}

LlamaRotaryEmbedding::LlamaRotaryEmbedding(const LlamaConfig& c, TensorOptions options,
                                           const std::string& cls)
    : Module(hf_class(cls)), rope(c.rope), head_dim(c.head_dim) {
  const TensorOptions f32 = TensorOptions(DType::Float32, options.device);
  register_buffer("inv_freq", empty({head_dim / 2}, f32), /*persistent=*/false);
  register_buffer("original_inv_freq", empty({head_dim / 2}, f32), /*persistent=*/false);
  reset_parameters();
}

void LlamaRotaryEmbedding::reset_parameters() {
  const Tensor& inv = buffer("inv_freq");
  if (inv.is_meta()) return;
  autograd::NoGradGuard no_grad;
  const Tensor values = rope_inv_freq(rope, head_dim);
  Tensor(inv).copy_(values);
  Tensor(buffer("original_inv_freq")).copy_(values);
}

nn::Value LlamaRotaryEmbedding::forward(const nn::Args& args) {
  const Tensor& x = args.tensor(0);
  const std::int64_t past = args.get(1, "past_length", std::int64_t{0}).to_int();
  auto [cos, sin] = rotary_cos_sin(buffer("inv_freq"), past, x.size(1), x.dtype());
  return nn::Value(std::vector<nn::Value>{cos, sin});
}

}  // namespace fsdp::models
