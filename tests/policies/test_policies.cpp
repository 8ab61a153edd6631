// Policies, options, auto_wrap with a recording wrapper, enable_wrap/wrap, frozen-parameter
// validation (the port of upstream's TestWrapUtils), mixed-precision overrides.
#include <boost/test/unit_test.hpp>
#include <thread>

#include "core/error.h"
#include "core/traversal/wrapper_marker.h"
#include "core/warnings.h"
#include "policies/always_wrap.h"
#include "policies/auto_wrap.h"
#include "policies/custom_policy.h"
#include "policies/enable_wrap.h"
#include "policies/lambda_policy.h"
#include "policies/mixed_precision_override.h"
#include "policies/module_cls_individually.h"
#include "policies/module_wrap_policy.h"
#include "policies/or_policy.h"
#include "policies/size_based.h"
#include "policies/transformer_policy.h"
#include "tests/policies/wrap_models.h"

using namespace fsdp;
using namespace fsdp::policies;
using fsdp::testing::is_recording_wrapper;
using fsdp::testing::RecordingWrapper;
using nn::ModulePtr;

namespace {
const TensorOptions kMetaF32(DType::Float32, kMeta);

// auto_wrap as the FSDP constructor calls it, with the recording wrapper.
void run_auto_wrap(const ModulePtr& root, const AutoWrapPolicy& policy,
                   const std::vector<ModulePtr>& ignored = {}, WrapperOptions root_options = {}) {
  auto ignored_modules = close_ignored_modules(root, ignored);
  auto ignored_params = ignored_params_of(root, ignored_modules);
  auto_wrap(root, policy, ignored_modules, ignored_params, std::move(root_options),
            RecordingWrapper::wrapper_fn(), std::string("RecordingWrapper"));
}

std::shared_ptr<RecordingWrapper> as_wrapper(const ModulePtr& m) {
  return std::dynamic_pointer_cast<RecordingWrapper>(m);
}

WrapperOptions with_strategy(ShardingStrategy s) {
  WrapperOptions o;
  o.sharding_strategy = s;
  return o;
}

class Probe : public nn::Module {
 public:
  FSDP_MODULE_CLASS(Probe, nn::Module)
  Probe() : nn::Module(static_class()) {}
  nn::Value forward(const nn::Args& args) override {
    seen = args.tensor(0).dtype();
    return args.tensor(0);
  }
  DType seen = DType::Bool;
};
}  // namespace

BOOST_AUTO_TEST_SUITE(callable_policies)

BOOST_AUTO_TEST_CASE(size_based_thresholds_and_defaults) {
  nn::Linear lin(5, 5, true, kMetaF32);
  auto policy = size_based_auto_wrap_policy(40);
  BOOST_TEST(policy(lin, true, 40));  // inclusive
  BOOST_TEST(policy(lin, false, 40));
  BOOST_TEST(!policy(lin, true, 39));
  auto dflt = size_based_auto_wrap_policy();
  BOOST_TEST(!dflt(lin, false, 99'999'999));
  BOOST_TEST(dflt(lin, false, 100'000'000));
  BOOST_TEST((size_based::default_force_leaf_modules() == nn::ClassSet{"MultiheadAttention"}));
  BOOST_TEST(
      (size_based::default_exclude_wrap_modules() == nn::ClassSet{"ModuleList", "ModuleDict"}));
  nn::MultiheadAttention mha(16, 8, nn::MultiheadAttentionOptions{.tensor = kMetaF32});
  BOOST_TEST(!policy(mha, true, 1000));  // force leaf: not recursed into
  BOOST_TEST(policy(mha, false, 1000));  // (the engine never asks: it returned before)
  nn::ModuleList list;
  BOOST_TEST(policy(list, true, 1000));    // excluded: recursed into
  BOOST_TEST(!policy(list, false, 1000));  // never wrapped
  // A given set replaces the default.
  auto custom = size_based_auto_wrap_policy(40, nn::ClassSet{"Linear"}, nn::ClassSet{});
  BOOST_TEST(!custom(lin, true, 100));
  BOOST_TEST(custom(mha, true, 1000));
  BOOST_TEST(custom(list, false, 1000));
  auto extended = size_based::default_force_leaf_modules().united(nn::ClassSet{"Linear"});
  BOOST_TEST((extended == nn::ClassSet{"Linear", "MultiheadAttention"}));
}

