// fsdp-plan's library: suggestions, model files, units (against PyTorch's own
// _recursive_wrap and the examples of upstream's test_wrap.py), costs and warnings.
#define BOOST_TEST_MODULE tools_plan
#include <boost/test/unit_test.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/nn/nn.h"
#include "core/suggest.h"
#include "policies/policy_expr.h"
#include "tests/support/error_message.h"
#include "tests/support/fixture.h"
#include "tools/plan/format.h"
#include "tools/plan/model_export.h"
#include "tools/plan/model_file.h"
#include "tools/plan/plan_input.h"
#include "tools/plan/planner.h"

using namespace fsdp;
using namespace fsdp::plan;

namespace {

std::string model_path(const std::string& name) {
  return fsdp::testing::fixture_path("models/" + name);
}

Plan plan_of(const std::string& model, const std::string& policy,
             std::vector<std::string> ignore = {}, std::int64_t world = 1, bool mixed = false,
             bool orig = false, ShardingStrategy s = ShardingStrategy::FULL_SHARD) {
  PlanOptions o;
  if (!policy.empty()) o.policy = policies::parse_policy(policy);
  o.ignore = std::move(ignore);
  o.world_size = world;
  o.mixed_precision = mixed;
  o.use_orig_params = orig;
  o.sharding = s;
  return make_plan(load_model(model_path(model)).root, o);
}

std::vector<std::string> unit_fqns(const Plan& p) {
  std::vector<std::string> out;
  for (const auto& u : p.units) out.push_back(p.unit_fqn(u));
  return out;
}

std::vector<std::string> param_fqns(const Plan& plan, const Unit& u) {
  std::vector<std::string> out;
  for (const auto& p : u.params) out.push_back(plan.param_fqn(p));
  return out;
}

using Strings = std::vector<std::string>;

bool has(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

bool any_warning(const Plan& p, const std::string& needle) {
  for (const auto& w : p.warnings)
    if (has(w, needle)) return true;
  return false;
}

}  // namespace

// --- suggestions ------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(edit_distance_and_close_matches) {
  BOOST_TEST(edit_distance("kitten", "sitting") == 3u);
  BOOST_TEST(edit_distance("", "abc") == 3u);
  auto m = close_matches("Lineer", {"Linear", "LayerNorm", "Bilinear", "Module"});
  BOOST_TEST(m == Strings({"Linear"}));
  BOOST_TEST(did_you_mean("sise", {"size", "always"}) == " (did you mean 'size'?)");
  BOOST_TEST(did_you_mean("zzzzzz", {"size", "always"}) == "");
  BOOST_TEST(close_matches("linear", {"Linear"}) == Strings({"Linear"}));  // case only
}

// --- model files ------------------------------------------------------------------------------

namespace {
std::string load_error(const std::string& text) {
  return testing::error_message<InputError>([&] { parse_model(text, "m.json"); });
}
const char* kHead = R"({"format": "fsdp-model/1", "module": )";
}  // namespace

BOOST_AUTO_TEST_CASE(model_file_builds_meta_modules_with_sharing) {
  auto m = parse_model(std::string(kHead) + R"({"type": "Net", "bases": ["Base", "Module"],
    "children": [
      {"name": "a", "module": {"type": "Linear", "id": "m1",
                               "params": [{"name": "weight", "shape": [4, 5], "id": "p1"},
                                          {"name": "bias", "shape": [4], "dtype": "bfloat16",
                                           "requires_grad": false}],
                               "buffers": [{"name": "steps", "shape": [], "dtype": "int64"}]}},
      {"name": "b", "module": {"ref": "m1"}},
      {"name": "c", "module": {"type": "BatchNorm1d", "params": [{"name": "w", "ref": "p1"}]}}]}})",
                       "m.json");
  auto root = m.root;
  BOOST_TEST(m.num_definitions == 3u);
  BOOST_TEST(root->type_name() == "Net");
  BOOST_TEST(root->isinstance("Base"));
  BOOST_TEST(root->child("a") == root->child("b"));  // shared module
  auto& w = root->child("a")->param("weight");
  BOOST_TEST(w.device().is_meta());
  BOOST_TEST(w.numel() == 20);
  BOOST_TEST(w.requires_grad());
  BOOST_TEST(root->child("c")->param("w").impl() == w.impl());  // tied
  BOOST_TEST(root->child("a")->param("bias").dtype() == DType::BFloat16);
  BOOST_TEST(!root->child("a")->param("bias").requires_grad());
  BOOST_TEST(root->child("a")->buffer("steps").dtype() == DType::Int64);
  // Without "bases", torch.nn's classes are known.
  BOOST_TEST(root->child("c")->isinstance("_BatchNorm"));
  BOOST_TEST(root->child("c")->isinstance("_NormBase"));
  BOOST_TEST(root->num_parameters() == 24);
}

