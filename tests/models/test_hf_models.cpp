// GPT2LMHeadModel, LlamaForCausalLM, Gemma3ForCausalLM and Gemma2ForCausalLM against transformers
// on the fixtures of tests/fixtures/hf_models/: the state dict's FQNs and shapes equal the saved
// file's (plus the tied alias), the weights load, and the logits equal transformers' within 1e-4 *
// max|logit|.
#define BOOST_TEST_MODULE models_hf_fixtures
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <set>

#include "core/autograd.h"
#include "core/ops.h"
#include "models/auto_model.h"
#include "models/load_weights.h"
#include "models/pretrained.h"
#include "tests/models/hf_fixture.h"

using namespace fsdp;
using namespace fsdp::models;
namespace bdata = boost::unit_test::data;

namespace {

bool tied(const ModelConfig& c) {
  return std::visit([](const auto& cfg) { return cfg.tie_word_embeddings; }, c);
}

}  // namespace

BOOST_DATA_TEST_CASE(state_dict_keys_and_shapes_equal_the_saved_file,
                     bdata::make(testing::hf_fixture_models()), name) {
  const std::string dir = testing::hf_fixture_dir(name);
  const ModelConfig config = load_config(dir);
  auto model = make_causal_lm(config);
  std::map<std::string, Shape> expected;
  for (const auto& [key, t] : testing::tensors_by_name(dir + "/model.safetensors"))
    expected[key] = t.shape();
  const std::string embedding = std::holds_alternative<GPT2Config>(config)
                                    ? "transformer.wte.weight"
                                    : "model.embed_tokens.weight";
  if (tied(config)) {  // save_pretrained leaves the tied alias out; torch's state_dict has it
    BOOST_TEST(!expected.count("lm_head.weight"));
    expected["lm_head.weight"] = expected.at(embedding);
  }
  std::map<std::string, Shape> actual;
  for (const auto& [key, t] : model->state_dict()) actual[key] = t.shape();
  BOOST_TEST(actual == expected);
  // Tied: one Parameter, listed once by named_parameters (torch's remove_duplicate).
  std::set<std::string> params;
  for (const auto& [key, p] : model->named_parameters()) params.insert(key);
  BOOST_TEST(params.count("lm_head.weight") == (tied(config) ? 0u : 1u));
  BOOST_TEST(params.size() == expected.size() - (tied(config) ? 1 : 0));
  const auto sd = model->state_dict();
  Tensor head, emb;
  for (const auto& [key, t] : sd) {
    if (key == "lm_head.weight") head = t;
    if (key == embedding) emb = t;
  }
  BOOST_TEST(head.is_same(emb) == tied(config));
}

BOOST_DATA_TEST_CASE(logits_equal_transformers, bdata::make(testing::hf_fixture_models()), name) {
  auto model = testing::load_hf_fixture(name);
  const auto expected = testing::hf_expected(name);
  autograd::NoGradGuard no_grad;
  const Tensor logits = model->forward(expected.at("input_ids"));
  const Tensor& want = expected.at("logits");
  BOOST_REQUIRE(logits.shape() == want.shape());
  const double scale = max(abs(want)).item();
  const double diff = max(abs(sub(logits, want))).item();
  BOOST_TEST_MESSAGE(name << ": max|diff| " << diff << " max|logit| " << scale);
  BOOST_TEST(diff <= 1e-4 * scale);
}

BOOST_DATA_TEST_CASE(from_pretrained_equals_transformers, bdata::make(testing::hf_fixture_models()),
                     name) {
  // from_pretrained builds on meta and reads every weight into uninitialised storage: the same
  // logits, the tied head still the embedding's tensor, the computed buffers (inv_freq) equal to
  // the eagerly built model's, nothing left on meta.
  const std::string dir = testing::hf_fixture_dir(name);
  auto model = from_pretrained(dir);
  model->eval();
  for (const auto& [key, t] : model->state_dict()) BOOST_TEST(!t.is_meta(), key);
  const auto eager = make_causal_lm(load_config(dir));
  const auto eager_buffers = eager->named_buffers();
  for (const auto& [key, b] : model->named_buffers())
    for (const auto& [ekey, eb] : eager_buffers)
      if (ekey == key) BOOST_TEST(b.to_vector() == eb.to_vector(), key);
  const auto sd = model->state_dict();
  Tensor head, emb;
  for (const auto& [key, t] : sd) {
    if (key == "lm_head.weight") head = t;
    if (key == "transformer.wte.weight" || key == "model.embed_tokens.weight") emb = t;
  }
  BOOST_TEST(head.is_same(emb) == tied(load_config(dir)));
  const auto expected = testing::hf_expected(name);
  autograd::NoGradGuard no_grad;
  const Tensor logits = model->forward(expected.at("input_ids"));
  const Tensor& want = expected.at("logits");
  BOOST_REQUIRE(logits.shape() == want.shape());
  BOOST_TEST(max(abs(sub(logits, want))).item() <= 1e-4 * max(abs(want)).item());
}

