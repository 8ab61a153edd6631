// The layers GPT-2 and Llama add to torch.nn's: forward against hf-models.md's formulas and
// gradients against float64 central differences (RMSNorm, RoPE, SiLU/SwiGLU, the activations,
// grouped-query and cached causal attention, Conv1D, whole models); meta-device construction
// and transformers' init; the causal-LM loss; dropout only in training.
#define BOOST_TEST_MODULE models_layers
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <functional>

#include "core/autograd.h"
#include "core/device.h"
#include "core/ops.h"
#include "models/activation.h"
#include "models/attention.h"
#include "models/auto_model.h"
#include "models/conv1d.h"
#include "models/gemma.h"
#include "models/gpt2.h"
#include "models/llama.h"
#include "tests/support/fixture.h"

using namespace fsdp;
using namespace fsdp::models;

namespace {

const TensorOptions f64(DType::Float64);

Tensor leaf(const Shape& shape, std::uint64_t seed) {
  Generator g(seed);
  Tensor t = randn(shape, f64, &g);
  t.requires_grad_(true);
  return t;
}

// d loss / d t by autograd against central differences, every element of t.
void gradcheck(const std::function<Tensor()>& loss_fn, const Tensor& t, const std::string& what) {
  BOOST_TEST_CONTEXT(what) {
    if (t.grad().defined()) t.set_grad(Tensor());
    loss_fn().backward();
    const std::vector<double> analytic = t.grad().to_vector();
    const double h = 1e-6;
    double* data = t.data<double>();
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      autograd::NoGradGuard no_grad;
      const double orig = data[i];
      data[i] = orig + h;
      const double up = loss_fn().item();
      data[i] = orig - h;
      const double down = loss_fn().item();
      data[i] = orig;
      const double numeric = (up - down) / (2 * h);
      BOOST_TEST(
          std::abs(numeric - analytic[std::size_t(i)]) <= 1e-6 + 1e-5 * std::abs(numeric),
          "element " << i << ": numeric " << numeric << " autograd " << analytic[std::size_t(i)]);
    }
  }
}

// sum(f(..) * w) for a fixed random w: every output element weighs in differently.
Tensor weighted(const Tensor& out, std::uint64_t seed) {
  Generator g(seed);
  return sum(mul(out, randn(out.shape(), f64, &g)));
}

LlamaConfig tiny_llama() {
  return std::get<LlamaConfig>(parse_config({{"model_type", "llama"},
                                             {"hidden_size", 8},
                                             {"num_attention_heads", 2},
                                             {"num_key_value_heads", 1},
                                             {"num_hidden_layers", 2},
                                             {"intermediate_size", 12},
                                             {"vocab_size", 11},
                                             {"pad_token_id", 3},
                                             {"initializer_range", 0.5},
                                             {"rope_parameters",
                                              {{"rope_type", "llama3"},
                                               {"rope_theta", 100.0},
                                               {"factor", 4.0},
                                               {"low_freq_factor", 1.0},
                                               {"high_freq_factor", 4.0},
                                               {"original_max_position_embeddings", 8}}}},
                                            "tiny_llama"));
}

GemmaConfig tiny_gemma3() {
  return std::get<GemmaConfig>(
      parse_config({{"model_type", "gemma3_text"},
                    {"hidden_size", 8},
                    {"num_attention_heads", 2},
                    {"num_key_value_heads", 1},
                    {"head_dim", 6},
                    {"num_hidden_layers", 2},
                    {"sliding_window_pattern", 2},
                    {"intermediate_size", 12},
                    {"vocab_size", 11},
                    {"initializer_range", 0.5},
                    {"rope_local_base_freq", 100.0},
                    {"rope_scaling", {{"rope_type", "linear"}, {"factor", 4.0}}}},
                   "tiny_gemma3"));
}

GemmaConfig tiny_gemma2() {
  return std::get<GemmaConfig>(parse_config({{"model_type", "gemma2"},
                                             {"hidden_size", 8},
                                             {"num_attention_heads", 2},
                                             {"num_key_value_heads", 1},
                                             {"head_dim", 6},
                                             {"num_hidden_layers", 2},
                                             {"intermediate_size", 12},
                                             {"vocab_size", 11},
                                             {"initializer_range", 0.5},
                                             {"rope_theta", 100.0}},
                                            "tiny_gemma2"));
}