BOOST_AUTO_TEST_CASE(exported_model_has_ids_only_where_shared) {
  // A module in two slots and a weight tied across two modules: the exporter writes ids for
  // those two only, and reading the file back restores both identities.
  const std::string text = std::string(kHead) + R"({"type": "Net", "children": [
      {"name": "a", "module": {"type": "Linear", "id": "s", "params": [
          {"name": "weight", "shape": [4, 4], "id": "w"}, {"name": "bias", "shape": [4]}]}},
      {"name": "b", "module": {"ref": "s"}},
      {"name": "c", "module": {"type": "Linear", "params": [{"name": "weight", "ref": "w"}]}},
      {"name": "d", "module": {"type": "ReLU"}}]}})";
  auto root = parse_model(text, "m.json").root;
  const auto doc = nlohmann::json::parse(model_to_json(*root));
  const auto& children = doc["module"]["children"];
  BOOST_TEST(!doc["module"].contains("id"));
  BOOST_TEST(children[0]["module"]["id"] == "m0");
  BOOST_TEST(children[0]["module"]["params"][0]["id"] == "p0");
  BOOST_TEST(!children[0]["module"]["params"][1].contains("id"));
  BOOST_TEST(children[1]["module"] == nlohmann::json({{"ref", "m0"}}));
  BOOST_TEST(children[2]["module"]["params"][0] ==
             nlohmann::json({{"name", "weight"}, {"ref", "p0"}}));
  BOOST_TEST(!children[2]["module"].contains("id"));
  BOOST_TEST(!children[3]["module"].contains("id"));
  auto back = parse_model(doc.dump(), "exported.json").root;
  BOOST_TEST(back->child("a") == back->child("b"));
  BOOST_TEST(back->child("c")->param("weight").impl() == back->child("a")->param("weight").impl());
  BOOST_TEST(back->num_parameters() == 20);
}

BOOST_AUTO_TEST_CASE(exported_model_keeps_non_persistent_buffers) {
  // A non-persistent buffer (a rotary embedding's inv_freq) is written "persistent": false, as
  // tools/export_torch_model.py writes it, and reads back non-persistent.
  const std::string text = std::string(kHead) + R"({"type": "Rope", "buffers": [
      {"name": "inv_freq", "shape": [4], "persistent": false}, {"name": "steps", "shape": []}]}})";
  auto root = parse_model(text, "m.json").root;
  const auto doc = nlohmann::json::parse(model_to_json(*root));
  BOOST_TEST(doc["module"]["buffers"] ==
             nlohmann::json::parse(R"([{"name": "inv_freq", "shape": [4], "dtype": "float32",
                                        "persistent": false},
                                       {"name": "steps", "shape": [], "dtype": "float32"}])"));
  auto back = parse_model(doc.dump(), "exported.json").root;
  BOOST_TEST(back->named_persistent_buffers().size() == 1u);
  BOOST_TEST(back->named_persistent_buffers()[0].first == "steps");
}

BOOST_AUTO_TEST_CASE(hf_config_input) {
  // A directory or a file named config.json is a Hugging Face config, built on meta in float32
  // with one unit per decoder block as its default policy; any other name is a model file.
  BOOST_TEST(is_hf_config_input("some/dir/config.json"));
  BOOST_TEST(is_hf_config_input(testing::fixture_path("finetune/llama")));
  BOOST_TEST(!is_hf_config_input(testing::fixture_path("models/gpt2_small.json")));
  BOOST_TEST(!is_hf_config_input("config.json.bak"));
  const PlanInput llama = load_plan_input(testing::fixture_path("finetune/llama"));
  BOOST_TEST(llama.model.root->type_name() == "LlamaForCausalLM");
  BOOST_TEST(llama.default_policy == "transformer([LlamaDecoderLayer])");
  const auto params = llama.model.root->named_parameters();
  BOOST_TEST(params.size() == 21u);
  for (const auto& [name, p] : params) {
    BOOST_TEST(p.device().is_meta(), name);
    BOOST_TEST((p.dtype() == DType::Float32), name);
  }
  const PlanInput gpt2 = load_plan_input(testing::fixture_path("finetune/gpt2/config.json"));
  BOOST_TEST(gpt2.default_policy == "transformer([GPT2Block])");
  const PlanInput file = load_plan_input(testing::fixture_path("models/gpt2_small.json"));
  BOOST_TEST(file.default_policy.empty());
  BOOST_TEST(file.model.root->type_name() == "GPT2LMHeadModel");
}

