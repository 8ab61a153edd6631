// Forward and backward against PyTorch (nn_layers.json): each case loads torch's state dict
// into our module, runs the same inputs, and compares the output, the attention weights, the
// input and parameter gradients of sum(output * grad_output), and buffers afterwards.
#include <boost/test/unit_test.hpp>

#include "core/nn/nn.h"
#include "core/ops.h"
#include "tests/support/fixture.h"

using namespace fsdp;
using namespace fsdp::nn;
using fsdp::testing::close;
using fsdp::testing::Fixture;

namespace {
const Fixture& layers() {
  static const Fixture f("nn_layers.json");
  return f;
}

std::vector<std::string> keys_with_prefix(const std::string& c, const std::string& prefix) {
  std::vector<std::string> out;
  for (auto& [k, v] : layers().json().at("cases").at(c).items())
    if (k.rfind(prefix, 0) == 0) out.push_back(k.substr(prefix.size()));
  return out;
}

// Runs case `c` on module `m` (built in float32 with torch's constructor arguments).
void check_case(const std::string& c, const ModulePtr& m, bool train = false) {
  BOOST_TEST_CONTEXT(c) {
    const bool f64 = layers().value(c, "output").at("dtype") == "float64";
    const double rtol = f64 ? 1e-10 : 1e-5, atol = f64 ? 1e-12 : 1e-6;
    if (f64) m->to(DType::Float64);
    m->train(train);
    std::vector<std::pair<std::string, Tensor>> state;
    for (auto& k : keys_with_prefix(c, "state."))
      state.emplace_back(k, layers().tensor(c, "state." + k));
    m->load_state_dict(state);
    std::vector<Tensor> inputs;
    for (int i = 0; layers().has(c, "input" + std::to_string(i)); ++i) {
      Tensor x = layers().tensor(c, "input" + std::to_string(i));
      if (x.is_floating_point()) x.requires_grad_(true);
      inputs.push_back(x);
    }
    Args args;
    for (auto a : layers().value(c, "aliases")) args.positional.emplace_back(inputs[a.get<int>()]);
    for (auto& k : keys_with_prefix(c, "kw.")) args.kwargs[k] = layers().tensor(c, "kw." + k);
    if (layers().json().at("cases").at(c).contains("kw_flags"))
      for (auto& [k, v] : layers().value(c, "kw_flags").items()) args.kwargs[k] = v.get<bool>();

    Value out = (*m)(args);
    Tensor y = out.is_tuple() ? out[0].tensor() : out.tensor();
    BOOST_TEST(close(y, layers().tensor(c, "output"), rtol, atol, "output") == "");
    if (layers().has(c, "weights"))
      BOOST_TEST(close(out[1].tensor(), layers().tensor(c, "weights"), rtol, atol, "weights") ==
                 "");
    mul(y, layers().tensor(c, "grad_output")).sum().backward();
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      std::string key = "grad_input" + std::to_string(i);
      if (layers().has(c, key))
        BOOST_TEST(close(inputs[i].grad(), layers().tensor(c, key), rtol, atol, key) == "");
    }
    auto params = m->named_parameters();
    auto grads = keys_with_prefix(c, "grad.");
    BOOST_TEST(grads.size() == params.size());
    for (auto& [n, p] : params)
      BOOST_TEST(close(p.grad(), layers().tensor(c, "grad." + n), rtol, atol, "grad." + n) == "");
    for (auto& [n, b] : m->named_buffers())
      BOOST_TEST(close(b, layers().tensor(c, "after." + n), rtol, atol, "after." + n) == "");
  }
}

template <typename M, typename... A>
ModulePtr make(A&&... a) {
  return std::make_shared<M>(std::forward<A>(a)...);
}
}  // namespace

BOOST_AUTO_TEST_CASE(linear_layer) {
  for (const char* c : {"linear_f32", "linear_f64"}) check_case(c, make<Linear>(5, 4));
  check_case("linear_nobias", make<Linear>(4, 3, false));
}

BOOST_AUTO_TEST_CASE(layer_norm_layer) {
  for (const char* c : {"layer_norm_f32", "layer_norm_f64"}) check_case(c, make<LayerNorm>(6));
  check_case("layer_norm_2d", make<LayerNorm>(Shape{3, 4}, 1e-3));
}

BOOST_AUTO_TEST_CASE(embedding_layer) {
  check_case("embedding", make<Embedding>(10, 4, 2));
}

BOOST_AUTO_TEST_CASE(batch_norm_layers) {
  check_case("bn1d_train_2d", make<BatchNorm1d>(3), true);
  check_case("bn1d_train_3d", make<BatchNorm1d>(3, 1e-5, std::nullopt), true);
  check_case("bn2d_eval", make<BatchNorm2d>(3), false);
  check_case("bn3d_train", make<BatchNorm3d>(2, 1e-5, 0.1, false), true);
  check_case("bn1d_untracked", make<BatchNorm1d>(3, 1e-5, 0.1, true, false), false);
}

BOOST_AUTO_TEST_CASE(multihead_attention) {
  for (const char* c : {"mha_self_f32", "mha_self_f64"})
    check_case(c, make<MultiheadAttention>(8, 2));
  check_case("mha_kdim_batch_first",
             make<MultiheadAttention>(
                 8, 2, MultiheadAttentionOptions{.kdim = 4, .vdim = 6, .batch_first = true}));
  check_case("mha_bool_masks", make<MultiheadAttention>(8, 2));
  check_case("mha_float_mask_per_head", make<MultiheadAttention>(8, 4));
  check_case("mha_bias_kv_zero_attn",
             make<MultiheadAttention>(
                 8, 2, MultiheadAttentionOptions{.add_bias_kv = true, .add_zero_attn = true}));
  check_case("mha_unbatched_nobias", make<MultiheadAttention>(6, 3, 0.0, false));
}

BOOST_AUTO_TEST_CASE(transformer_layers) {
  TransformerLayerOptions o{.dim_feedforward = 16, .dropout = 0.0};
  for (const char* c : {"encoder_layer_f32", "encoder_layer_f64"})
    check_case(c, make<TransformerEncoderLayer>(8, 2, o));
  TransformerLayerOptions g = o;
  g.activation = "gelu";
  g.norm_first = true;
  g.batch_first = true;
  check_case("encoder_layer_gelu_norm_first", make<TransformerEncoderLayer>(8, 2, g));
  check_case("decoder_layer", make<TransformerDecoderLayer>(8, 2, o));
  check_case("transformer", make<Transformer>(TransformerOptions{.d_model = 8,
                                                                 .nhead = 2,
                                                                 .num_encoder_layers = 1,
                                                                 .num_decoder_layers = 1,
                                                                 .dim_feedforward = 16,
                                                                 .dropout = 0.0}));
}

BOOST_AUTO_TEST_CASE(sequential_and_activations) {
  check_case("sequential_eval", make<Sequential>(std::vector<ModulePtr>{
                                    make<Linear>(4, 6), make<ReLU>(), make<Linear>(6, 5),
                                    make<GELU>(), make<Dropout>(0.3), make<Linear>(5, 2)}));
  check_case("gelu_tanh", make<GELU>("tanh"));
}