BOOST_AUTO_TEST_CASE(lambda_transformer_individual_or) {
  nn::Linear lin(2, 2, true, kMetaF32);
  nn::LayerNorm ln(2, 1e-5, true, true, kMetaF32);
  int asked = 0;
  auto lam = lambda_auto_wrap_policy([&](nn::Module& m) {
    ++asked;
    return m.isinstance("Linear");
  });
  BOOST_TEST(lam(ln, true, 0));  // always recurse, without asking the lambda
  BOOST_TEST(asked == 0);
  BOOST_TEST(lam(lin, false, 0));
  BOOST_TEST(!lam(ln, false, 0));
  BOOST_TEST(asked == 2);
  auto tr = transformer_auto_wrap_policy(nn::ClassSet{"LayerNorm"});
  BOOST_TEST(tr(lin, true, 0));
  BOOST_TEST(!tr(lin, false, 0));
  BOOST_TEST(tr(ln, false, 0));
  nn::BatchNorm2d bn(3, 1e-5, 0.1, true, true, kMetaF32);
  auto ind = wrap_module_cls_individually(nn::ClassSet{"_BatchNorm"});
  BOOST_TEST(ind(bn, false, 0));  // isinstance through the ancestry
  BOOST_TEST(!ind(lin, false, 0));
  // or: short-circuit in list order.
  std::vector<int> order;
  auto first = [&](nn::Module&, bool, std::int64_t) {
    order.push_back(1);
    return true;
  };
  auto second = [&](nn::Module&, bool, std::int64_t) {
    order.push_back(2);
    return false;
  };
  BOOST_TEST(or_policy({second, first, second})(lin, false, 0));
  BOOST_TEST((order == std::vector<int>{2, 1}));
  BOOST_TEST(!or_policy({})(lin, true, 0));
  BOOST_TEST(always_wrap_policy(lin, false, 0));
}