BOOST_DATA_TEST_CASE(cached_forward_equals_the_full_forward,
                     bdata::make(testing::hf_fixture_models()), name) {
  // Prefill 5 positions, then 1, then 3: the logits of each part equal the full sequence's.
  auto model = testing::load_hf_fixture(name);
  const Tensor ids = testing::hf_expected(name).at("input_ids");
  autograd::NoGradGuard no_grad;
  const Tensor full = model->forward(ids);
  KVCache cache;
  std::int64_t at = 0;
  for (std::int64_t part : {5, 1, 3}) {
    const Tensor logits = model->forward(narrow(ids, 1, at, part), &cache);
    BOOST_TEST(cache.length() == at + part);
    BOOST_TEST(testing::close(logits, narrow(full, 1, at, part), 1e-5, 1e-5, name) == "");
    at += part;
  }
}

BOOST_DATA_TEST_CASE(rotary_inverse_frequencies_equal_transformers_bit_for_bit,
                     bdata::make(std::vector<std::string>{"llama_gqa", "llama_tied_bias_llama3",
                                                          "llama_linear_head_dim",
                                                          "gemma2_softcap"}),
                     name) {
  auto model = make_causal_lm(load_config(testing::hf_fixture_dir(name)));
  const auto want = testing::hf_expected(name).at("inv_freq").to_vector();
  const auto got = model->get_submodule("model.rotary_emb")->buffer("inv_freq").to_vector();
  BOOST_TEST(got == want, boost::test_tools::per_element());
}

BOOST_DATA_TEST_CASE(gemma3_rotary_inverse_frequencies_per_layer_type_equal_transformers,
                     bdata::make(std::vector<std::string>{"gemma3_sliding_rope",
                                                          "gemma3_softcap_untied"}),
                     name) {
  // full_attention's from rope_theta (linear scaling in the first), sliding_attention's from
  // rope_local_base_freq (linear in the second), bit for bit.
  auto model = make_causal_lm(load_config(testing::hf_fixture_dir(name)));
  const auto expected = testing::hf_expected(name);
  const auto rotary = model->get_submodule("model.rotary_emb");
  BOOST_TEST(rotary->type_name() == "Gemma3RotaryEmbedding");
  for (const std::string type : {"full_attention", "sliding_attention"}) {
    const auto want = expected.at(type + "_inv_freq").to_vector();
    BOOST_TEST(rotary->buffer(type + "_inv_freq").to_vector() == want,
               boost::test_tools::per_element());
    BOOST_TEST(rotary->buffer(type + "_original_inv_freq").to_vector() == want,
               boost::test_tools::per_element());
  }
}

BOOST_DATA_TEST_CASE(bfloat16_logits_stay_near_float32, bdata::make(testing::hf_fixture_models()),
                     name) {
  // The model converted to bfloat16 (RMSNorm normalising in float32, as transformers does):
  // within bfloat16's rounding of transformers' float32 logits.
  auto model = testing::load_hf_fixture(name);
  model->to(DType::BFloat16);
  const auto expected = testing::hf_expected(name);
  autograd::NoGradGuard no_grad;
  const Tensor logits = model->forward(expected.at("input_ids"));
  BOOST_TEST(logits.dtype() == DType::BFloat16);
  const Tensor& want = expected.at("logits");
  const double diff = max(abs(sub(to_dtype(logits, DType::Float32), want))).item();
  BOOST_TEST(diff <= 0.1 * max(abs(want)).item());
}