namespace {

// Drops the empty lists the C++ exporter writes and the Python one leaves out.
void drop_empty_lists(nlohmann::json& j) {
  if (j.is_array())
    for (auto& e : j) drop_empty_lists(e);
  if (!j.is_object()) return;
  for (auto it = j.begin(); it != j.end();)
    if (it->is_array() && it->empty())
      it = j.erase(it);
    else
      drop_empty_lists(*it++);
}

}  // namespace

BOOST_AUTO_TEST_CASE(hf_config_models_are_transformers_trees) {
  // The models/ tree of each config, exported, is transformers' own exported by
  // tools/export_torch_model.py (tests/tools/gen_hf_plan_fixtures.py): class names and bases,
  // FQNs, shapes, dtypes, tied parameters, non-persistent buffers, dropout attributes.
  const std::vector<std::pair<std::string, std::string>> configs = {
      {"finetune_gpt2", "finetune/gpt2"},
      {"finetune_llama", "finetune/llama"},
      {"gpt2", "hf_configs/gpt2"},
      {"llama3_70b", "hf_configs/llama3_70b"},
      {"llama_tied_bias", "hf_configs/llama_tied_bias"},
      {"mistral_tiny", "hf_configs/mistral_tiny"},
      {"gpt2_untied", "hf_configs/gpt2_untied"}};
  for (const auto& [name, dir] : configs) {
    std::ifstream in(testing::fixture_path("models/hf/" + name + ".json"));
    BOOST_REQUIRE(in.good());
    const auto want = nlohmann::json::parse(in);
    auto got = nlohmann::json::parse(
        model_to_json(*load_plan_input(testing::fixture_path(dir)).model.root));
    drop_empty_lists(got);
    BOOST_TEST((got == want),
               name << ": " << nlohmann::json::diff(want, got).dump().substr(0, 400));
  }
}

BOOST_AUTO_TEST_CASE(model_file_errors) {
  std::string m = load_error("{\"format\": \"fsdp-model/1\",\n  \"module\": {\"type\": }}");
  BOOST_TEST(has(m, "m.json:2:22: malformed JSON"), m);
  m = load_error("{\"format\": \"fsdp-model/1\", \"module\": {\"type\": \"A\"}");
  BOOST_TEST((has(m, "m.json:1:") && has(m, "malformed JSON")), m);
  m = load_error(R"({"format": "fsdp-model/2", "module": {"type": "A"}})");
  BOOST_TEST(has(m,
                 "unknown format version \"fsdp-model/2\" (this planner reads "
                 "\"fsdp-model/1\")"),
             m);
  m = load_error(R"({"module": {"type": "A"}})");
  BOOST_TEST(has(m, "missing \"format\""), m);
  m = load_error(std::string(kHead) + R"({"type": "A", "children": [{"name": "x",
      "module": {"ref": "m9"}}]}})");
  BOOST_TEST(has(m, "at module.children[0].module.ref: ref \"m9\" names no module"), m);
  m = load_error(std::string(kHead) + R"({"type": "A", "children": [
      {"name": "x", "module": {"ref": "m1"}}, {"name": "y", "module": {"type": "B", "id": "m1"}}]}})");
  BOOST_TEST(has(m, "ref \"m1\" is used before the module with id \"m1\" is defined"), m);
  m = load_error(std::string(kHead) + R"({"type": "A", "params": [{"name": "w", "ref": "p0"}]}})");
  BOOST_TEST(has(m, "at module.params[0].ref: ref \"p0\" names no parameter"), m);
  m = load_error(std::string(kHead) +
                 R"({"type": "A", "params": [{"name": "w", "shape": [4, -1]}]}})");
  BOOST_TEST(has(m,
                 "at module.params[0].shape: shape must be a list of non-negative integers, got "
                 "[4,-1]"),
             m);
  m = load_error(std::string(kHead) +
                 R"({"type": "A", "params": [{"name": "w", "shape": [4.5]}]}})");
  BOOST_TEST(has(m, "shape must be a list of non-negative integers, got [4.5]"), m);
  m = load_error(std::string(kHead) +
                 R"({"type": "A", "buffers": [{"name": "b", "shape": ["4"]}]}})");
  BOOST_TEST(has(m, "at module.buffers[0].shape"), m);
  m = load_error(std::string(kHead) + R"({"type": "A", "params": [{"name": "w", "shape": 4}]}})");
  BOOST_TEST(has(m, "shape must be a list of integers, got 4"), m);
  m = load_error(std::string(kHead) + R"({"type": "A", "params": [{"name": "w", "shape": [1],
      "dtype": "float8"}]}})");
  BOOST_TEST(has(m, "unknown dtype 'float8'"), m);
  m = load_error(std::string(kHead) + R"({"type": "A", "id": "m1", "children": [
      {"name": "x", "module": {"ref": "m1"}}]}})");
  BOOST_TEST(has(m, "names an enclosing module"), m);
  m = load_error(std::string(kHead) + R"({"type": "A", "children": [
      {"name": "x", "module": {"type": "B", "id": "d"}}, {"name": "y", "module": {"type": "B",
      "id": "d"}}]}})");
  BOOST_TEST(has(m, "id \"d\" is defined twice"), m);
  m = load_error(std::string(kHead) + R"({"type": "A", "children": [
      {"name": "x", "module": {"type": "B"}}, {"name": "x", "module": {"type": "B"}}]}})");
  BOOST_TEST((has(m, "at module.children[1]") && has(m, "already exists")), m);
  m = load_error(std::string(kHead) + R"({"bases": []}})");
  BOOST_TEST(has(m, "at module: missing \"type\""), m);
  m = testing::error_message<InputError>([] { load_model("/nonexistent/model.json"); });
  BOOST_TEST(has(m, "/nonexistent/model.json: cannot open the model file"), m);
  BOOST_TEST((line_and_column("ab\ncd", 4) == std::make_pair(std::size_t{2}, std::size_t{2})));
}

