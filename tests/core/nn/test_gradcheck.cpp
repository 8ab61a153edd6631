// Finite-difference checks in float64 of the composite layers' gradients (attention with
// masks, transformer layers), independent of the PyTorch fixtures.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <functional>

#include "core/autograd.h"
#include "core/nn/nn.h"
#include "core/ops.h"

using namespace fsdp;
using namespace fsdp::nn;

namespace {
// Compares d loss / d t from autograd with central differences on a few elements of t.
void gradcheck(const std::function<Tensor()>& loss_fn, const Tensor& t, const std::string& what) {
  BOOST_TEST_CONTEXT(what) {
    if (t.grad().defined()) t.set_grad(Tensor());
    loss_fn().backward();
    std::vector<double> analytic = t.grad().to_vector();
    const double h = 1e-6;
    double* data = t.data<double>();
    const std::int64_t n = t.numel();
    for (std::int64_t i = 0; i < n; i += std::max<std::int64_t>(1, n / 7)) {
      autograd::NoGradGuard no_grad;
      const double orig = data[i];
      data[i] = orig + h;
      double up = loss_fn().item();
      data[i] = orig - h;
      double down = loss_fn().item();
      data[i] = orig;
      double numeric = (up - down) / (2 * h);
      BOOST_TEST(std::abs(numeric - analytic[static_cast<std::size_t>(i)]) <=
                 1e-6 + 1e-5 * std::abs(numeric));
    }
  }
}
}  // namespace

BOOST_AUTO_TEST_CASE(attention_gradients_match_finite_differences) {
  manual_seed(4);
  auto mha = std::make_shared<MultiheadAttention>(
      6, 2, MultiheadAttentionOptions{.add_bias_kv = true, .kdim = 4, .vdim = 5});
  mha->to(DType::Float64);
  TensorOptions f64(DType::Float64);
  Tensor q = randn({3, 2, 6}, f64), k = randn({4, 2, 4}, f64), v = randn({4, 2, 5}, f64);
  q.requires_grad_(true);
  k.requires_grad_(true);
  Tensor w = randn({3, 2, 6}, f64);
  Tensor kpm = from_vector(std::vector<double>{0, 0, 1, 0, 0, 0, 0, 0}, {2, 4}).to(DType::Bool);
  Tensor mask = randn({3, 4}, f64);
  auto loss = [&] {
    AttentionArgs a{.key_padding_mask = kpm, .attn_mask = mask};
    auto [out, weights] = mha->forward(q, k, v, a);
    return add(mul(out, w).sum(), mul(weights, weights).sum());
  };
  gradcheck(loss, q, "query");
  gradcheck(loss, k, "key");
  gradcheck(loss, mha->param("k_proj_weight"), "k_proj_weight");
  gradcheck(loss, mha->param("bias_v"), "bias_v");
  gradcheck(loss, mha->child("out_proj")->param("weight"), "out_proj.weight");
}

BOOST_AUTO_TEST_CASE(transformer_layer_gradients_match_finite_differences) {
  manual_seed(5);
  TransformerLayerOptions o{.dim_feedforward = 12, .dropout = 0.0, .activation = "gelu"};
  auto enc = std::make_shared<TransformerEncoderLayer>(8, 2, o);
  auto dec = std::make_shared<TransformerDecoderLayer>(8, 2, o);
  enc->to(DType::Float64);
  dec->to(DType::Float64);
  TensorOptions f64(DType::Float64);
  Tensor src = randn({4, 2, 8}, f64), tgt = randn({3, 2, 8}, f64);
  src.requires_grad_(true);
  Tensor w = randn({3, 2, 8}, f64);
  Tensor causal = Transformer::generate_square_subsequent_mask(3, f64);
  auto loss = [&] {
    Tensor memory = enc->forward(src);
    return mul(dec->forward(tgt, memory, DecoderArgs{.tgt_mask = causal}), w).sum();
  };
  gradcheck(loss, src, "src");
  gradcheck(loss, enc->child("linear1")->param("weight"), "encoder linear1.weight");
  gradcheck(loss, enc->child("norm2")->param("bias"), "encoder norm2.bias");
  gradcheck(loss, dec->child("multihead_attn")->param("in_proj_weight"), "decoder in_proj");
}
