// CheckpointWrapper and apply_activation_checkpointing: structure, cleaned names and state dicts,
// the three policy paths, the REENTRANT warning, and gradients equal to the unwrapped model.
#include <algorithm>
#include <boost/test/unit_test.hpp>

#include "core/warnings.h"
#include "ops/checkpoint_wrapper.h"
#include "policies/custom_policy.h"
#include "policies/module_wrap_policy.h"
#include "tests/ops/ops_test_models.h"

using namespace fsdp;
using namespace fsdp::ops;

namespace {
std::vector<std::string> names(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> out;
  for (const auto& [n, t] : named) out.push_back(n);
  return out;
}
std::vector<std::string> wrapped_children(nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& [name, mod] : m.named_modules())
    if (mod->type_name() == "CheckpointWrapper") out.push_back(name);
  return out;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_wrapper_module)

BOOST_AUTO_TEST_CASE(the_wrapper_holds_its_module_and_cleans_names) {
  auto lin = std::make_shared<nn::Linear>(3, 2);
  auto w = std::make_shared<CheckpointWrapper>(lin);
  BOOST_TEST(w->type_name() == "CheckpointWrapper");
  BOOST_TEST(w->isinstance("ActivationWrapper"));
  BOOST_TEST(w->module() == lin);
  BOOST_TEST(w->has_child("_checkpoint_wrapped_module"));
  BOOST_TEST(names(w->named_parameters()) == (std::vector<std::string>{"weight", "bias"}));
  BOOST_TEST(names(w->state_dict("w")) == (std::vector<std::string>{"w.weight", "w.bias"}));
  // Loading clean keys puts them back under the wrapped module.
  Tensor new_weight = ones({2, 3});
  w->load_state_dict({{"weight", new_weight}, {"bias", zeros({2})}});
  BOOST_TEST(lin->param("weight").to_vector() == new_weight.to_vector());
  BOOST_TEST(clean_checkpoint_name("a._checkpoint_wrapped_module.b._checkpoint_wrapped_module.c") ==
             "a.b.c");
}

BOOST_AUTO_TEST_CASE(reentrant_warns_as_upstream) {
  WarningCapture warnings;
  auto w = checkpoint_wrapper(std::make_shared<nn::Linear>(2, 2), CheckpointImpl::REENTRANT);
  BOOST_REQUIRE(warnings.warnings().size() == 1u);
  BOOST_TEST(warnings.warnings()[0].category == "FutureWarning");
  BOOST_TEST(warnings.warnings()[0].message ==
             "Please specify CheckpointImpl.NO_REENTRANT as CheckpointImpl.REENTRANT will soon be "
             "removed as the default and eventually deprecated.");
  BOOST_TEST((*w)(ones({1, 2})).tensor().shape() == (Shape{1, 2}));
}

BOOST_AUTO_TEST_CASE(apply_with_check_fn_wraps_matching_children_never_the_root) {
  auto model = ops_test::transformer_stack(3, DType::Float64);
  apply_activation_checkpointing(model, {}, [](nn::Module& m) {
    return m.type_name() == "TransformerEncoderLayer" || m.type_name() == "Sequential";
  });
  BOOST_TEST(wrapped_children(*model) == (std::vector<std::string>{"0", "1", "2"}));
  BOOST_TEST(model->type_name() == "Sequential");
  // Clean names equal the unwrapped model's.
  auto plain = ops_test::transformer_stack(3, DType::Float64);
  BOOST_TEST(names(clean_named_parameters(*model)) == names(plain->named_parameters()));
  BOOST_TEST(names(clean_state_dict(*model)) == names(plain->state_dict()));
  BOOST_TEST(model->named_parameters()[0].first ==
             "0._checkpoint_wrapped_module.self_attn.in_proj_weight");
  load_clean_state_dict(*model, plain->state_dict());
}