// --- units: upstream test_wrap.py examples ----------------------------------------------------

BOOST_AUTO_TEST_CASE(no_policy_gives_only_the_root_unit) {
  auto p = plan_of("nested_sequential.json", "");
  BOOST_TEST(unit_fqns(p) == Strings({""}));
  BOOST_TEST(p.units[0].numel == 120);
  BOOST_TEST(p.units[0].params.size() == 8u);
}

BOOST_AUTO_TEST_CASE(always_wrap_nested_sequential) {
  // test_always_wrap: every module is a unit, children first, the root last.
  auto p = plan_of("nested_sequential.json", "always");
  BOOST_TEST(unit_fqns(p) == Strings({"0", "1", "2.0", "2.1", "2", ""}));
  BOOST_TEST(param_fqns(p, p.units[2]) == Strings({"2.0.weight", "2.0.bias"}));
  BOOST_TEST(p.units[4].params.empty());
  BOOST_TEST(p.units[5].params.empty());
  BOOST_TEST(p.units[2].parent == 4);
  BOOST_TEST(p.units[4].parent == 5);
  BOOST_TEST(p.units[5].parent == -1);
}

BOOST_AUTO_TEST_CASE(size_based_nested_sequential) {
  // test_auto_wrap_api: only the inner Sequential (60 numel) reaches 40.
  auto p = plan_of("nested_sequential.json", "size(min_num_params=40)");
  BOOST_TEST(unit_fqns(p) == Strings({"2", ""}));
  BOOST_TEST(param_fqns(p, p.units[0]) ==
             Strings({"2.0.weight", "2.0.bias", "2.1.weight", "2.1.bias"}));
  BOOST_TEST(param_fqns(p, p.units[1]) == Strings({"0.weight", "0.bias", "1.weight", "1.bias"}));
  // test_main_wrap_api: min_num_params=0 wraps everything.
  BOOST_TEST(unit_fqns(plan_of("nested_sequential.json", "size(min_num_params=0)")) ==
             Strings({"0", "1", "2.0", "2.1", "2", ""}));
}

BOOST_AUTO_TEST_CASE(preset_exclude_and_force_leaf) {
  // test_auto_wrap_preset_exclude_wrap: a ModuleList root of two 30-numel Linears.
  auto p = plan_of("modulelist_2x_linear5.json", "size(min_num_params=40)");
  BOOST_TEST(unit_fqns(p) == Strings({""}));
  BOOST_TEST(any_warning(p,
                         "FSDP will not all-gather parameters for containers that do not "
                         "implement forward: ModuleList"));
  // ..._include_children: the 110-numel Linear is wrapped.
  BOOST_TEST(unit_fqns(plan_of("modulelist_linear10.json", "size(min_num_params=40)")) ==
             Strings({"0", ""}));
  // test_auto_wrap_preset_force_leaf: MultiheadAttention is neither recursed into nor wrapped.
  p = plan_of("force_leaf_mha.json", "size(min_num_params=40)");
  BOOST_TEST(unit_fqns(p) == Strings({"0", ""}));
  BOOST_TEST(param_fqns(p, p.units[1]) == Strings({"1.in_proj_weight", "1.in_proj_bias",
                                                   "1.out_proj.weight", "1.out_proj.bias"}));
  // ..._force_leaf_custom: Linear as a force-leaf class leaves only the root.
  p = plan_of("force_leaf_custom.json",
              "size(min_num_params=40, force_leaf=[MultiheadAttention, Linear])");
  BOOST_TEST(unit_fqns(p) == Strings({""}));
}