GPT2Config tiny_gpt2() {
  return std::get<GPT2Config>(parse_config({{"model_type", "gpt2"},
                                            {"n_embd", 8},
                                            {"n_head", 2},
                                            {"n_layer", 2},
                                            {"n_positions", 8},
                                            {"vocab_size", 11},
                                            {"initializer_range", 0.5}},
                                           "tiny_gpt2"));
}

}  // namespace

BOOST_AUTO_TEST_CASE(rms_norm_is_the_formula_and_its_gradients_match) {
  const Tensor x = leaf({2, 3, 5}, 1), w = leaf({5}, 2);
  const Tensor y = rms_norm(x, w, 1e-6);
  const auto xs = x.to_vector(), ws = w.to_vector(), ys = y.to_vector();
  for (int row = 0; row < 6; ++row) {
    double ms = 0;
    for (int j = 0; j < 5; ++j) ms += xs[row * 5 + j] * xs[row * 5 + j] / 5;
    for (int j = 0; j < 5; ++j)
      BOOST_TEST(ys[row * 5 + j] == ws[j] * xs[row * 5 + j] / std::sqrt(ms + 1e-6),
                 boost::test_tools::tolerance(1e-12));
  }
  const auto loss = [&] { return weighted(rms_norm(x, w, 1e-6), 3); };
  gradcheck(loss, x, "x");
  gradcheck(loss, w, "weight");
}

BOOST_AUTO_TEST_CASE(rotary_pairs_j_with_j_plus_half_and_its_gradient_matches) {
  // D = 4: out[j] = x[j] c_j - x[j+2] s_j, out[j+2] = x[j+2] c_j + x[j] s_j.
  const Tensor x = leaf({1, 2, 3, 4}, 4);
  const auto [cos, sin] = rotary_cos_sin(rotary_inv_freq(4, 10000.0), 5, 3, DType::Float64);
  const auto xs = x.to_vector(), cs = cos.to_vector(), ss = sin.to_vector();
  const auto out = apply_rotary(x, cos, sin).to_vector();
  const std::vector<float> inv = {1.0f, 1.0f / std::pow(10000.0f, 0.5f)};
  for (int h = 0; h < 2; ++h)
    for (int s = 0; s < 3; ++s)
      for (int j = 0; j < 2; ++j) {
        const double c = std::cos(float(5 + s) * inv[j]), sn = std::sin(float(5 + s) * inv[j]);
        BOOST_TEST(cs[s * 4 + j] == c);
        BOOST_TEST(cs[s * 4 + j + 2] == c);
        const int at = (h * 3 + s) * 4 + j;
        BOOST_TEST(out[at] == xs[at] * c - xs[at + 2] * sn, boost::test_tools::tolerance(1e-12));
        BOOST_TEST(out[at + 2] == xs[at + 2] * c + xs[at] * sn,
                   boost::test_tools::tolerance(1e-12));
      }
  gradcheck([&] { return weighted(apply_rotary(x, cos, sin), 5); }, x, "x");
}