BOOST_AUTO_TEST_CASE(apply_with_a_module_wrap_policy_or_a_custom_policy) {
  auto model = ops_test::transformer_stack(2, DType::Float32);
  apply_activation_checkpointing(
      model, {}, {}, policies::ModuleWrapPolicy::make(nn::ClassSet{"MultiheadAttention"}));
  BOOST_TEST(wrapped_children(*model) == (std::vector<std::string>{"0.self_attn", "1.self_attn"}));

  auto model2 = ops_test::transformer_stack(2, DType::Float32);
  int calls = 0;
  policies::WrapperFn counting = [&](nn::ModulePtr m, const policies::WrapperOptions&) {
    ++calls;
    return checkpoint_wrapper(std::move(m));
  };
  apply_activation_checkpointing(
      model2, counting, {},
      policies::CustomPolicy::make(
          [](nn::Module& m) -> policies::CustomPolicyResult { return m.type_name() == "Linear"; }));
  BOOST_TEST(calls == 4);
  BOOST_TEST(wrapped_children(*model2) ==
             (std::vector<std::string>{"0.linear1", "0.linear2", "1.linear1", "1.linear2"}));
}

BOOST_AUTO_TEST_CASE(a_wrapped_stack_trains_like_the_plain_one) {
  auto plain = ops_test::transformer_stack(3, DType::Float64, 0.1, 21);
  auto wrapped = ops_test::transformer_stack(3, DType::Float64, 0.1, 21);
  apply_activation_checkpointing(
      wrapped, {}, [](nn::Module& m) { return m.type_name() == "TransformerEncoderLayer"; });
  Tensor x = randn({2, 3, 8}, DType::Float64);
  manual_seed(5);
  sum((*plain)(x).tensor()).backward();
  manual_seed(5);
  const auto before = checkpoint_recompute_count();
  sum((*wrapped)(x).tensor()).backward();
  BOOST_TEST(checkpoint_recompute_count() - before == 3);
  BOOST_TEST(ops_test::max_abs_diff(ops_test::grads(*plain), ops_test::grads(*wrapped)) == 0.0);
}

BOOST_AUTO_TEST_CASE(checkpoint_activations_modes) {
  const nn::ClassSet blocks{"TransformerEncoderLayer"};
  auto none = ops_test::transformer_stack(2, DType::Float64);
  checkpoint_activations(none, "none", blocks);
  BOOST_TEST(wrapped_children(*none).empty());
  BOOST_CHECK_EXCEPTION(checkpoint_activations(none, "partial", blocks), ValueError,
                        [](const ValueError& e) {
                          return std::string(e.what()) ==
                                 "checkpoint_activations: expected none, full or selective, got "
                                 "'partial'";
                        });
  // Selective: the same wrappers; the matrix products are not rerun at recomputation.
  auto plain = ops_test::transformer_stack(2, DType::Float64, 0.0, 8);
  auto selective = ops_test::transformer_stack(2, DType::Float64, 0.0, 8);
  checkpoint_activations(selective, "selective", blocks);
  BOOST_TEST(wrapped_children(*selective) == (std::vector<std::string>{"0", "1"}));
  Tensor x = randn({2, 3, 8}, DType::Float64);
  sum((*plain)(x).tensor()).backward();
  auto rec = std::make_shared<ops_test::RecordingMode>();
  {
    dispatch::ModeGuard g(rec);
    Tensor y = (*selective)(x).tensor();
    rec->ops.clear();
    sum(y).backward();
  }
  BOOST_TEST(std::count(rec->ops.begin(), rec->ops.end(), "linear") == 0);
  BOOST_TEST(std::count(rec->ops.begin(), rec->ops.end(), "layer_norm") == 4);  // recomputed
  BOOST_TEST(ops_test::max_abs_diff(ops_test::grads(*plain), ops_test::grads(*selective)) == 0.0);
}

BOOST_AUTO_TEST_SUITE_END()