BOOST_AUTO_TEST_CASE(ignored_modules) {
  // test_always_wrap_with_ignored_modules
  auto p = plan_of("nested_sequential.json", "always", {"1", "2.0"});
  BOOST_TEST(unit_fqns(p) == Strings({"0", "2.1", "2", ""}));
  BOOST_TEST(p.ignored_numel == 60);
  for (const auto& u : p.units)
    for (const auto& f : param_fqns(p, u))
      BOOST_TEST((f.rfind("1.", 0) != 0 && f.rfind("2.0.", 0) != 0));
  // test_auto_wrap_with_ignored_modules: the inner Sequential drops to 30 < 40.
  p = plan_of("nested_sequential.json", "size(min_num_params=40)", {"1", "2.0"});
  BOOST_TEST(unit_fqns(p) == Strings({""}));
  BOOST_TEST(param_fqns(p, p.units[0]) ==
             Strings({"0.weight", "0.bias", "2.1.weight", "2.1.bias"}));
  std::string m = testing::error_message<InputError>(
      [] { plan_of("nested_sequential.json", "always", {"2.3"}); });
  BOOST_TEST(has(m, "--ignore '2.3': the model has no module at that path (did you mean"), m);
}

BOOST_AUTO_TEST_CASE(transformer_with_shared_params) {
  // test_transformer_auto_wrap_policy / test_module_wrap_policy / ..._callable: the same units.
  const Strings want{"transformer.encoder.layers.0", "transformer.encoder.layers.1",
                     "transformer.decoder.layers.0", "transformer.decoder.layers.1", ""};
  for (const char* pol : {"transformer([TransformerEncoderLayer, TransformerDecoderLayer])",
                          "modules([TransformerEncoderLayer, TransformerDecoderLayer])",
                          "or(modules([TransformerEncoderLayer, TransformerDecoderLayer]))"}) {
    auto p = plan_of("transformer_shared_params.json", pol, {}, 2);
    BOOST_TEST(unit_fqns(p) == want, pol);
    const Unit& root = p.units.back();
    auto ps = param_fqns(p, root);
    // The tied output_proj.weight stays in the root, managed once under its first name.
    BOOST_TEST(ps.front() == "embed_tokens.weight");
    BOOST_TEST(std::count(ps.begin(), ps.end(), "output_proj.weight") == 0);
    BOOST_TEST(std::count(ps.begin(), ps.end(), "output_proj.bias") == 1);
    BOOST_TEST(p.units[0].numel == 1432);
    BOOST_TEST(p.units[2].numel == 2552);
    std::int64_t total = 0;
    for (const auto& u : p.units) total += u.numel;
    BOOST_TEST(total == 8427);  // unique parameter numel
    BOOST_TEST(p.warnings.empty());
  }
}

BOOST_AUTO_TEST_CASE(shared_parameter_across_units_warns) {
  auto p = plan_of("transformer_shared_params.json", "individually([Embedding, Linear])");
  BOOST_TEST(any_warning(p, "parameter 'output_proj.weight' is shared with 'embed_tokens.weight'"));
  BOOST_TEST(any_warning(p, "unit 'embed_tokens' (Embedding)"));
  BOOST_TEST(any_warning(p, "unit 'output_proj' (Linear)"));
  // The first unit constructed manages it.
  for (const auto& u : p.units)
    if (p.unit_fqn(u) == "output_proj")
      BOOST_TEST(param_fqns(p, u) == Strings({"output_proj.bias"}));
}

BOOST_AUTO_TEST_CASE(batchnorm_individually_and_mixed_precision) {
  // test_wrap_batchnorm_individually
  const Strings bns{"bn1", "bn2", "bn3", "sync_bn", ""};
  auto p = plan_of("batchnorm_net.json", "individually([_BatchNorm])");
  BOOST_TEST(unit_fqns(p) == bns);
  BOOST_TEST(param_fqns(p, p.units.back()) == Strings({"lin.weight"}));
  // Mixed precision: BatchNorms become their own full-precision units whatever the policy.
  p = plan_of("batchnorm_net.json", "size(min_num_params=1e8)", {}, 8, true);
  BOOST_TEST(unit_fqns(p) == bns);
  for (std::size_t i = 0; i < 4; ++i) BOOST_TEST(!p.units[i].mixed_precision);
  BOOST_TEST(p.units.back().mixed_precision);
  BOOST_TEST(any_warning(p, "Both mixed precision and an auto_wrap_policy were specified to FSDP"));
  // The root's all-gather is in bfloat16 (100 numel padded to 104), the BatchNorms' in float32.
  BOOST_TEST(p.units.back().unsharded_bytes == 104 * 2);
  BOOST_TEST(p.units[0].unsharded_bytes == 24 * 4);
  // The Policy-object path does the same.
  p = plan_of("batchnorm_net.json", "modules([Linear])", {}, 8, true);
  BOOST_TEST(unit_fqns(p) == Strings({"lin", "bn1", "bn2", "bn3", "sync_bn", ""}));
}