BOOST_AUTO_TEST_CASE(activations_are_the_formulas_and_their_gradients_match) {
  const double c = std::sqrt(2.0 / M_PI);
  const auto tanh_gelu = [&](double x) {
    return 0.5 * x * (1 + std::tanh(c * (x + 0.044715 * x * x * x)));
  };
  const auto erf_gelu = [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); };
  const auto relu6 = [](double x) { return std::min(std::max(x, 0.0), 6.0); };
  // At points inside and beyond each kink and clip (torch.nn.functional's formulas).
  for (const double x : {0.7, -1.3, 11.5}) {
    const std::map<std::string, double> expected = {
        {"gelu_new", tanh_gelu(x)},
        {"gelu_pytorch_tanh", tanh_gelu(x)},
        {"gelu", erf_gelu(x)},
        {"gelu_fast", 0.5 * x * (1 + std::tanh(0.7978845608 * x * (1 + 0.044715 * x * x)))},
        {"quick_gelu", x / (1 + std::exp(-1.702 * x))},
        {"relu", std::max(x, 0.0)},
        {"silu", x / (1 + std::exp(-x))},
        {"swish", x / (1 + std::exp(-x))},
        {"tanh", std::tanh(x)},
        {"linear", x},
        {"gelu_python", erf_gelu(x)},
        {"gelu_python_tanh", tanh_gelu(x)},
        {"gelu_accurate", tanh_gelu(x)},
        {"gelu_10", std::min(std::max(erf_gelu(x), -10.0), 10.0)},
        {"sigmoid", 1 / (1 + std::exp(-x))},
        {"relu2", std::max(x, 0.0) * std::max(x, 0.0)},
        {"relu6", relu6(x)},
        {"leaky_relu", x > 0 ? x : 0.01 * x},
        {"hardswish", x * relu6(x + 3) / 6}};
    BOOST_TEST(expected.size() == supported_activations().size());
    for (const auto& name : supported_activations()) BOOST_TEST_CONTEXT(name << " at " << x) {
        // 1e-10: gelu_fast's constant 0.7978845608 is sqrt(2/pi) to 10 digits.
        BOOST_TEST(activation(name, scalar_tensor(x, f64)).item() == expected.at(name),
                   boost::test_tools::tolerance(1e-10));
      }
  }
  const Tensor t = leaf({7}, 6);
  for (const auto& name : supported_activations())
    gradcheck([&] { return weighted(activation(name, t), 7); }, t, name);
  BOOST_TEST(Activation("gelu_new").type_name() == "NewGELUActivation");
  BOOST_TEST(Activation("silu").type_name() == "SiLUActivation");
  BOOST_TEST(Activation("swish").type_name() == "SiLU");
  BOOST_TEST(Activation("gelu_10").type_name() == "ClippedGELUActivation");
  BOOST_TEST(Activation("relu2").type_name() == "ReLUSquaredActivation");
}

BOOST_AUTO_TEST_CASE(swiglu_mlp_gradients_match) {
  auto config = tiny_llama();
  LlamaMLP mlp(config);
  mlp.to(DType::Float64);
  const Tensor x = leaf({2, 3, 8}, 8);
  const auto loss = [&] { return weighted(mlp(x).tensor(), 9); };
  gradcheck(loss, x, "x");
  gradcheck(loss, mlp.get_submodule("gate_proj")->param("weight"), "gate_proj.weight");
  // down(silu(gate x) * up x)
  const Tensor want = linear(mul(silu(linear(x, mlp.get_submodule("gate_proj")->param("weight"))),
                                 linear(x, mlp.get_submodule("up_proj")->param("weight"))),
                             mlp.get_submodule("down_proj")->param("weight"));
  BOOST_TEST(testing::close(mlp(x).tensor(), want, 0, 0, "mlp") == "");
}

BOOST_AUTO_TEST_CASE(grouped_query_attention_reads_kv_head_n_over_group_size) {
  // 4 query heads over 2 kv heads: heads 0, 1 read kv head 0; heads 2, 3 read kv head 1.
  const Tensor q = leaf({2, 4, 3, 4}, 10), k = leaf({2, 2, 3, 4}, 11), v = leaf({2, 2, 3, 4}, 12);
  const Tensor gqa = scaled_dot_product_attention(q, k, v, {}, true, {}, true);
  const auto rep = [](const Tensor& t) {
    return cat({narrow(t, 1, 0, 1), narrow(t, 1, 0, 1), narrow(t, 1, 1, 1), narrow(t, 1, 1, 1)}, 1);
  };
  const Tensor full = scaled_dot_product_attention(q, rep(k), rep(v), {}, true);
  BOOST_TEST(testing::close(gqa, full, 1e-12, 1e-12, "gqa") == "");
  const auto loss = [&] {
    return weighted(scaled_dot_product_attention(q, k, v, {}, true, 0.3, true), 13);
  };
  gradcheck(loss, q, "q");
  gradcheck(loss, k, "k");
  gradcheck(loss, v, "v");
}