BOOST_AUTO_TEST_CASE(lambda_policy_through_auto_wrap) {
  auto model = testing::nested_sequential_model(kMetaF32);
  auto inner = model->child("2");
  run_auto_wrap(model, lambda_auto_wrap_policy([&](nn::Module& m) { return &m == inner.get(); }));
  BOOST_TEST(is_recording_wrapper(model->child("2")));
  BOOST_TEST(!is_recording_wrapper(model->child("0")));
  BOOST_TEST(!is_recording_wrapper(inner->child("0")));
  BOOST_TEST(!traversal::is_wrapper(*model));  // the root is the caller's
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(options)

BOOST_AUTO_TEST_CASE(merge_none_equality_str) {
  WrapperOptions base;
  base.sharding_strategy = ShardingStrategy::FULL_SHARD;
  base.backward_prefetch = BackwardPrefetch::BACKWARD_PRE;
  MixedPrecision mp;
  mp.param_dtype = DType::Float16;
  base.mixed_precision = mp;
  WrapperOptions over;
  over.mixed_precision = Setting<MixedPrecision>::none();  // explicit None wins
  over.sharding_strategy = ShardingStrategy::NO_SHARD;
  auto merged = base.merged(over);
  BOOST_TEST(merged.mixed_precision.is_none());
  BOOST_TEST(merged.mixed_precision.is_set());
  BOOST_TEST((*merged.sharding_strategy == ShardingStrategy::NO_SHARD));
  BOOST_TEST((*merged.backward_prefetch == BackwardPrefetch::BACKWARD_PRE));  // absent: kept
  BOOST_TEST(!(merged == base));
  BOOST_TEST((base.merged(WrapperOptions{}) == base));
  BOOST_TEST(merged.str() ==
             "WrapperOptions(sharding_strategy=ShardingStrategy.NO_SHARD, "
             "backward_prefetch=BackwardPrefetch.BACKWARD_PRE, mixed_precision=None)");
  BOOST_TEST(MixedPrecision{}.str() ==
             "MixedPrecision(param_dtype=None, reduce_dtype=None, buffer_dtype=None, "
             "keep_low_precision_grads=False, cast_forward_inputs=False, "
             "cast_root_forward_inputs=True, _module_classes_to_ignore={_BatchNorm})");
  BOOST_CHECK_THROW(merged.mixed_precision.value(), KeyError);
  BOOST_TEST((merged.mixed_precision.value_or(MixedPrecision{}) == MixedPrecision{}));
  // param_init_fn compares by identity, like Python's function objects: copies are equal, two
  // lambdas with the same body are not.
  int calls = 0;
  ParamInitFn init = [&calls](nn::Module&) { ++calls; };
  WrapperOptions with_init;
  with_init.param_init_fn = init;
  BOOST_TEST((with_init.param_init_fn == Setting<ParamInitFn>(init)));
  WrapperOptions other_init;
  other_init.param_init_fn = [&calls](nn::Module&) { ++calls; };
  BOOST_TEST(!(with_init == other_init));
  BOOST_TEST(with_init.str() == "WrapperOptions(param_init_fn=<function>)");
  auto module = std::make_shared<nn::Module>();
  (*with_init.param_init_fn)(*module);
  BOOST_TEST(calls == 1);
  try {
    ParamInitFn()(*module);
    BOOST_ERROR("an empty ParamInitFn was called");
  } catch (const TypeError& e) {
    BOOST_TEST(std::string(e.what()) == "param_init_fn is empty: no function to call on Module");
  }
}

// process_group and hybrid_process_groups are upstream's one `process_group` keyword: an
// override of either replaces both (the groups themselves are tested in tests/fsdp/test_wrap).
BOOST_AUTO_TEST_CASE(group_fields_merge_as_one_keyword) {
  WrapperOptions hybrid;
  hybrid.hybrid_process_groups = std::shared_ptr<const comm::HybridGroups>();
  WrapperOptions single;
  single.process_group = Setting<std::shared_ptr<comm::ProcessGroup>>::none();
  auto merged = hybrid.merged(single);
  BOOST_TEST(merged.process_group.is_none());
  BOOST_TEST(!merged.hybrid_process_groups.is_set());
  BOOST_TEST(merged.str() == "WrapperOptions(process_group=None)");
  auto back = merged.merged(hybrid);
  BOOST_TEST(!back.process_group.is_set());
  BOOST_TEST(back.str() == "WrapperOptions(hybrid_process_groups=None)");
  // An override that sets neither keeps both.
  BOOST_TEST((hybrid.merged(WrapperOptions{}) == hybrid));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(policy_objects)

BOOST_AUTO_TEST_CASE(module_wrap_policy_both_engines_on_transformer) {
  const nn::ClassSet layers{"TransformerEncoderLayer", "TransformerDecoderLayer"};
  auto check = [&](const AutoWrapPolicy& policy) {
    auto model = std::make_shared<testing::TransformerWithSharedParams>(true, kMetaF32);
    run_auto_wrap(model, policy);
    std::set<const nn::Module*> expected;
    auto t = model->child("transformer");
    for (const char* part : {"encoder", "decoder"})
      for (const auto& l : t->child(part)->child("layers")->children()) expected.insert(l.get());
    int wrappers = 0;
    for (const auto& m : model->modules()) {
      bool is_w = is_recording_wrapper(m);
      wrappers += is_w;
      BOOST_TEST(is_w == (expected.count(m.get()) > 0));
    }
    BOOST_TEST(wrappers == 4);
    // The tied output projection stays with the embedding in the root unit.
    BOOST_TEST(model->child("output_proj")->param("weight").impl() ==
               model->child("embed_tokens")->param("weight").impl());
  };
  check(ModuleWrapPolicy::make(layers));
  check(transformer_auto_wrap_policy(layers));
  check(or_policy({ModuleWrapPolicy::make(layers)->as_callable()}));
  BOOST_TEST(ModuleWrapPolicy(layers).repr() ==
             "ModuleWrapPolicy({TransformerDecoderLayer, TransformerEncoderLayer})");
}

BOOST_AUTO_TEST_CASE(module_wrap_policy_run_policy_order_and_root) {
  auto model = testing::nested_sequential_model(kMetaF32);
  ModuleWrapPolicy policy(nn::ClassSet{"Sequential"});
  WrapperOptions root = with_strategy(ShardingStrategy::SHARD_GRAD_OP);
  auto targets = policy.run_policy(model, {}, root);
  BOOST_TEST_REQUIRE(targets.size() == 2u);  // the root too; auto_wrap never wraps it
  BOOST_TEST(targets.entries()[0].first == ModulePtr(model));
  BOOST_TEST(targets.entries()[1].first == model->child("2"));
  BOOST_TEST((targets.entries()[1].second == root));
  auto ignored = policy.run_policy(model, {model->child("2").get()}, root);
  BOOST_TEST(ignored.size() == 1u);
}

BOOST_AUTO_TEST_CASE(custom_policy_results) {
  auto model = testing::nested_sequential_model(kMetaF32);
  auto l0 = model->child("0"), l1 = model->child("1"), seq = model->child("2");
  auto policy = CustomPolicy::make([&](nn::Module& m) -> CustomPolicyResult {
    if (&m == l0.get()) return true;
    if (&m == l1.get()) return WrapperOptions{};  // empty dict: falsy
    if (&m == seq.get()) return with_strategy(ShardingStrategy::NO_SHARD);
    return false;
  });
  WrapperOptions root = with_strategy(ShardingStrategy::FULL_SHARD);
  root.forward_prefetch = true;
  run_auto_wrap(model, policy, {}, root);
  auto w0 = as_wrapper(model->child("0"));
  BOOST_TEST_REQUIRE(w0);
  // Children must not auto-wrap again: the policy is passed on as None.
  WrapperOptions expected0 = root;
  expected0.auto_wrap_policy = Setting<AutoWrapPolicy>::none();
  BOOST_TEST((w0->options == expected0));
  BOOST_TEST(!is_recording_wrapper(model->child("1")));
  auto w2 = as_wrapper(model->child("2"));
  BOOST_TEST_REQUIRE(w2);
  BOOST_TEST((*w2->options.sharding_strategy == ShardingStrategy::NO_SHARD));
  BOOST_TEST(*w2->options.forward_prefetch);
}

BOOST_AUTO_TEST_CASE(custom_policy_bad_return_is_value_error) {
  auto model = testing::nested_sequential_model(kMetaF32);
  auto policy = CustomPolicy::make([](nn::Module&) { return CustomPolicyResult::invalid("None"); });
  try {
    run_auto_wrap(model, policy);
    BOOST_FAIL("expected ValueError");
  } catch (const ValueError& e) {
    BOOST_TEST(std::string(e.what()) ==
               "The lambda_fn passed to CustomPolicy should return False/True or a kwarg dict, "
               "but it returned None");
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(auto_wrap_behaviour)

BOOST_AUTO_TEST_CASE(shared_module_wrapped_under_first_parent_only) {
  // Policy path: post-order apply replaces a shared module in its first parent only.
  auto root = std::make_shared<nn::Sequential>();
  auto shared = std::make_shared<nn::Linear>(4, 4, true, kMetaF32);
  auto a = std::make_shared<nn::Sequential>(std::vector<ModulePtr>{shared});
  auto b = std::make_shared<nn::Sequential>(std::vector<ModulePtr>{shared});
  root->append(a);
  root->append(b);
  testing::RecordingWrapper::constructed() = 0;
  run_auto_wrap(root, ModuleWrapPolicy::make(nn::ClassSet{"Linear"}));
  BOOST_TEST(testing::RecordingWrapper::constructed() == 1);
  BOOST_TEST(is_recording_wrapper(a->child("0")));
  BOOST_TEST(b->child("0") == ModulePtr(shared));

  // Callable path: no visited set — the shared module is wrapped under each parent.
  auto root2 = std::make_shared<nn::Sequential>();
  auto shared2 = std::make_shared<nn::Linear>(4, 4, true, kMetaF32);
  auto a2 = std::make_shared<nn::Sequential>(std::vector<ModulePtr>{shared2});
  auto b2 = std::make_shared<nn::Sequential>(std::vector<ModulePtr>{shared2});
  root2->append(a2);
  root2->append(b2);
  testing::RecordingWrapper::constructed() = 0;
  run_auto_wrap(root2, transformer_auto_wrap_policy(nn::ClassSet{"Linear"}));
  BOOST_TEST(testing::RecordingWrapper::constructed() == 2);
  BOOST_TEST(is_recording_wrapper(a2->child("0")));
  BOOST_TEST(is_recording_wrapper(b2->child("0")));
}

BOOST_AUTO_TEST_CASE(ignored_params_leave_the_numel) {
  // NestedSequential @40 wraps the inner Sequential (60); ignoring one of its Linears leaves 30.
  auto model = testing::nested_sequential_model(kMetaF32);
  run_auto_wrap(model, size_based_auto_wrap_policy(40), {model->child("2")->child("0")});
  BOOST_TEST(!is_recording_wrapper(model->child("2")));
  auto model2 = testing::nested_sequential_model(kMetaF32);
  run_auto_wrap(model2, size_based_auto_wrap_policy(40));
  BOOST_TEST(is_recording_wrapper(model2->child("2")));
  // Directly through ignored params (ignored_states): same effect.
  auto model3 = testing::nested_sequential_model(kMetaF32);
  traversal::ParamSet params;
  for (const auto& p : model3->child("2")->child("0")->parameters()) params.insert(p.impl());
  auto_wrap(model3, size_based_auto_wrap_policy(40), {}, params, {},
            RecordingWrapper::wrapper_fn());
  BOOST_TEST(!is_recording_wrapper(model3->child("2")));
}

BOOST_AUTO_TEST_CASE(ignored_modules_closure_and_root_warning) {
  auto model = testing::nested_sequential_model(kMetaF32);
  auto closed = close_ignored_modules(model, {model->child("2")});
  BOOST_TEST(closed.size() == 3u);
  WarningCapture cap;
  auto all = close_ignored_modules(model, {model});
  BOOST_TEST(all.size() == 6u);
  BOOST_TEST(
      cap.contains("Trying to ignore the top-level module passed into the FSDP "
                   "constructor itself will result in all parameters being ignored"));
  auto wrapped = std::make_shared<RecordingWrapper>(model->child("0"), WrapperOptions{});
  BOOST_CHECK_THROW(close_ignored_modules(model, {wrapped}), ValueError);
}

BOOST_AUTO_TEST_CASE(nested_wrapping_is_rejected_with_the_module_name) {
  auto model = testing::nested_sequential_model(kMetaF32);
  auto inner = std::dynamic_pointer_cast<nn::Sequential>(model->child("2"));
  inner->replace_child("1",
                       std::make_shared<RecordingWrapper>(inner->child("1"), WrapperOptions{}));
  try {
    run_auto_wrap(model, always_wrap_policy);
    BOOST_FAIL("expected ValueError");
  } catch (const ValueError& e) {
    std::string msg = e.what();
    BOOST_TEST(msg.rfind("FSDP auto wrapping requires modules to not already have FSDP applied but "
                         "found 2.1 in\nSequential(",
                         0) == 0);
  }
}

BOOST_AUTO_TEST_CASE(mixed_precision_override_both_paths) {
  MixedPrecision mp;
  mp.param_dtype = DType::Float16;
  WrapperOptions root;
  root.mixed_precision = mp;
  root.sharding_strategy = ShardingStrategy::FULL_SHARD;
  // Policy path: BN targets get mixed_precision=None on top of their own overrides.
  {
    auto net = std::make_shared<testing::BatchNormNet>();
    auto bn1 = net->child("bn1");
    WarningCapture cap;
    run_auto_wrap(net, CustomPolicy::make([&](nn::Module& m) -> CustomPolicyResult {
                    if (&m == bn1.get()) return with_strategy(ShardingStrategy::NO_SHARD);
                    return false;
                  }),
                  {}, root);
    for (const char* name : {"bn1", "bn2", "bn3", "sync_bn"}) {
      auto w = as_wrapper(net->child(name));
      BOOST_TEST_REQUIRE(w);
      BOOST_TEST(w->options.mixed_precision.is_none());
    }
    BOOST_TEST(
        (*as_wrapper(net->child("bn1"))->options.sharding_strategy == ShardingStrategy::NO_SHARD));
    BOOST_TEST((*as_wrapper(net->child("bn2"))->options.sharding_strategy ==
                ShardingStrategy::FULL_SHARD));
    BOOST_TEST(!is_recording_wrapper(net->child("lin")));
    BOOST_TEST_REQUIRE(cap.warnings().size() == 1u);
    BOOST_TEST(cap.warnings()[0].message ==
               "Both mixed precision and an auto_wrap_policy were specified to FSDP, where the "
               "wrapped module has submodules of type:\n"
               "{<class 'torch.nn.modules.batchnorm.BatchNorm1d'>, "
               "<class 'torch.nn.modules.batchnorm.BatchNorm2d'>, "
               "<class 'torch.nn.modules.batchnorm.BatchNorm3d'>, "
               "<class 'torch.nn.modules.batchnorm.SyncBatchNorm'>}\n"
               "These modules will be wrapped as separate FSDP instacnes with mixed precision "
               "disabled.");
  }
  // Callable path: the BN policy is OR-ed in; overrides arrive through `_wrap_overrides`.
  {
    auto net = std::make_shared<testing::BatchNormNet>();
    WarningCapture cap;
    run_auto_wrap(
        net, [](nn::Module&, bool, std::int64_t) { return false; }, {}, root);
    for (const char* name : {"bn1", "bn2", "bn3", "sync_bn"}) {
      auto w = as_wrapper(net->child(name));
      BOOST_TEST_REQUIRE(w);
      BOOST_TEST(w->options.mixed_precision.is_none());
      BOOST_TEST((*w->options.sharding_strategy == ShardingStrategy::FULL_SHARD));
    }
    BOOST_TEST(!is_recording_wrapper(net->child("lin")));
    BOOST_TEST(cap.warnings().size() == 1u);
  }
}

BOOST_AUTO_TEST_CASE(mixed_precision_cast_hooks) {
  // Modules of the ignored classes run in float32 and give outputs back in the input dtype.
  auto root = std::make_shared<nn::Sequential>();
  auto probe = std::make_shared<Probe>();
  root->append(probe);
  auto classes = override_module_mixed_precision(root, nn::ClassSet{"Probe"});
  BOOST_TEST((classes == std::set<std::string>{"Probe"}));
  BOOST_TEST(python_class_repr("Probe") == "<class 'Probe'>");
  Tensor x = from_vector(std::vector<double>{1.5, -2.0}, {2}, TensorOptions(DType::Float64));
  Tensor y = (*probe)(x).tensor();
  BOOST_TEST((probe->seen == DType::Float32));
  BOOST_TEST((y.dtype() == DType::Float64));
  BOOST_TEST(y.to_vector() == (std::vector<double>{1.5, -2.0}), boost::test_tools::per_element());
  // Non-floating inputs pass unchanged.
  Tensor i = from_vector(std::vector<std::int64_t>{1, 2}, {2});
  BOOST_TEST(((*probe)(i).tensor().dtype() == DType::Int64));
  BOOST_TEST(probe->has_attr(kWrapOverridesAttr));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(enable_wrap_api)

BOOST_AUTO_TEST_CASE(noop_outside_overrides_inside) {
  auto lin = std::make_shared<nn::Linear>(5, 5, true, kMetaF32);
  BOOST_TEST(wrap(lin) == ModulePtr(lin));  // outside: no-op
  BOOST_TEST(!in_autowrap_context());
  {
    EnableWrap scope(RecordingWrapper::wrapper_fn(), with_strategy(ShardingStrategy::FULL_SHARD));
    BOOST_TEST(in_autowrap_context());
    auto w = as_wrapper(wrap(lin, with_strategy(ShardingStrategy::SHARD_GRAD_OP)));
    BOOST_TEST_REQUIRE(w);
    BOOST_TEST((*w->options.sharding_strategy == ShardingStrategy::SHARD_GRAD_OP));
    // The module's own overrides win over both.
    auto lin2 = std::make_shared<nn::Linear>(5, 5, true, kMetaF32);
    lin2->set_attr(kWrapOverridesAttr, with_strategy(ShardingStrategy::NO_SHARD));
    auto w2 = as_wrapper(wrap(lin2, with_strategy(ShardingStrategy::SHARD_GRAD_OP)));
    BOOST_TEST((*w2->options.sharding_strategy == ShardingStrategy::NO_SHARD));
    // Scopes are per thread.
    bool other_thread_in_context = true;
    std::thread([&] { other_thread_in_context = in_autowrap_context(); }).join();
    BOOST_TEST(!other_thread_in_context);
  }
  BOOST_TEST(!in_autowrap_context());
}

BOOST_AUTO_TEST_CASE(nested_scope_error_and_exception_release) {
  EnableWrap outer(RecordingWrapper::wrapper_fn());
  try {
    EnableWrap inner(RecordingWrapper::wrapper_fn());
    BOOST_FAIL("expected NotImplementedError");
  } catch (const NotImplementedError& e) {
    BOOST_TEST(std::string(e.what()) ==
               "You are already within an autowrap context and we currently do not supported "
               "nested autowrap.");
  }
  BOOST_TEST(in_autowrap_context());  // the outer scope is still valid
}

BOOST_AUTO_TEST_CASE(scope_released_on_exception_and_missing_wrapper) {
  try {
    EnableWrap scope(RecordingWrapper::wrapper_fn());
    throw RuntimeError("boom");
  } catch (const RuntimeError&) {
  }
  BOOST_TEST(!in_autowrap_context());
  BOOST_CHECK_THROW(EnableWrap(nullptr), AssertionError);
  BOOST_TEST(!in_autowrap_context());  // not left stuck (upstream's flag would be)
  BOOST_CHECK_THROW(wrap_module(std::make_shared<nn::Identity>(), nullptr, {}), AssertionError);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(TestWrapUtils)

// Port of test_validate_frozen_params.
BOOST_AUTO_TEST_CASE(test_validate_frozen_params) {
  for (bool use_orig_params : {true, false}) {
    auto model = std::make_shared<testing::LoraModel>();
    traversal::ModuleSet modules_to_wrap;
    std::vector<nn::Module*> lora_a;
    for (const auto& [name, m] : model->named_modules()) {
      if (name.ends_with("lora_A")) lora_a.push_back(m.get());
      if (name.ends_with("lora_A") || name.ends_with("lora_B")) modules_to_wrap.insert(m.get());
    }
    auto no_error = [&] {
      WarningCapture cap;
      validate_frozen_params(model, modules_to_wrap, {}, use_orig_params);
      BOOST_TEST(cap.warnings().empty());
    };
    no_error();
    for (const auto& m : model->modules())
      if (m->isinstance("LoraAttention")) modules_to_wrap.insert(m.get());
    no_error();
    for (const auto& m : model->modules())
      if (m->isinstance("LoraDecoder")) modules_to_wrap.insert(m.get());
    no_error();
    for (auto* m : lora_a) modules_to_wrap.erase(m);
    const std::string expected =
        std::string("layers.0.attn has both parameters with requires_grad=True and False.") +
        (use_orig_params
             ? " We do not recommend wrapping such modules since the gradient memory usage will "
               "be higher than expected (4352 numel instead of 256 numel before sharding via "
               "reduce-scatter). "
             : " FSDP does not support wrapping such modules when use_orig_params=False. ") +
        "If possible, wrap the frozen parameters with FSDP separately.\n"
        "The following parameters have requires_grad=True:\n['layers.0.attn.lora_A.weight']\n"
        "The following parameters have requires_grad=False:\n['layers.0.attn.q_proj.weight', "
        "'layers.0.attn.k_proj.weight', 'layers.0.attn.v_proj.weight', "
        "'layers.0.attn.o_proj.weight']";
    if (use_orig_params) {
      WarningCapture cap;
      validate_frozen_params(model, modules_to_wrap, {}, true);
      BOOST_TEST_REQUIRE(cap.warnings().size() == 4u);  // every offending layer warns
      BOOST_TEST(cap.warnings()[0].message == expected);
      BOOST_TEST(cap.warnings()[0].category == "UserWarning");
    } else {
      try {
        validate_frozen_params(model, modules_to_wrap, {}, false);
        BOOST_FAIL("expected ValueError");
      } catch (const ValueError& e) {
        BOOST_TEST(std::string(e.what()) == expected);
      }
    }
    // Ignoring the lora_A parameters makes the units uniform again.
    traversal::ParamSet ignored;
    for (auto* m : lora_a)
      for (const auto& p : m->parameters()) ignored.insert(p.impl());
    WarningCapture cap;
    validate_frozen_params(model, modules_to_wrap, ignored, use_orig_params);
    BOOST_TEST(cap.warnings().empty());
  }
}

BOOST_AUTO_TEST_SUITE_END()