BOOST_AUTO_TEST_CASE(lora_frozen_parameters) {
  // test_frozen_params: error without use_orig_params, warning with it.
  const std::string pol = "modules([LoraAttention, LoraMLP, LoraDecoder])";
  try {
    plan_of("lora_model.json", pol);
    BOOST_FAIL("expected ValueError");
  } catch (const ValueError& e) {
    std::string m = e.what();
    BOOST_TEST(has(m,
                   "layers.0.attn has both parameters with requires_grad=True and False. FSDP "
                   "does not support wrapping such modules when use_orig_params=False."),
               m);
  }
  auto p = plan_of("lora_model.json", pol, {}, 8, false, true);
  BOOST_TEST(any_warning(p,
                         "layers.0.attn has both parameters with requires_grad=True and False. "
                         "We do not recommend wrapping such modules"));
  // Wrapping the trainable LoRA Linears separately is fine.
  p = plan_of("lora_model.json", "modules([LoraAttention, LoraMLP, LoraDecoder, Linear])");
  // Per decoder: itself, attn with 6 Linears, mlp with 2 Linears.
  BOOST_TEST(p.units.size() == 4u * (1 + 7 + 3) + 1);
  // Callable policies are not validated upstream, but FlatParamHandle would reject the unit.
  std::string m;
  try {
    plan_of("lora_model.json", "transformer([LoraAttention])");
  } catch (const ValueError& e) {
    m = e.what();
  }
  BOOST_TEST(has(m,
                 "unit 'layers.0.attn' (LoraAttention) would flatten parameters with "
                 "requires_grad=True and False"),
             m);
}

BOOST_AUTO_TEST_CASE(policy_class_matching_nothing_warns) {
  auto p = plan_of("transformer_shared_params.json", "transformer([TransformerEncoderLayr])");
  BOOST_TEST(unit_fqns(p) == Strings({""}));
  BOOST_TEST(any_warning(p,
                         "policy class 'TransformerEncoderLayr' (--policy column 14) matches no "
                         "module of the model (did you mean 'TransformerEncoderLayer'"));
  // Base classes count: _BatchNorm matches BatchNorm1d.
  BOOST_TEST(!any_warning(plan_of("batchnorm_net.json", "individually([_BatchNorm])"),
                          "matches no module"));
}

// --- against PyTorch's _recursive_wrap (tests/tools/gen_plan_fixtures.py) ---------------------

BOOST_AUTO_TEST_CASE(units_match_pytorch) {
  std::ifstream in(model_path("torch_expected.json"));
  BOOST_REQUIRE(in.good());
  auto doc = nlohmann::json::parse(in);
  std::size_t n = 0;
  for (const auto& c : doc["cases"]) {
    std::string pol = c["policy"].is_null() ? "" : c["policy"].get<std::string>();
    auto p = plan_of(c["model"], pol, c["ignore"].get<Strings>(), 4);
    std::vector<std::pair<std::string, Strings>> got, want;
    for (const auto& u : p.units) got.emplace_back(p.unit_fqn(u), param_fqns(p, u));
    for (const auto& u : c["units"]) want.emplace_back(u["fqn"], u["params"].get<Strings>());
    BOOST_TEST((got == want), c["model"].get<std::string>() << " " << pol);
    ++n;
  }
  BOOST_TEST(n > 200u);
}