BOOST_AUTO_TEST_CASE(cached_causal_attention_masks_keys_after_each_query_position) {
  // 2 new queries over 3 cached + 2 new keys equal the last 2 rows of attention over all 5.
  const Tensor q = leaf({1, 2, 5, 4}, 14), k = leaf({1, 1, 5, 4}, 15), v = leaf({1, 1, 5, 4}, 16);
  const Tensor all = causal_attention(q, k, v, 0.5);
  const Tensor last = causal_attention(narrow(q, 2, 3, 2), k, v, 0.5);
  BOOST_TEST(testing::close(last, narrow(all, 2, 3, 2), 1e-12, 1e-12, "cached") == "");
  const auto loss = [&] { return weighted(causal_attention(narrow(q, 2, 3, 2), k, v, 0.5), 17); };
  gradcheck(loss, q, "q");
  gradcheck(loss, k, "k");
}

BOOST_AUTO_TEST_CASE(a_sliding_window_keeps_the_last_window_keys_of_each_query) {
  // Window 2 (Mistral's, transformers' sliding_window_overlay): query i sees keys i-1 and i, so
  // each row is plain attention over those two keys alone; cached queries see the same.
  const Tensor q = leaf({1, 2, 5, 4}, 20), k = leaf({1, 1, 5, 4}, 21), v = leaf({1, 1, 5, 4}, 22);
  const Tensor windowed = causal_attention(q, k, v, 0.5, 0.0, 2);
  for (std::int64_t i = 1; i < 5; ++i) {
    const Tensor row = scaled_dot_product_attention(narrow(q, 2, i, 1), narrow(k, 2, i - 1, 2),
                                                    narrow(v, 2, i - 1, 2), {}, false, 0.5, true);
    BOOST_TEST(testing::close(narrow(windowed, 2, i, 1), row, 1e-12, 1e-12, "row") == "");
  }
  const Tensor last = causal_attention(narrow(q, 2, 3, 2), k, v, 0.5, 0.0, 2);
  BOOST_TEST(testing::close(last, narrow(windowed, 2, 3, 2), 1e-12, 1e-12, "cached") == "");
  // The written-out path (training with dropout) masks the same keys: at p = 1e-12 nothing drops.
  BOOST_TEST(testing::close(causal_attention(q, k, v, 0.5, 1e-12, 2), windowed, 1e-9, 1e-9,
                            "dropout path") == "");
  BOOST_TEST(testing::close(causal_attention(narrow(q, 2, 3, 2), k, v, 0.5, 1e-12, 2), last, 1e-9,
                            1e-9, "cached dropout path") == "");
  // A window no shorter than the sequence masks nothing more.
  BOOST_TEST(testing::close(causal_attention(q, k, v, 0.5, 0.0, 5), causal_attention(q, k, v, 0.5),
                            0, 0, "wide") == "");
  gradcheck([&] { return weighted(causal_attention(q, k, v, 0.5, 0.0, 2), 23); }, k, "k");
}

BOOST_AUTO_TEST_CASE(conv1d_is_x_w_plus_b_with_the_weight_in_out) {
  Conv1D conv(3, 5);
  conv.to(DType::Float64);
  BOOST_TEST(conv.param("weight").shape() == (Shape{5, 3}));
  const Tensor x = leaf({2, 5}, 18);
  BOOST_TEST(testing::close(conv(x).tensor(),
                            add(matmul(x, conv.param("weight")), conv.param("bias")), 0, 0,
                            "conv1d") == "");
  gradcheck([&] { return weighted(conv(x).tensor(), 19); }, conv.param("weight"), "weight");
}

BOOST_AUTO_TEST_CASE(whole_model_gradients_match_in_float64) {
  manual_seed(20);
  const Tensor ids = from_vector(std::vector<std::int64_t>{1, 5, 4, 9, 2, 7}, {2, 3});
  const Tensor targets = from_vector(std::vector<std::int64_t>{5, 3, 9, 7, 10, 0}, {2, 3});
  std::vector<std::shared_ptr<CausalLM>> models = {std::make_shared<LlamaForCausalLM>(tiny_llama()),
                                                   std::make_shared<GPT2LMHeadModel>(tiny_gpt2())};
  for (auto& model : models) {
    model->to(DType::Float64);
    model->eval();
    const auto loss = [&] { return causal_lm_loss(model->forward(ids), targets); };
    BOOST_TEST_CONTEXT(model->type_name()) {
      for (const auto& [fqn, p] : model->named_parameters())
        if (fqn.find(".1.") == std::string::npos && p.numel() <= 96) gradcheck(loss, p, fqn);
    }
  }
}

