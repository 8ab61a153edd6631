// GPT2Config and LlamaConfig against transformers 5.24: defaults, aliases, both rope formats,
// save_pretrained's config.json written back field for field, and every unsupported value's
// message; load_config's and the weight loader's errors.
#define BOOST_TEST_MODULE models_config
#include <unistd.h>

#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/input_error.h"
#include "core/io/safetensors.h"
#include "core/ops.h"
#include "models/auto_model.h"
#include "models/gemma_config.h"
#include "models/generation.h"
#include "models/gpt2.h"
#include "models/llama.h"
#include "models/load_weights.h"
#include "tests/models/hf_fixture.h"
#include "tests/support/error_message.h"

using namespace fsdp;
using namespace fsdp::models;
using nlohmann::json;
namespace bdata = boost::unit_test::data;
namespace fs = std::filesystem;

namespace {

std::string parse_error(const json& j) {
  return testing::error_message<InputError>([&] { parse_config(j, "cfg.json"); });
}

json llama(json extra) {
  json j = {{"model_type", "llama"},  {"hidden_size", 16},       {"num_attention_heads", 4},
            {"num_hidden_layers", 1}, {"intermediate_size", 32}, {"vocab_size", 50}};
  if (!extra.is_null()) j.update(extra);
  return j;
}

json gpt2(json extra) {
  json j = {{"model_type", "gpt2"}, {"n_embd", 16},     {"n_head", 4},
            {"n_layer", 1},         {"n_positions", 8}, {"vocab_size", 50}};
  if (!extra.is_null()) j.update(extra);
  return j;
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("models_config_" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

}  // namespace

BOOST_DATA_TEST_CASE(to_json_writes_the_saved_config_back_field_for_field,
                     bdata::make(testing::hf_fixture_models()), name) {
  const std::string path = testing::hf_fixture_dir(name) + "/config.json";
  std::ifstream in(path);
  const json saved = json::parse(in);
  const json written = std::visit([](const auto& c) { return c.to_json(); }, load_config(path));
  BOOST_TEST(written.dump(2) == saved.dump(2));
}

BOOST_AUTO_TEST_CASE(gpt2_defaults_and_aliases_are_transformers) {
  const auto c = std::get<GPT2Config>(parse_config({{"model_type", "gpt2"}}, "cfg.json"));
  BOOST_TEST(c.vocab_size == 50257);
  BOOST_TEST(c.n_positions == 1024);
  BOOST_TEST(c.n_embd == 768);
  BOOST_TEST(c.inner_dim() == 4 * 768);
  BOOST_TEST(c.activation_function == "gelu_new");
  BOOST_TEST(c.tie_word_embeddings);
  BOOST_TEST(c.layer_norm_epsilon == 1e-5);
  const auto a = std::get<GPT2Config>(parse_config({{"model_type", "gpt2"},
                                                    {"hidden_size", 64},
                                                    {"num_attention_heads", 2},
                                                    {"num_hidden_layers", 3},
                                                    {"max_position_embeddings", 16}},
                                                   "cfg.json"));
  BOOST_TEST(a.n_embd == 64);
  BOOST_TEST(a.n_head == 2);
  BOOST_TEST(a.n_layer == 3);
  BOOST_TEST(a.n_positions == 16);
  const json j = a.to_json();
  BOOST_TEST(!j.contains("hidden_size"));
  BOOST_TEST(j.at("n_embd") == 64);
  BOOST_TEST(j.at("architectures") == json::array({"GPT2LMHeadModel"}));
  BOOST_TEST(j.at("dtype") == "float32");
}

BOOST_AUTO_TEST_CASE(llama_defaults_are_transformers) {
  const auto c = std::get<LlamaConfig>(parse_config({{"model_type", "llama"}}, "cfg.json"));
  BOOST_TEST(c.hidden_size == 4096);
  BOOST_TEST(c.num_key_value_heads == 32);
  BOOST_TEST(c.head_dim == 128);
  BOOST_TEST(c.rms_norm_eps == 1e-6);
  BOOST_TEST(!c.tie_word_embeddings);
  BOOST_TEST(c.rope.rope_type == "default");
  BOOST_TEST(c.rope.rope_theta == 10000.0);
  BOOST_TEST(!c.pad_token_id.has_value());
}

BOOST_AUTO_TEST_CASE(legacy_rope_theta_and_rope_scaling_convert_to_rope_parameters) {
  const auto c = std::get<LlamaConfig>(parse_config(
      llama({{"rope_theta", 500000.0}, {"rope_scaling", {{"type", "linear"}, {"factor", 2.0}}}}),
      "cfg.json"));
  BOOST_TEST(c.rope.rope_type == "linear");
  BOOST_TEST(c.rope.rope_theta == 500000.0);
  BOOST_TEST(c.rope.factor == 2.0);
  const json j = c.to_json();
  BOOST_TEST(!j.contains("rope_scaling"));
  BOOST_TEST(!j.contains("rope_theta"));
  BOOST_TEST(j.at("rope_parameters").dump() ==
             R"({"factor":2.0,"rope_theta":500000.0,"rope_type":"linear","type":"linear"})");
  // "rope_type" spelled out, llama3 without original_max_position_embeddings: it defaults to
  // max_position_embeddings (standardize_rope_params).
  const auto l3 = std::get<LlamaConfig>(parse_config(llama({{"max_position_embeddings", 64},
                                                            {"rope_scaling",
                                                             {{"rope_type", "llama3"},
                                                              {"factor", 8.0},
                                                              {"low_freq_factor", 1.0},
                                                              {"high_freq_factor", 4.0}}}}),
                                                     "cfg.json"));
  BOOST_TEST(l3.rope.rope_type == "llama3");
  BOOST_TEST(l3.rope.rope_theta == 10000.0);
  BOOST_TEST(l3.rope.original_max_position_embeddings == 64);
  // convert_rope_params_to_dict: rope_scaling replaces rope_parameters where both are given, and
  // the top-level rope_theta only fills a theta the object lacks.
  const auto rope = [](const json& extra) {
    return std::get<LlamaConfig>(parse_config(llama(extra), "cfg.json")).rope;
  };
  const json linear4 = {{"type", "linear"}, {"factor", 4.0}};
  const auto both = rope({{"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 100.0}}},
                          {"rope_scaling", linear4}});
  BOOST_TEST(both.rope_type == "linear");
  BOOST_TEST(both.factor == 4.0);
  BOOST_TEST(both.rope_theta == 10000.0);
  const auto inside =
      rope({{"rope_theta", 500.0},
            {"rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 77.0}}}});
  BOOST_TEST(inside.rope_theta == 77.0);
  const auto params = rope({{"rope_theta", 500.0}, {"rope_parameters", {{"rope_theta", 100.0}}}});
  BOOST_TEST(params.rope_theta == 100.0);
  BOOST_TEST(rope({{"rope_theta", 500.0}, {"rope_parameters", json::object()}}).rope_theta ==
             500.0);
  BOOST_TEST(rope({{"rope_scaling", json::object()},
                   {"rope_parameters", {{"rope_type", "linear"}, {"factor", 3.0}}}})
                 .factor == 3.0);  // an empty rope_scaling is no rope_scaling
}

BOOST_AUTO_TEST_CASE(mistral_reads_its_sliding_window_and_keeps_its_class_names) {
  const auto mistral = std::get<LlamaConfig>(parse_config({{"model_type", "mistral"}}, "cfg.json"));
  BOOST_TEST(mistral.sliding_window.value_or(0) == 4096);  // MistralConfig's default
  BOOST_TEST(mistral.to_json().at("sliding_window") == 4096);
  BOOST_TEST(parse_error({{"model_type", "mistral"}, {"sliding_window", 0}}) ==
             "cfg.json: sliding_window must be positive or null, got 0");
  const auto c = std::get<LlamaConfig>(parse_config({{"model_type", "mistral"},
                                                     {"sliding_window", nullptr},
                                                     {"hidden_size", 16},
                                                     {"num_attention_heads", 4},
                                                     {"num_key_value_heads", 2},
                                                     {"num_hidden_layers", 1},
                                                     {"intermediate_size", 32},
                                                     {"vocab_size", 50}},
                                                    "cfg.json"));
  auto model = make_causal_lm(c, TensorOptions(DType::Float32, kMeta));
  BOOST_TEST(model->type_name() == "MistralForCausalLM");
  BOOST_TEST(model->get_submodule("model.layers.0")->type_name() == "MistralDecoderLayer");
  BOOST_TEST(model->get_submodule("model.rotary_emb")->type_name() == "MistralRotaryEmbedding");
  BOOST_TEST(model->get_submodule("model.norm")->type_name() == "MistralRMSNorm");
  BOOST_TEST(model->config_json().at("architectures") == json::array({"MistralForCausalLM"}));
  BOOST_TEST(!model->config_json().contains("mlp_bias"));
}

// Qwen2Config / Qwen3Config of transformers 5.24: their defaults; the window only with
// use_sliding_window, on the layers from max_window_layers on (or as layer_types says); Qwen2's
// q/k/v biases without o_proj's; Qwen3's q_norm and k_norm; their class names.
BOOST_AUTO_TEST_CASE(qwen2_and_qwen3_read_their_windows_biases_and_class_names) {
  const auto q2 = std::get<LlamaConfig>(parse_config({{"model_type", "qwen2"}}, "cfg.json"));
  BOOST_TEST(q2.vocab_size == 151936);
  BOOST_TEST(q2.head_dim == 128);              // 4096 / 32
  BOOST_TEST(!q2.sliding_window.has_value());  // sliding_window 4096 without use_sliding_window
  BOOST_TEST(q2.layer_types.size() == 32u);
  BOOST_TEST(!q2.window_of(31).has_value());
  BOOST_TEST((q2.attention_bias && !q2.o_proj_bias && !q2.qk_norm));
  BOOST_TEST(q2.to_json().at("sliding_window").is_null());
  BOOST_TEST(!q2.to_json().contains("head_dim"));
  BOOST_TEST(!q2.to_json().contains("attention_bias"));
  const json small = {{"hidden_size", 16},        {"num_attention_heads", 4},
                      {"num_key_value_heads", 2}, {"num_hidden_layers", 3},
                      {"intermediate_size", 32},  {"vocab_size", 50}};
  json windowed = small;
  windowed.update({{"model_type", "qwen2"},
                   {"use_sliding_window", true},
                   {"sliding_window", 8},
                   {"max_window_layers", 2}});
  const auto w = std::get<LlamaConfig>(parse_config(windowed, "cfg.json"));
  BOOST_TEST(!w.window_of(1).has_value());
  BOOST_TEST(w.window_of(2).value_or(0) == 8);
  BOOST_TEST(w.to_json().at("layer_types") ==
             json::array({"full_attention", "full_attention", "sliding_attention"}));
  windowed["layer_types"] = {"sliding_attention", "full_attention", "full_attention"};
  BOOST_TEST(std::get<LlamaConfig>(parse_config(windowed, "cfg.json")).window_of(0).value_or(0) ==
             8);
  windowed["layer_types"] = {"sliding_attention", "chunked_attention", "full_attention"};
  BOOST_TEST(parse_error(windowed) ==
             "cfg.json: layer_types \"chunked_attention\" is not supported (supported: "
             "full_attention, sliding_attention)");
  windowed["layer_types"] = {"full_attention"};
  BOOST_TEST(parse_error(windowed) ==
             "cfg.json: layer_types must be a list of num_hidden_layers (3) entries, got "
             "[\"full_attention\"]");
  auto model =
      make_causal_lm(parse_config(w.to_json(), "cfg.json"), TensorOptions(DType::Float32, kMeta));
  BOOST_TEST(model->type_name() == "Qwen2ForCausalLM");
  BOOST_TEST(model->get_submodule("model.layers.0")->type_name() == "Qwen2DecoderLayer");
  BOOST_TEST(model->get_submodule("model.norm")->type_name() == "Qwen2RMSNorm");
  BOOST_TEST(decoder_block_class(*model) == "Qwen2DecoderLayer");
  const auto attn = model->get_submodule("model.layers.0.self_attn");
  BOOST_TEST(attn->type_name() == "Qwen2Attention");
  BOOST_TEST(attn->get_submodule("q_proj")->param("bias").defined());
  BOOST_TEST(attn->get_submodule("o_proj")->named_parameters().size() == 1u);  // no bias

  const auto q3 = std::get<LlamaConfig>(parse_config({{"model_type", "qwen3"}}, "cfg.json"));
  BOOST_TEST(q3.head_dim == 128);
  BOOST_TEST((!q3.attention_bias && !q3.o_proj_bias && q3.qk_norm));
  json q3_small = small;
  q3_small.update({{"model_type", "qwen3"}, {"head_dim", 6}});
  auto m3 =
      make_causal_lm(parse_config(q3_small, "cfg.json"), TensorOptions(DType::Float32, kMeta));
  const auto a3 = m3->get_submodule("model.layers.0.self_attn");
  BOOST_TEST(a3->type_name() == "Qwen3Attention");
  BOOST_TEST(a3->get_submodule("q_norm")->type_name() == "Qwen3RMSNorm");
  BOOST_TEST((a3->get_submodule("k_norm")->param("weight").shape() == Shape{6}));
  BOOST_TEST(m3->config_json().at("architectures") == json::array({"Qwen3ForCausalLM"}));
}

// Gemma3TextConfig of transformers 5.24: its defaults (every sixth layer full); the hub's legacy
// rope fields converted to rope_parameters per layer type and not written back, as
// save_pretrained writes them (the values below are transformers'); what is refused.
BOOST_AUTO_TEST_CASE(gemma3_reads_its_defaults_layer_types_and_rope_per_layer_type) {
  const auto d = std::get<GemmaConfig>(parse_config({{"model_type", "gemma3_text"}}, "cfg.json"));
  BOOST_TEST(d.vocab_size == 262208);
  BOOST_TEST(d.hidden_size == 2304);
  BOOST_TEST(d.head_dim == 256);
  BOOST_TEST(d.num_key_value_heads == 4);
  BOOST_TEST(d.query_pre_attn_scalar == 256.0);
  BOOST_TEST(d.hidden_activation == "gelu_pytorch_tanh");
  BOOST_TEST((d.tie_word_embeddings && d.pad_token_id.value_or(-1) == 0));
  BOOST_TEST(!d.final_logit_softcapping.has_value());
  BOOST_TEST(d.layer_types.size() == 26u);
  BOOST_TEST(d.window_of(4).value_or(0) == 4096);
  BOOST_TEST(!d.window_of(5).has_value());  // (5 + 1) % 6 == 0: full
  BOOST_TEST(d.window_of(6).value_or(0) == 4096);
  BOOST_TEST((d.full_rope.rope_type == "default" && d.full_rope.rope_theta == 1e6));
  BOOST_TEST((d.sliding_rope.rope_type == "default" && d.sliding_rope.rope_theta == 1e4));
  const json dj = d.to_json();
  BOOST_TEST(dj.at("_sliding_window_pattern") == 6);
  BOOST_TEST(dj.at("architectures") == json::array({"Gemma3ForCausalLM"}));
  BOOST_TEST(dj.at("model_type") == "gemma3_text");

  const json small = {{"model_type", "gemma3_text"},
                      {"hidden_size", 16},
                      {"num_attention_heads", 4},
                      {"num_key_value_heads", 2},
                      {"num_hidden_layers", 4},
                      {"intermediate_size", 32},
                      {"vocab_size", 50},
                      {"head_dim", 6}};
  // Gemma3TextConfig(rope_theta=5.0, rope_local_base_freq=7.0, rope_scaling={linear, 8},
  // sliding_window_pattern=2, num_hidden_layers=4).save_pretrained's fields:
  json legacy = small;
  legacy.update({{"rope_theta", 5.0},
                 {"rope_local_base_freq", 7.0},
                 {"rope_scaling", {{"rope_type", "linear"}, {"factor", 8.0}}},
                 {"sliding_window_pattern", 2}});
  const auto l = std::get<GemmaConfig>(parse_config(legacy, "cfg.json"));
  BOOST_TEST(l.layer_types == (std::vector<std::string>{"sliding_attention", "full_attention",
                                                        "sliding_attention", "full_attention"}),
             boost::test_tools::per_element());
  BOOST_TEST((l.full_rope.rope_type == "linear" && l.full_rope.factor == 8.0 &&
              l.full_rope.rope_theta == 5.0));
  BOOST_TEST((l.sliding_rope.rope_type == "default" && l.sliding_rope.rope_theta == 7.0));
  const json lj = l.to_json();
  BOOST_TEST(lj.at("rope_parameters").dump() ==
             R"({"full_attention":{"factor":8.0,"rope_theta":5.0,"rope_type":"linear"},)"
             R"("sliding_attention":{"rope_theta":7.0,"rope_type":"default"}})");
  for (const char* gone : {"rope_theta", "rope_local_base_freq", "rope_scaling"})
    BOOST_TEST(!lj.contains(gone), gone);
  BOOST_TEST(lj.at("_sliding_window_pattern") == 2);
  BOOST_TEST(lj.at("sliding_window_pattern") == 2);
  // rope_scaling updates a given full_attention entry; a file's _sliding_window_pattern is only
  // written back (the layer types come from sliding_window_pattern).
  json given = small;
  given.update(
      {{"rope_parameters", {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 3.0}}}}},
       {"rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}}},
       {"_sliding_window_pattern", 2}});
  const auto g = std::get<GemmaConfig>(parse_config(given, "cfg.json"));
  BOOST_TEST((g.full_rope.rope_type == "linear" && g.full_rope.factor == 2.0 &&
              g.full_rope.rope_theta == 3.0));
  BOOST_TEST(g.sliding_rope.rope_theta == 1e4);
  BOOST_TEST(g.window_of(1).value_or(0) == 4096);  // pattern 6: all four layers slide
  BOOST_TEST(g.to_json().at("_sliding_window_pattern") == 2);

  const auto error = [&](json extra) {
    json j = small;
    j.update(extra);
    return parse_error(j);
  };
  BOOST_TEST(error({{"use_bidirectional_attention", true}}) ==
             "cfg.json: use_bidirectional_attention true is not supported (only causal "
             "attention)");
  BOOST_TEST(error({{"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 3.0}}}}) ==
             "cfg.json: rope_parameters \"rope_theta\" is not supported (Gemma 3 keys its rope "
             "parameters by layer type: full_attention, sliding_attention)");
  BOOST_TEST(error({{"rope_parameters", {{"sliding_attention", {{"rope_type", "yarn"}}}}}}) ==
             "cfg.json: rope_parameters.sliding_attention.rope_type \"yarn\" is not supported "
             "(supported: default, linear, llama3)");
  BOOST_TEST(error({{"sliding_window", nullptr}}) ==
             "cfg.json: sliding_window is null but layer_types has sliding_attention layers");
  BOOST_TEST(error({{"final_logit_softcapping", 0.0}}) ==
             "cfg.json: final_logit_softcapping must be positive or null, got 0");
  BOOST_TEST(error({{"layer_types", {"full_attention"}}}) ==
             "cfg.json: layer_types must be a list of num_hidden_layers (4) entries, got "
             "[\"full_attention\"]");
  BOOST_TEST(error({{"sliding_window_pattern", 0}}) ==
             "cfg.json: sliding_window_pattern must be a positive integer, got 0");
  BOOST_TEST(parse_error({{"model_type", "gemma3"}}) ==
             "cfg.json: model_type \"gemma3\" (Gemma3ForConditionalGeneration, text and vision) "
             "is not supported; Gemma 3's text-only checkpoints (1B, model_type "
             "\"gemma3_text\") are");

  // transformers' module tree and class names; the blocks FSDP wraps and checkpoints.
  auto model = make_causal_lm(parse_config(small, "cfg.json"));
  BOOST_TEST(model->type_name() == "Gemma3ForCausalLM");
  BOOST_TEST(model->get_submodule("model")->type_name() == "Gemma3TextModel");
  const auto embed = model->get_submodule("model.embed_tokens");
  BOOST_TEST(embed->type_name() == "Gemma3TextScaledWordEmbedding");
  BOOST_TEST(embed->isinstance("Embedding"));
  BOOST_TEST(decoder_block_class(*model) == "Gemma3DecoderLayer");
  std::vector<std::string> children;
  for (const auto& [name, m] : model->get_submodule("model.layers.0")->named_children())
    children.push_back(name + ":" + m->type_name());
  BOOST_TEST(children == (std::vector<std::string>{"self_attn:Gemma3Attention", "mlp:Gemma3MLP",
                                                   "input_layernorm:Gemma3RMSNorm",
                                                   "post_attention_layernorm:Gemma3RMSNorm",
                                                   "pre_feedforward_layernorm:Gemma3RMSNorm",
                                                   "post_feedforward_layernorm:Gemma3RMSNorm"}),
             boost::test_tools::per_element());
  BOOST_TEST(model->get_submodule("model.layers.0.self_attn.q_norm")->type_name() ==
             "Gemma3RMSNorm");
  BOOST_TEST((model->get_submodule("model.layers.0.self_attn.k_norm")->param("weight").shape() ==
              Shape{6}));
  BOOST_TEST(model->get_submodule("model.layers.0.mlp.act_fn")->type_name() == "GELUTanh");
  BOOST_TEST(model->get_submodule("model.rotary_emb")->type_name() == "Gemma3RotaryEmbedding");
  // _init_weights: every Gemma3RMSNorm weight 0 (they scale by 1 + weight), the padding row 0.
  for (const auto& [name, p] : model->named_parameters())
    if (name.find("norm") != std::string::npos) BOOST_TEST(max(abs(p)).item() == 0.0, name);
  const Tensor row = model->get_submodule("model.embed_tokens")->param("weight").select(0, 0);
  BOOST_TEST(max(abs(row)).item() == 0.0);
  BOOST_TEST(max(abs(model->get_submodule("model.layers.0.mlp.up_proj")->param("weight"))).item() >
             0.0);
}

// Gemma 3 1B's config.json in the hub's legacy form (rope_theta, rope_local_base_freq,
// sliding_window_pattern, torch_dtype, two EOS ids): read and written back as transformers 5.24's
// AutoConfig + save_pretrained write it (tests/fixtures/hf_configs/gemma3_1b).
BOOST_AUTO_TEST_CASE(gemma3_1b_hub_config_is_written_back_as_transformers_saves_it) {
  const std::string dir = testing::fixture_path("hf_configs/gemma3_1b");
  const auto c = std::get<GemmaConfig>(load_config(dir + "/config.json"));
  BOOST_TEST(c.head_dim == 256);  // not 1152 / 4
  BOOST_TEST(c.window_of(0).value_or(0) == 512);
  BOOST_TEST(!c.window_of(5).has_value());
  std::ifstream in(dir + "/saved_by_transformers.json");
  json saved = json::parse(in), written = c.to_json("bfloat16");
  // transformers writes its own version; to_json keeps the file's (as for every model here).
  BOOST_TEST(written.at("transformers_version") == "4.50.0.dev0");
  saved.erase("transformers_version");
  written.erase("transformers_version");
  BOOST_TEST(written.dump(2) == saved.dump(2));
  auto model = make_causal_lm(c, TensorOptions(DType::Float32, kMeta));
  std::int64_t params = 0;
  for (const auto& [name, p] : model->named_parameters()) params += p.numel();
  BOOST_TEST(params == 999885952);  // Gemma 3 1B, the tied head counted once
}

// Gemma2Config of transformers 5.24: its defaults (both softcaps, every other layer sliding),
// Llama's rope fields; Gemma2ForCausalLM's class names, without q_norm and k_norm, one set of
// rotary buffers.
BOOST_AUTO_TEST_CASE(gemma2_reads_its_defaults_softcaps_and_class_names) {
  const auto d = std::get<GemmaConfig>(parse_config({{"model_type", "gemma2"}}, "cfg.json"));
  BOOST_TEST(d.vocab_size == 256000);
  BOOST_TEST(d.max_position_embeddings == 8192);
  BOOST_TEST(d.attention_softcap.value_or(0) == 50.0);
  BOOST_TEST(d.final_logit_softcapping.value_or(0) == 30.0);
  BOOST_TEST(d.window_of(0).value_or(0) == 4096);  // (0 + 1) % 2: sliding
  BOOST_TEST(!d.window_of(1).has_value());
  BOOST_TEST((d.full_rope.rope_type == "default" && d.full_rope.rope_theta == 10000.0));
  BOOST_TEST(d.sliding_rope.rope_theta == 10000.0);
  BOOST_TEST(!d.qk_norm());
  const json dj = d.to_json();
  BOOST_TEST(!dj.contains("_sliding_window_pattern"));
  BOOST_TEST(dj.at("use_bidirectional_attention").is_null());
  BOOST_TEST(dj.at("architectures") == json::array({"Gemma2ForCausalLM"}));
  // Gemma2Config(rope_theta=5.0, rope_scaling={linear, 2}).save_pretrained's rope_parameters:
  const json small = {{"model_type", "gemma2"},
                      {"hidden_size", 16},
                      {"num_attention_heads", 4},
                      {"num_key_value_heads", 2},
                      {"num_hidden_layers", 3},
                      {"intermediate_size", 32},
                      {"vocab_size", 50},
                      {"head_dim", 6},
                      {"attn_logit_softcapping", nullptr},
                      {"rope_theta", 5.0},
                      {"rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}}}};
  const auto g = std::get<GemmaConfig>(parse_config(small, "cfg.json"));
  BOOST_TEST(g.to_json().at("rope_parameters").dump() ==
             R"({"factor":2.0,"rope_theta":5.0,"rope_type":"linear"})");
  BOOST_TEST(!g.attention_softcap.has_value());
  BOOST_TEST(g.to_json().at("attn_logit_softcapping").is_null());
  BOOST_TEST(!g.to_json().contains("rope_theta"));
  auto model = make_causal_lm(g);
  BOOST_TEST(model->type_name() == "Gemma2ForCausalLM");
  BOOST_TEST(model->get_submodule("model")->type_name() == "Gemma2Model");
  BOOST_TEST(model->get_submodule("model.embed_tokens")->type_name() ==
             "Gemma2TextScaledWordEmbedding");
  BOOST_TEST(decoder_block_class(*model) == "Gemma2DecoderLayer");
  const auto attn = model->get_submodule("model.layers.0.self_attn");
  BOOST_TEST(attn->type_name() == "Gemma2Attention");
  std::vector<std::string> children;
  for (const auto& [name, m] : attn->named_children()) children.push_back(name);
  BOOST_TEST(children == (std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj"}),
             boost::test_tools::per_element());
  BOOST_TEST(model->get_submodule("model.norm")->type_name() == "Gemma2RMSNorm");
  std::vector<std::string> buffers;
  for (const auto& [name, b] : model->get_submodule("model.rotary_emb")->named_buffers())
    buffers.push_back(name);
  BOOST_TEST(buffers == (std::vector<std::string>{"inv_freq", "original_inv_freq"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(eos_token_id_may_be_a_number_a_list_or_null) {
  // Llama 3.1's config lists two end-of-sequence ids; generation stops at either.
  const TensorOptions meta(DType::Float32, kMeta);
  BOOST_TEST(make_causal_lm(parse_config(llama({{"eos_token_id", {128001, 128009}}}), "c"), meta)
                     ->eos_token_ids() == (std::vector<std::int64_t>{128001, 128009}),
             boost::test_tools::per_element());
  BOOST_TEST(make_causal_lm(parse_config(gpt2({}), "c"), meta)->eos_token_ids() ==
                 (std::vector<std::int64_t>{50256}),
             boost::test_tools::per_element());
  BOOST_TEST(make_causal_lm(parse_config(llama({{"eos_token_id", nullptr}}), "c"), meta)
                 ->eos_token_ids()
                 .empty());
}

BOOST_AUTO_TEST_CASE(fields_that_do_not_change_the_maths_are_written_back) {
  const json j =
      std::get<GPT2Config>(parse_config(gpt2({{"n_ctx", 8}, {"my_note", "kept"}}), "c")).to_json();
  BOOST_TEST(j.at("n_ctx") == 8);
  BOOST_TEST(j.at("my_note") == "kept");
}

BOOST_AUTO_TEST_CASE(unsupported_values_name_the_file_field_and_value) {
  const std::string acts =
      "supported: gelu_new, gelu_pytorch_tanh, gelu, gelu_fast, quick_gelu, relu, silu, swish, "
      "tanh, linear, gelu_python, gelu_python_tanh, gelu_accurate, gelu_10, sigmoid, relu2, "
      "relu6, leaky_relu, hardswish";
  BOOST_TEST(parse_error(gpt2({{"add_cross_attention", true}})) ==
             "cfg.json: add_cross_attention true is not supported (GPT2LMHeadModel here has no "
             "cross-attention)");
  BOOST_TEST(parse_error(gpt2({{"activation_function", "mish"}})) ==
             "cfg.json: activation_function \"mish\" is not supported (" + acts + ")");
  BOOST_TEST(parse_error(gpt2({{"n_embd", 30}})) ==
             "cfg.json: n_embd 30 is not divisible by "
             "n_head 4");
  BOOST_TEST(parse_error(gpt2({{"n_layer", "2"}})) ==
             "cfg.json: n_layer must be a positive integer, got \"2\"");
  BOOST_TEST(parse_error(gpt2({{"attn_pdrop", 1.5}})) ==
             "cfg.json: attn_pdrop must be in [0, 1], got 1.5");
  BOOST_TEST(parse_error(llama({{"hidden_size", 30}})) ==
             "cfg.json: hidden_size 30 is not divisible by num_attention_heads 4");
  BOOST_TEST(parse_error(llama({{"num_key_value_heads", 3}})) ==
             "cfg.json: num_attention_heads 4 is not divisible by num_key_value_heads 3");
  BOOST_TEST(parse_error(llama({{"head_dim", 5}})) ==
             "cfg.json: head_dim 5 is not supported (rotary embeddings need an even head_dim)");
  BOOST_TEST(parse_error(llama({{"hidden_act", "xielu"}})) ==
             "cfg.json: hidden_act \"xielu\" is not supported (" + acts + ")");
  BOOST_TEST(parse_error(llama({{"sliding_window", 128}})) ==
             "cfg.json: sliding_window 128 is not supported (only full attention; set it to "
             "null)");
  BOOST_TEST(parse_error(llama({{"rope_parameters", {{"rope_type", "yarn"}, {"factor", 4.0}}}})) ==
             "cfg.json: rope_parameters.rope_type \"yarn\" is not supported (supported: default, "
             "linear, llama3)");
  BOOST_TEST(parse_error(llama({{"rope_scaling", {{"type", "dynamic"}, {"factor", 2.0}}}})) ==
             "cfg.json: rope_parameters.rope_type \"dynamic\" is not supported (supported: "
             "default, linear, llama3)");
  BOOST_TEST(
      parse_error(llama({{"rope_parameters", {{"rope_type", "llama3"}, {"factor", 8.0}}}})) ==
      "cfg.json: rope_parameters.low_freq_factor is missing (rope_type \"llama3\" needs "
      "it)");
  BOOST_TEST(parse_error(llama({{"rope_parameters", {{"rope_type", "linear"}}}})) ==
             "cfg.json: rope_parameters.factor is missing (rope_type \"linear\" needs it)");
  BOOST_TEST(parse_error(llama({{"rope_parameters", {{"rope_theta", "big"}}}})) ==
             "cfg.json: rope_parameters: rope_theta must be a number, got \"big\"");
  BOOST_TEST(parse_error(llama({{"eos_token_id", "2"}})) ==
             "cfg.json: eos_token_id must be an integer, a list of integers or null, got \"2\"");
  BOOST_TEST(parse_error(gpt2({{"pad_token_id", "0"}})) ==
             "cfg.json: pad_token_id must be an integer or null, got \"0\"");
  BOOST_TEST(parse_error(llama({{"pad_token_id", 50}})) ==
             "cfg.json: pad_token_id 50 is outside the vocabulary [0, 50)");
  BOOST_TEST(parse_error({{"vocab_size", 5}}) ==
             "cfg.json: model_type is missing (supported: gpt2, llama, mistral, qwen2, qwen3, "
             "gemma3_text, gemma2)");
  BOOST_TEST(parse_error({{"model_type", "bert"}}) ==
             "cfg.json: model_type \"bert\" is not supported (supported: gpt2, llama, mistral, "
             "qwen2, qwen3, gemma3_text, gemma2)");
}

BOOST_AUTO_TEST_CASE(load_config_names_the_file) {
  TempDir dir;
  const std::string path = (dir.path / "config.json").string();
  BOOST_TEST(testing::error_message<InputError>([&] { load_config(dir.path.string()); }) ==
             path + ": cannot open the model config");
  std::ofstream(path) << "{\"model_type\": \"gpt2\",";
  BOOST_TEST(testing::error_message<InputError>([&] { load_config(dir.path.string()); }) ==
             path + ": not valid JSON (at byte 23)");
}

BOOST_AUTO_TEST_CASE(weight_loading_errors_name_the_file_and_tensor) {
  TempDir dir;
  const std::string path = (dir.path / "model.safetensors").string();
  const auto config = std::get<LlamaConfig>(parse_config(llama({}), "cfg.json"));
  LlamaForCausalLM model(config);
  auto state = model.state_dict();
  const auto load = [&] {
    return testing::error_message<InputError>([&] { load_safetensors_weights(model, path); });
  };
  auto without = [&](const std::string& key) {
    std::vector<std::pair<std::string, Tensor>> out;
    for (const auto& kv : state)
      if (kv.first != key) out.push_back(kv);
    return out;
  };
  io::save_safetensors(path, without("lm_head.weight"));  // untied: the head is required
  BOOST_TEST(load() == path + ": missing tensor of LlamaForCausalLM: lm_head.weight");
  auto extra = state;
  extra.emplace_back("model.layers.0.self_attn.rotary.weight", zeros({2}));
  io::save_safetensors(path, extra);
  BOOST_TEST(load() == path +
                           ": tensor 'model.layers.0.self_attn.rotary.weight' is not a "
                           "parameter or buffer of LlamaForCausalLM");
  auto bad = without("model.norm.weight");
  bad.emplace_back("model.norm.weight", zeros({17}));
  io::save_safetensors(path, bad);
  BOOST_TEST(load() == path +
                           ": tensor 'model.norm.weight' has shape [17], the model's "
                           "model.norm.weight has [16]");
  io::save_safetensors(path, state);
  BOOST_TEST(load() == "no error");
}

// transformers' tie_weights: a config that ties the head, over a file holding the head and the
// embedding with different values, loads both untied (a warning there); equal values stay tied.
BOOST_AUTO_TEST_CASE(a_tied_head_the_file_holds_with_other_values_is_untied_as_transformers) {
  TempDir dir;
  const std::string path = (dir.path / "model.safetensors").string();
  const json config = llama({{"tie_word_embeddings", true}});
  std::ofstream(dir.path / "config.json") << config.dump();
  LlamaForCausalLM untied(std::get<LlamaConfig>(parse_config(llama({}), "cfg.json")));
  untied.eval();
  auto state = untied.state_dict();
  io::save_safetensors(path, state);
  const auto loaded = from_pretrained(dir.path.string());
  loaded->eval();
  BOOST_TEST(loaded->config_json()["tie_word_embeddings"] == false);
  BOOST_TEST(loaded->named_parameters().size() == untied.named_parameters().size());
  const Tensor ids = from_vector(std::vector<std::int64_t>{1, 2, 3}, {1, 3});
  BOOST_TEST(testing::close(loaded->forward(ids), untied.forward(ids), 0, 0, "logits") == "");
  // A model already built tied cannot keep both: refused, naming both tensors.
  LlamaForCausalLM tied(std::get<LlamaConfig>(parse_config(config, "cfg.json")));
  BOOST_TEST(
      testing::error_message<InputError>([&] { load_safetensors_weights(tied, path); }) ==
      path +
          ": tensors 'lm_head.weight' and 'model.embed_tokens.weight' fill one tied parameter of "
          "LlamaForCausalLM but hold different values (transformers unties them: set "
          "tie_word_embeddings to false)");
  // The same values in both: tied, as transformers keeps them.
  Tensor embedding;
  for (const auto& [name, t] : state)
    if (name == "model.embed_tokens.weight") embedding = t;
  for (auto& [name, t] : state)
    if (name == "lm_head.weight") t = embedding;
  io::save_safetensors(path, state);
  BOOST_TEST(from_pretrained(dir.path.string())->config_json()["tie_word_embeddings"] == true);
  load_safetensors_weights(tied, path);
}

// transformers 5's from_pretrained loads in dtype="auto" by default: config.json's dtype (or the
// older torch_dtype), else the weights' first floating tensor's dtype; an explicit dtype wins. The
// bfloat16 model holds the file's values exactly.
BOOST_AUTO_TEST_CASE(from_pretrained_loads_in_the_checkpoints_dtype_as_transformers_auto) {
  TempDir dir;
  const std::string src = testing::hf_fixture_dir("llama_gqa");  // float32, "dtype": "float32"
  json config = json::parse(std::ifstream(src + "/config.json"));
  auto dtypes_of = [](CausalLM& m) {
    std::set<DType> out;
    for (const auto& [name, p] : m.named_parameters()) out.insert(p.dtype());
    return out;
  };
  auto write_config = [&](const json& c) { std::ofstream(dir.path / "config.json") << c.dump(); };
  const auto f32 = from_pretrained(src);
  BOOST_TEST((dtypes_of(*f32) == std::set<DType>{DType::Float32}));
  // bfloat16 weights saved as transformers saves them: config.json says so.
  std::vector<std::pair<std::string, Tensor>> bf16_state;
  for (const auto& [name, t] : f32->state_dict())
    bf16_state.emplace_back(name, t.to(DType::BFloat16));
  io::save_safetensors((dir.path / "model.safetensors").string(), bf16_state);
  config["dtype"] = "bfloat16";
  write_config(config);
  const auto bf16 = from_pretrained(dir.path.string());
  BOOST_TEST((dtypes_of(*bf16) == std::set<DType>{DType::BFloat16}));
  const auto bf16_params = bf16->named_parameters();
  for (const auto& [name, t] : bf16_state)
    for (const auto& [pname, p] : bf16_params)
      if (pname == name) BOOST_TEST(p.to_vector() == t.to_vector(), name);
  // An explicit dtype wins; the older key and no key at all (the weights' dtype) as transformers.
  BOOST_TEST((dtypes_of(*from_pretrained(dir.path.string(), DType::Float32)) ==
              std::set<DType>{DType::Float32}));
  config.erase("dtype");
  config["torch_dtype"] = "float16";
  write_config(config);
  BOOST_TEST((dtypes_of(*from_pretrained(dir.path.string())) == std::set<DType>{DType::Float16}));
  config.erase("torch_dtype");
  write_config(config);
  BOOST_TEST((dtypes_of(*from_pretrained(dir.path.string())) == std::set<DType>{DType::BFloat16}));
  config["dtype"] = "int8";
  write_config(config);
  BOOST_TEST(
      testing::error_message<InputError>([&] { from_pretrained(dir.path.string()); }) ==
      (dir.path / "config.json").string() +
          ": dtype \"int8\" is not a floating dtype (float32, bfloat16, float16 or float64)");
}

// transformers' from_pretrained reads generation_config.json, whose eos and pad ids generate uses
// over config.json's (Llama 3 Instruct lists <|end_of_text|> and <|eot_id|> there);
// save_pretrained writes it back; a malformed one is refused naming the file and field.
BOOST_AUTO_TEST_CASE(generation_config_json_gives_the_eos_and_pad_ids) {
  TempDir dir;
  const std::string src = testing::hf_fixture_dir("llama_gqa");  // eos 2, pad 0
  fs::copy_file(src + "/config.json", dir.path / "config.json");
  fs::copy_file(src + "/model.safetensors", dir.path / "model.safetensors");
  auto plain = from_pretrained(dir.path.string());
  BOOST_TEST(plain->eos_token_ids() == (std::vector<std::int64_t>{2}),
             boost::test_tools::per_element());
  BOOST_TEST(plain->pad_token_id().value_or(-1) == 0);
  const fs::path gen = dir.path / "generation_config.json";
  const json file = {{"eos_token_id", {7, 2}}, {"pad_token_id", 5}, {"do_sample", true}};
  std::ofstream(gen) << file.dump();
  auto model = from_pretrained(dir.path.string());
  BOOST_TEST(model->eos_token_ids() == (std::vector<std::int64_t>{7, 2}),
             boost::test_tools::per_element());
  BOOST_TEST(model->pad_token_id().value_or(-1) == 5);
  const fs::path out = dir.path / "saved";
  save_pretrained(out.string(), *model, model->state_dict());
  BOOST_TEST(json::parse(std::ifstream(out / "generation_config.json")) == file);
  const auto load = [&] {
    return testing::error_message<InputError>([&] { from_pretrained(dir.path.string()); });
  };
  std::ofstream(gen) << R"({"eos_token_id": [7, "2"]})";
  BOOST_TEST(load() == gen.string() +
                           ": eos_token_id must be an integer, a list of integers or null, got "
                           "[7,\"2\"]");
  std::ofstream(gen) << R"({"pad_token_id": 1.5})";
  BOOST_TEST(load() == gen.string() + ": pad_token_id must be an integer or null, got 1.5");
  std::ofstream(gen) << "{";
  BOOST_TEST(load() == gen.string() + ": not valid JSON (at byte 2)");
}

// generate's sampling defaults: transformers' (temperature 1, top_k 50, top_p 1, 20 new tokens)
// with generation_config.json's over them; do_sample stays the caller's (greedy by default).
// A value transformers refuses is one line naming the file and the field.
BOOST_AUTO_TEST_CASE(generation_config_json_gives_the_sampling_defaults) {
  TempDir dir;
  const std::string src = testing::hf_fixture_dir("llama_gqa");
  fs::copy_file(src + "/config.json", dir.path / "config.json");
  fs::copy_file(src + "/model.safetensors", dir.path / "model.safetensors");
  const GenerationOptions plain = generation_defaults(*from_pretrained(dir.path.string()));
  BOOST_TEST(plain.temperature == 1.0);
  BOOST_TEST(plain.top_k == 50);
  BOOST_TEST(plain.top_p == 1.0);
  BOOST_TEST(plain.max_new_tokens == 20);
  BOOST_TEST(!plain.do_sample);
  const fs::path gen = dir.path / "generation_config.json";
  std::ofstream(gen) << R"({"do_sample": true, "temperature": 0.6, "top_k": 7, "top_p": 0.9,
                            "max_new_tokens": 9})";
  const GenerationOptions o = generation_defaults(*from_pretrained(dir.path.string()));
  BOOST_TEST(o.temperature == 0.6);
  BOOST_TEST(o.top_k == 7);
  BOOST_TEST(o.top_p == 0.9);
  BOOST_TEST(o.max_new_tokens == 9);
  BOOST_TEST(!o.do_sample);
  std::ofstream(gen) << R"({"top_k": null, "max_new_tokens": null})";  // transformers' unset
  BOOST_TEST(generation_defaults(*from_pretrained(dir.path.string())).top_k == 50);
  const auto load = [&] {
    return testing::error_message<InputError>([&] { from_pretrained(dir.path.string()); });
  };
  for (const auto& [text, want] : std::vector<std::pair<std::string, std::string>>{
           {R"({"temperature": 0})", "temperature must be > 0, got 0"},
           {R"({"top_k": -1})", "top_k must be >= 0, got -1"},
           {R"({"top_p": 1.5})", "top_p must be in [0, 1], got 1.5"},
           {R"({"max_new_tokens": -2})", "max_new_tokens must be >= 0, got -2"},
           {R"({"max_length": 0})", "max_length must be >= 1, got 0"},
           {R"({"repetition_penalty": -1.5})", "repetition_penalty must be > 0, got -1.5"}}) {
    std::ofstream(gen) << text;
    BOOST_TEST(load() == gen.string() + ": " + want);
  }
}

// Llama checkpoints saved before inv_freq became non-persistent hold it per layer (and at the
// model): transformers ignores those keys (inv_freq is computed), and so does the loader here.
BOOST_AUTO_TEST_CASE(llama_files_with_old_rotary_inv_freq_buffers_load) {
  TempDir dir;
  const std::string path = (dir.path / "model.safetensors").string();
  const auto config = std::get<LlamaConfig>(parse_config(llama({}), "cfg.json"));
  LlamaForCausalLM source(config), target(config);
  auto state = source.state_dict();
  state.emplace_back("model.layers.0.self_attn.rotary_emb.inv_freq", ones({2}));
  state.emplace_back("model.rotary_emb.inv_freq", ones({2}));
  io::save_safetensors(path, state);
  load_safetensors_weights(target, path);
  const Tensor ids = from_vector(std::vector<std::int64_t>{1, 2, 3}, {1, 3});
  BOOST_TEST(testing::close(target.forward(ids), source.forward(ids), 0, 0, "logits") == "");
}

BOOST_AUTO_TEST_CASE(gpt2_keys_without_the_transformer_prefix_load) {
  // Hub GPT-2 files name h.0.attn.c_attn.weight, wte.weight, and hold attn.bias mask buffers.
  TempDir dir;
  const std::string path = (dir.path / "model.safetensors").string();
  const auto config = std::get<GPT2Config>(parse_config(gpt2({}), "cfg.json"));
  GPT2LMHeadModel source(config), target(config);
  std::vector<std::pair<std::string, Tensor>> hub;
  for (const auto& [key, t] : source.state_dict())
    if (key != "lm_head.weight")
      hub.emplace_back(key.substr(std::string("transformer.").size()), t);
  hub.emplace_back("h.0.attn.bias", ones({1, 1, 8, 8}));
  io::save_safetensors(path, hub);
  load_safetensors_weights(target, path);
  source.eval();  // dropout off
  target.eval();
  const Tensor ids = from_vector(std::vector<std::int64_t>{1, 2, 3}, {1, 3});
  BOOST_TEST(testing::close(target.forward(ids), source.forward(ids), 0, 0, "logits") == "");
}