// --- costs ------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(sharding_padding_and_memory) {
  // Two 30-numel Linears as units over 4 ranks: 30 -> 32 padded, 8 per rank.
  auto p = plan_of("nested_sequential.json", "always", {}, 4);
  const Unit& u = p.units[0];
  BOOST_TEST(u.numel == 30);
  BOOST_TEST(u.flat_numel == 30);
  BOOST_TEST(u.shard_numel == 8);
  BOOST_TEST(u.padded_numel == 32);
  BOOST_TEST(u.padding == 2);
  BOOST_TEST(u.bytes_per_dtype.at(DType::Float32) == 120);
  BOOST_TEST(u.per_rank.params == 32);
  BOOST_TEST(u.per_rank.grads == 32);
  BOOST_TEST(u.per_rank.optimizer == 64);  // Adam: 2 float32 states per element
  BOOST_TEST(u.unsharded_bytes == 128);
  BOOST_TEST(u.all_gathers_per_step == 2);  // forward and backward (FULL_SHARD)
  BOOST_TEST(u.all_gather_bytes == 256);
  BOOST_TEST(u.reduce_scatter_bytes == 128);
  const Unit& root = p.units.back();
  BOOST_TEST(root.numel == 0);
  BOOST_TEST(root.all_gathers_per_step == 1);  // the root stays unsharded between fwd and bwd
  // Peak unsharded: the root (0) plus the two largest resharding units (each 128 B).
  BOOST_TEST(p.totals.peak_unsharded_param_bytes == 256);
  BOOST_TEST(p.totals.peak_unsharded_grad_bytes == 128);
  BOOST_TEST(p.totals.per_rank.params == 4 * 32);
  BOOST_TEST(p.totals.all_gather_bytes == 4 * 256);

  // SHARD_GRAD_OP keeps everything unsharded after forward: one all-gather per unit.
  p = plan_of("nested_sequential.json", "always", {}, 4, false, false,
              ShardingStrategy::SHARD_GRAD_OP);
  BOOST_TEST(p.units[0].all_gathers_per_step == 1);
  BOOST_TEST(p.totals.peak_unsharded_param_bytes == 4 * 128);
  // NO_SHARD: every rank holds everything and all-reduces gradients.
  p = plan_of("nested_sequential.json", "always", {}, 4, false, false, ShardingStrategy::NO_SHARD);
  BOOST_TEST(p.units[0].shard_numel == 30);
  BOOST_TEST(p.units[0].all_gather_bytes == 0);
  BOOST_TEST(p.units[0].all_reduce_bytes == 120);
  // World size 1 clamps to NO_SHARD, as FSDP does.
  p = plan_of("nested_sequential.json", "always", {}, 1);
  BOOST_TEST((p.sharding == ShardingStrategy::NO_SHARD));
  BOOST_TEST(any_warning(p,
                         "FSDP is switching to use `NO_SHARD` instead of "
                         "ShardingStrategy.FULL_SHARD since the world size is 1."));
  // use_orig_params aligns each original parameter to 16 bytes: 25 -> 28, + 5 = 33 -> 36.
  p = plan_of("nested_sequential.json", "always", {}, 4, false, true);
  BOOST_TEST(p.units[0].flat_numel == 36);
  BOOST_TEST(p.units[0].shard_numel == 9);
  // ... to 16 bytes of the compute dtype under mixed precision, as the runtime (upstream's
  // _get_aligned_numel(_fwd_bwd_param_dtype)): bf16, 25 -> 32, + 5 = 37 -> 40.
  p = plan_of("nested_sequential.json", "always", {}, 4, true, true);
  BOOST_TEST(p.units[0].flat_numel == 40);
  BOOST_TEST(p.units[0].shard_numel == 10);
  // HYBRID_SHARD shards within a node of 8 and all-reduces shards across nodes.
  p = plan_of("gpt2_small.json", "transformer([GPT2Block])", {}, 64, false, false,
              ShardingStrategy::HYBRID_SHARD);
  BOOST_TEST(p.shard_group_size == 8);
  BOOST_TEST(p.units[0].all_reduce_bytes == p.units[0].shard_numel * 4);
}

BOOST_AUTO_TEST_CASE(gpt2_small_worked_example) {
  auto p = plan_of("gpt2_small.json", "transformer([GPT2Block])", {}, 8);
  BOOST_TEST(p.model_numel == 124439808);  // GPT-2 small, tied lm_head counted once
  BOOST_TEST(p.units.size() == 13u);
  BOOST_TEST(p.unit_fqn(p.units[0]) == "transformer.h.0");
  BOOST_TEST(p.units[0].numel == 7087872);
  const Unit& root = p.units.back();
  BOOST_TEST(root.numel == 124439808 - 12 * 7087872);
  BOOST_TEST(param_fqns(p, root).front() == "transformer.wte.weight");
  BOOST_TEST(p.warnings.empty());
  std::string json = format_json(p);
  auto j = nlohmann::json::parse(json);
  BOOST_TEST(j["units"].size() == 13u);
  BOOST_TEST(j["units"][12]["fqn"] == "");
  BOOST_TEST(j["per_rank"]["params_bytes"].get<std::int64_t>() == p.totals.per_rank.params);
  BOOST_TEST(has(format_table(p), "[#0] 0 (GPT2Block)"));
  BOOST_TEST(has(format_dot(p), "subgraph cluster_unit12"));
}