BOOST_AUTO_TEST_CASE(the_padding_row_gets_no_gradient_from_the_lookup) {
  // pad_token_id 3 -> Embedding(padding_idx=3): untied, its row's gradient is zero even where
  // the id occurs.
  LlamaForCausalLM model(tiny_llama());
  const Tensor ids = from_vector(std::vector<std::int64_t>{3, 5, 3, 9}, {1, 4});
  causal_lm_loss(model.forward(ids), ids).backward();
  const Tensor grad = model.get_submodule("model.embed_tokens")->param("weight").grad();
  BOOST_TEST(max(abs(select(grad, 0, 3))).item() == 0.0);
  BOOST_TEST(max(abs(select(grad, 0, 5))).item() > 0.0);
}

BOOST_AUTO_TEST_CASE(causal_lm_loss_is_plain_mean_cross_entropy_without_a_shift) {
  const Tensor logits = leaf({2, 3, 5}, 21);
  const Tensor targets = from_vector(std::vector<std::int64_t>{1, 4, -100, 0, 2, 3}, {2, 3});
  const auto lp = log_softmax(logits, -1).to_vector();
  const std::vector<std::int64_t> t = {1, 4, -100, 0, 2, 3};
  double total = 0;
  for (int i = 0; i < 6; ++i)
    if (t[i] >= 0) total -= lp[std::size_t(i * 5 + t[i])];
  BOOST_TEST(causal_lm_loss(logits, targets).item() == total / 5,
             boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(gemma_rms_norm_scales_by_one_plus_weight_in_float32_then_casts) {
  // Gemma3RMSNorm: x in float32 normalised, times (1 + w) in float32, then cast to x's dtype
  // (Llama's casts before the weight: in bfloat16 the two differ).
  GemmaRMSNorm norm(16, 1e-6, {}, "Gemma3RMSNorm");
  BOOST_TEST(max(abs(norm.param("weight"))).item() == 0.0);  // zeros: the identity scale
  Generator g(5);
  {
    autograd::NoGradGuard no_grad;
    Tensor(norm.param("weight")).copy_(randn({16}, DType::Float32, &g));
  }
  const Tensor x = to_dtype(mul(randn({3, 16}, DType::Float32, &g), 3.0), DType::BFloat16);
  const Tensor x32 = to_dtype(x, DType::Float32);
  const Tensor normed = mul(x32, rsqrt(add(mean(mul(x32, x32), {-1}, true), 1e-6)));
  const Tensor want = to_dtype(mul(normed, add(norm.param("weight"), 1.0)), DType::BFloat16);
  const Tensor got = norm.forward(x);
  BOOST_TEST(got.dtype() == DType::BFloat16);
  BOOST_TEST(testing::close(got, want, 0, 0, "gemma rms_norm") == "");
  const Tensor llama_order = mul(to_dtype(normed, DType::BFloat16),
                                 to_dtype(add(norm.param("weight"), 1.0), DType::BFloat16));
  BOOST_TEST(
      max(abs(sub(to_dtype(got, DType::Float32), to_dtype(llama_order, DType::Float32)))).item() >
      0.0);
}

BOOST_AUTO_TEST_CASE(meta_models_materialise_as_transformers_initialises) {
  for (const ModelConfig& config : {ModelConfig(tiny_llama()), ModelConfig(tiny_gpt2()),
                                    ModelConfig(tiny_gemma3()), ModelConfig(tiny_gemma2())}) {
    auto meta = make_causal_lm(config, TensorOptions(DType::Float32, kMeta));
    auto cpu = make_causal_lm(config);
    BOOST_TEST_CONTEXT(meta->type_name()) {
      const auto ms = meta->state_dict(), cs = cpu->state_dict();
      BOOST_REQUIRE(ms.size() == cs.size());
      for (std::size_t i = 0; i < ms.size(); ++i) {
        BOOST_TEST(ms[i].first == cs[i].first);
        BOOST_TEST(ms[i].second.shape() == cs[i].second.shape());
        BOOST_TEST(ms[i].second.is_meta());
      }
      meta->to_empty(kCPU);
      Generator a(7), b(7);
      meta->init_weights(*meta, &a);
      cpu->init_weights(*cpu, &b);
      for (std::size_t i = 0; i < ms.size(); ++i)
        BOOST_TEST(testing::close(meta->state_dict()[i].second, cpu->state_dict()[i].second, 0, 0,
                                  ms[i].first) == "");
      for (const auto& [name, buf] : cpu->named_buffers())  // the rotary frequencies
        BOOST_TEST(testing::close(meta->get_submodule(name.substr(0, name.rfind('.')))
                                      ->buffer(name.substr(name.rfind('.') + 1)),
                                  buf, 0, 0, name) == "");
    }
  }
}

BOOST_AUTO_TEST_CASE(init_follows_transformers_init_weights) {
  auto config = std::get<LlamaConfig>(parse_config({{"model_type", "llama"},
                                                    {"hidden_size", 64},
                                                    {"num_attention_heads", 4},
                                                    {"num_hidden_layers", 1},
                                                    {"intermediate_size", 256},
                                                    {"vocab_size", 300},
                                                    {"pad_token_id", 7},
                                                    {"attention_bias", true},
                                                    {"initializer_range", 0.05}},
                                                   "init_llama"));
  LlamaForCausalLM llama(config);
  const auto std_of = [](const Tensor& t) { return std::sqrt(mean(mul(t, t)).item()); };
  BOOST_TEST(std_of(llama.get_submodule("model.layers.0.mlp.up_proj")->param("weight")) == 0.05,
             boost::test_tools::tolerance(0.05));
  BOOST_TEST(
      max(abs(llama.get_submodule("model.layers.0.self_attn.q_proj")->param("bias"))).item() ==
      0.0);
  BOOST_TEST(max(abs(add(llama.get_submodule("model.norm")->param("weight"), -1.0))).item() == 0);
  BOOST_TEST(
      max(abs(select(llama.get_submodule("model.embed_tokens")->param("weight"), 0, 7))).item() ==
      0.0);
  auto gcfg = std::get<GPT2Config>(parse_config(
      {{"model_type", "gpt2"}, {"n_embd", 64}, {"n_head", 4}, {"n_layer", 8}, {"vocab_size", 300}},
      "init_gpt2"));
  GPT2LMHeadModel gpt2(gcfg);
  BOOST_TEST(std_of(gpt2.get_submodule("transformer.h.0.mlp.c_fc")->param("weight")) == 0.02,
             boost::test_tools::tolerance(0.05));
  BOOST_TEST(std_of(gpt2.get_submodule("transformer.h.0.mlp.c_proj")->param("weight")) ==
                 0.02 / std::sqrt(16.0),
             boost::test_tools::tolerance(0.05));
  BOOST_TEST(std_of(gpt2.get_submodule("transformer.ln_f")->param("weight")) == 1.0);
  // One module at a time (FSDP's param_init_fn): the residual projection keeps its std.
  auto c_proj = gpt2.get_submodule("transformer.h.3.attn.c_proj");
  gpt2.init_weights(*c_proj);
  BOOST_TEST(std_of(c_proj->param("weight")) == 0.02 / std::sqrt(16.0),
             boost::test_tools::tolerance(0.1));
}

BOOST_AUTO_TEST_CASE(dropout_is_active_in_training_only) {
  auto config = tiny_gpt2();  // pdrop 0.1 by default
  GPT2LMHeadModel model(config);
  const Tensor ids = from_vector(std::vector<std::int64_t>{1, 2, 3, 4}, {1, 4});
  BOOST_TEST(max(abs(sub(model.forward(ids), model.forward(ids)))).item() > 0);
  model.eval();
  BOOST_TEST(max(abs(sub(model.forward(ids), model.forward(ids)))).item() == 0);
  BOOST_TEST(model.get_submodule("transformer.h.0.attn.attn_dropout")->type_name() == "Dropout");
}