BOOST_AUTO_TEST_CASE(human_readable_sizes) {
  BOOST_TEST(human_bytes(512) == "512 B");
  BOOST_TEST(human_bytes(1536) == "1.50 KiB");
  BOOST_TEST(human_bytes(3LL << 30) == "3.00 GiB");
  BOOST_TEST(human_count(124439808) == "124M");
  BOOST_TEST(human_count(1500) == "1.5K");
}

// --batch/--seq: the activation estimate of a layer whose terms are counted by hand (N = 2 x 3
// rows, float32): TransformerEncoderLayer(d 8, 2 heads, ff 16, GELU) then a Linear(8 -> 10) head.
BOOST_AUTO_TEST_CASE(activation_estimate_counts_what_each_module_saves) {
  nn::TransformerLayerOptions o;
  o.dim_feedforward = 16;
  o.dropout = 0.0;
  o.activation = "gelu";
  auto seq = std::make_shared<nn::Sequential>();
  seq->append(std::make_shared<nn::TransformerEncoderLayer>(8, 2, o));
  seq->append(std::make_shared<nn::Linear>(8, 10));
  // Through the model file, as fsdp-plan reads it: the attributes travel.
  auto root = parse_model(model_to_json(*seq), "m.json").root;
  PlanOptions opts;
  opts.batch = 2;
  opts.seq = 3;
  const Plan p = make_plan(root, opts);
  BOOST_REQUIRE(p.activations.has_value());
  const auto& a = *p.activations;
  const std::int64_t N = 6, f = 4;
  BOOST_TEST(a.by_type.at("TransformerEncoderLayer") == N * 16 * f);                // GELU's input
  BOOST_TEST(a.by_type.at("MultiheadAttention") == 4 * N * 8 * f + N * 2 * 3 * f);  // +probs
  BOOST_TEST(a.by_type.at("NonDynamicallyQuantizableLinear") == N * 8 * f);         // out_proj
  BOOST_TEST(a.by_type.at("Linear") == N * (8 + 16 + 8) * f);            // linear1, 2, head
  BOOST_TEST(a.by_type.at("LayerNorm") == 2 * (N * 8 * f + N * 2 * 4));  // input + stats
  BOOST_TEST(a.by_type.at("loss") == 2 * N * 10 * f);                    // logits + grad
  BOOST_TEST(a.bytes == 3216);
  BOOST_TEST(a.assumed.empty());
  BOOST_TEST(a.not_estimated.empty());
  const Totals& t = p.totals;
  BOOST_TEST(t.activation_bytes == 3216);
  BOOST_TEST(t.peak_with_activations_bytes ==
             std::max(t.peak_bytes, t.per_rank.params + t.per_rank.optimizer +
                                        t.peak_unsharded_param_bytes + 3216));
  // In the table and in JSON.
  const std::string table = format_table(p);
  BOOST_TEST(table.find("activations (estimate, batch 2 x seq 3)") != std::string::npos);
  BOOST_TEST(table.find("peak total incl. activations") != std::string::npos);
  const auto j = nlohmann::json::parse(format_json(p));
  BOOST_TEST(j["per_rank"]["activation_bytes"].get<std::int64_t>() == 3216);
  BOOST_TEST(j["per_rank"]["activations"]["by_type"]["loss"].get<std::int64_t>() == 480);
}

BOOST_AUTO_TEST_CASE(activation_estimate_says_what_it_assumed_and_skipped) {
  // No attributes (an older model file): heads assumed from head_dim 64, ReLU assumed; a custom
  // module's own forward is listed.
  const std::string text = std::string(kHead) + R"({"type": "Net", "bases": ["Module"],
      "children": [{"name": "attn", "module": {"type": "MultiheadAttention",
        "params": [{"name": "in_proj_weight", "shape": [384, 128], "dtype": "float32"}]}}]}})";
  PlanOptions opts;
  opts.batch = 1;
  opts.seq = 4;
  const Plan p = make_plan(parse_model(text, "m.json").root, opts);
  const auto& a = *p.activations;
  BOOST_TEST(a.by_type.at("MultiheadAttention") == 4 * 4 * 128 * 4 + 4 * 2 * 4 * 4);
  BOOST_REQUIRE(a.assumed.size() == 1u);
  BOOST_TEST(a.assumed[0] ==
             "MultiheadAttention: num_heads not in the model file: 2 assumed (head_dim 64)");
  BOOST_TEST(a.not_estimated == std::vector<std::string>{"Net"});
  PlanOptions half;
  half.batch = 1;
  BOOST_TEST(testing::error_message<InputError>([&] {
               make_plan(parse_model(text, "m.json").root, half);
             }) == "--batch and --seq go together and must be positive (got --batch 1 --seq 0)");
}
