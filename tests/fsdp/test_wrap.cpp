// A port of upstream's test/distributed/fsdp/test_wrap.py. Wrapping assertions run on
// FakeProcessGroup (DummyProcessGroup): they need no communication. Tests that run the wrapped
// model (forward, backward, SGD steps) run their ranks as threads (comm/threads).
// One file over 600 lines: a port keeps upstream's one-file layout, case for case.
#define BOOST_TEST_MODULE fsdp_wrap
#include <fmt/format.h>

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <map>

#include "comm/fake/fake_process_group.h"
#include "comm/threads/run_ranks.h"
#include "core/autograd.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/optim/optim.h"
#include "core/random.h"
#include "core/warnings.h"
#include "fsdp/attribute_forwarding.h"
#include "fsdp/full_state_dict.h"
#include "fsdp/fully_sharded_data_parallel.h"
#include "policies/always_wrap.h"
#include "policies/custom_policy.h"
#include "policies/enable_wrap.h"
#include "policies/module_cls_individually.h"
#include "policies/module_wrap_policy.h"
#include "policies/or_policy.h"
#include "policies/size_based.h"
#include "policies/transformer_policy.h"
#include "tests/policies/wrap_models.h"
#include "tests/support/thread_safe_test.h"

using namespace fsdp;
using namespace fsdp::policies;
using nn::ModulePtr;

namespace {

std::shared_ptr<comm::ProcessGroup> fake_group(int rank, int size) {
  return std::make_shared<comm::FakeProcessGroup>(rank, size);
}

// Runs body on `world` ranks as threads, each with its threads-backend group.
void on_ranks(int world, const std::function<void(std::shared_ptr<comm::ProcessGroup>)>& body) {
  comm::run_ranks(world, body);
}

// The message of the exception of type E that `fn` throws ("" when it throws none).
template <typename E, typename Fn>
std::string message_of(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

bool is_fsdp(const ModulePtr& m) {
  return std::dynamic_pointer_cast<FSDP>(m) != nullptr;
}
std::shared_ptr<FSDP> as_fsdp(const ModulePtr& m) {
  return std::dynamic_pointer_cast<FSDP>(m);
}
bool is_linear(const ModulePtr& m) {
  return m && m->type_name() == "Linear";
}

WrapperOptions fsdp_options(std::shared_ptr<comm::ProcessGroup> pg, AutoWrapPolicy policy = {}) {
  WrapperOptions o;
  o.process_group = std::move(pg);
  if (!policy.empty()) o.auto_wrap_policy = std::move(policy);
  return o;
}

// The FSDP constructor's attribute path `model.module[i]` etc.
ModulePtr at(const ModulePtr& m, std::int64_t i) {
  return getitem(m, i);
}

// TestFSDPWrap.NestedSequentialModel.verify_model_all_wrapped / verify_model.
void verify_model_all_wrapped(const ModulePtr& model) {
  TS_TEST(is_fsdp(model));
  auto inner = as_fsdp(model)->module();
  TS_TEST(is_fsdp(at(inner, 0)));
  TS_TEST(is_fsdp(at(inner, 1)));
  TS_TEST(is_fsdp(at(inner, 2)));
  TS_TEST(is_fsdp(at(at(inner, 2), 0)));
  TS_TEST(is_fsdp(at(at(inner, 2), 1)));
}

void verify_model(const ModulePtr& model) {
  TS_TEST(is_fsdp(model));
  auto inner = as_fsdp(model)->module();
  TS_TEST(is_linear(at(inner, 0)));
  TS_TEST(is_linear(at(inner, 1)));
  TS_TEST(is_fsdp(at(inner, 2)));
  TS_TEST(is_linear(at(at(inner, 2), 0)));
  TS_TEST(is_linear(at(at(inner, 2), 1)));
}

class Plain : public nn::Module {
 public:
  FSDP_MODULE_CLASS(Plain, nn::Module)
  Plain() : nn::Module(static_class()) {}
};

std::shared_ptr<nn::Linear> linear(std::int64_t in, std::int64_t out, bool bias = true) {
  return std::make_shared<nn::Linear>(in, out, bias);
}

// test_main_wrap_api's model: lin4(lin3(lin2(lin1(x)))) with lin4 = Nested(nested_lin), every
// Linear(1, 1, bias=False); the tests set its weights (the same on every rank).
class Nested : public nn::Module {
 public:
  FSDP_MODULE_CLASS(Nested, nn::Module)
  Nested() : nn::Module(static_class()) { register_module("nested_lin", linear(1, 1, false)); }
  nn::Value forward(const nn::Args& args) override { return call_child("nested_lin", args); }
};

class MyModel : public nn::Module {
 public:
  FSDP_MODULE_CLASS(MyModel, nn::Module)
  MyModel() : nn::Module(static_class()) {
    for (const char* name : {"lin1", "lin2", "lin3"}) register_module(name, linear(1, 1, false));
    register_module("lin4", std::make_shared<Nested>());
  }
  nn::Value forward(const nn::Args& args) override {
    nn::Value x = call_child("lin1", args);
    for (const char* name : {"lin2", "lin3", "lin4"}) x = call_child(name, nn::Args({x}));
    return x;
  }
};

const std::vector<double> kMainWrapWeights = {0.5, 0.75, -0.6, 0.9};

// Upstream's 6 steps of SGD(lr=1e-2, momentum=0.9) on loss = model(ones(1)).sum(), wrapped with
// options `o` (size_based min_num_params=0: every module a unit) on 2 thread ranks. The loss is
// w1 w2 w3 w4, so every step's loss is checked against the same SGD on 4 scalars in double, and
// the loss falls every step; both ranks see the same values.
void check_main_wrap_api_steps(WrapperOptions o) {
  constexpr int kSteps = 6;
  std::vector<double> want;
  {
    std::vector<double> w = kMainWrapWeights, buf(4, 0.0);
    for (int step = 0; step < kSteps; ++step) {
      want.push_back(w[0] * w[1] * w[2] * w[3]);
      for (std::size_t i = 0; i < 4; ++i) {
        double g = 1;
        for (std::size_t j = 0; j < 4; ++j)
          if (j != i) g *= w[j];
        buf[i] = step == 0 ? g : 0.9 * buf[i] + g;
      }
      for (std::size_t i = 0; i < 4; ++i) w[i] -= 1e-2 * buf[i];
    }
  }
  std::vector<std::vector<double>> losses(2);
  on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto model = std::make_shared<MyModel>();
    {
      autograd::NoGradGuard no_grad;
      const auto params = model->parameters();
      for (std::size_t i = 0; i < params.size(); ++i) {
        Tensor p = params[i];
        p.fill_(kMainWrapWeights[i]);
      }
    }
    WrapperOptions with_group = o;
    with_group.process_group = pg;
    auto wrapped = FSDP::make(model, with_group);
    optim::SGDOptions sgd;
    sgd.lr = 1e-2;
    sgd.momentum = 0.9;
    optim::SGD optim(wrapped->parameters(), sgd);
    Tensor inp = ones({1});
    for (int step = 0; step < kSteps; ++step) {
      optim.zero_grad();
      Tensor loss = (*wrapped)(inp).tensor().sum();
      loss.backward();
      optim.step();
      losses[static_cast<std::size_t>(pg->rank())].push_back(loss.item());
    }
  });
  TS_TEST(losses[0] == losses[1], boost::test_tools::per_element());
  TS_REQUIRE_EQUAL(losses[0].size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    TS_TEST(std::abs(losses[0][i] - want[i]) <= 1e-5 * std::abs(want[i]),
            "step " << i << ": loss " << losses[0][i] << ", expected " << want[i]);
    if (i > 0) TS_TEST(losses[0][i] < losses[0][i - 1], "step " << i);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(TestFSDPWrap)

BOOST_AUTO_TEST_CASE(test_error_already_wrapped) {
  auto pg = fake_group(0, 2);
  for (bool nested : {true, false}) {
    // _get_already_wrapped_fsdp: lin1 = FSDP(Linear) or Sequential(Linear, FSDP(Linear)).
    auto model = std::make_shared<Plain>();
    if (nested) {
      model->register_module(
          "lin1", std::make_shared<nn::Sequential>(std::vector<ModulePtr>{
                      linear(1, 1, false), FSDP::make(linear(1, 1, false), fsdp_options(pg))}));
    } else {
      model->register_module("lin1", FSDP::make(linear(1, 1, false), fsdp_options(pg)));
    }
    model->register_module("lin2", FSDP::make(linear(1, 1, false), fsdp_options(pg)));
    model->register_module("lin3", FSDP::make(linear(1, 1, false), fsdp_options(pg)));
    const std::string wrapped_name = nested ? "lin1.1" : "lin1";
    try {
      FSDP::make(model, fsdp_options(pg, size_based_auto_wrap_policy()));
      TS_FAIL("expected ValueError");
    } catch (const ValueError& e) {
      TS_TEST(std::string(e.what()).rfind(
                  "FSDP auto wrapping requires modules to not already have FSDP applied but "
                  "found " +
                      wrapped_name + " in\nPlain(",
                  0) == 0);
    }
  }
}

BOOST_AUTO_TEST_CASE(test_wrap_batchnorm_individually) {
  auto pg = fake_group(0, 2);
  for (bool use_or_policy : {true, false}) {
    CallablePolicy never_wrap = [](nn::Module&, bool, std::int64_t) { return false; };
    CallablePolicy wrap_bn = wrap_module_cls_individually(nn::ClassSet{"_BatchNorm"});
    CallablePolicy policy = use_or_policy ? or_policy({never_wrap, wrap_bn}) : wrap_bn;
    auto model = std::make_shared<testing::BatchNormNet>();
    auto fsdp = FSDP::make(model, fsdp_options(pg, policy));
    for (const char* name : {"bn1", "bn2", "bn3", "sync_bn"}) TS_TEST(is_fsdp(getattr(fsdp, name)));
    TS_TEST(!is_fsdp(getattr(fsdp, "lin")));
  }
}

BOOST_AUTO_TEST_CASE(test_bn_always_wrapped_individually) {
  auto pg = fake_group(0, 2);
  CallablePolicy wrap_bn_container = [](nn::Module& m, bool recurse, std::int64_t) {
    return recurse || m.isinstance("BatchNormNet");
  };
  CallablePolicy wrap_batchnorm_individually =
      wrap_module_cls_individually(nn::ClassSet{"_BatchNorm"});
  for (bool use_or_policy : {true, false}) {
    CallablePolicy policy = use_or_policy
                                ? or_policy({wrap_bn_container, wrap_batchnorm_individually})
                                : wrap_bn_container;
    auto model = std::make_shared<Plain>();
    model->register_module("bn_container", std::make_shared<testing::BatchNormNet>());
    auto fsdp = FSDP::make(model, fsdp_options(pg, policy));
    // With the OR policy: FSDP(FSDP(BatchNormNet(FSDP(BN)))).
    auto container = getattr(fsdp, "bn_container");
    for (const char* name : {"bn1", "bn2", "bn3", "sync_bn"})
      TS_TEST(is_fsdp(getattr(container, name)) == use_or_policy);
    TS_TEST(is_fsdp(container));
  }
}

BOOST_AUTO_TEST_CASE(test_main_wrap_api) {
  auto pg = fake_group(0, 2);
  for (bool offload : {false, true})
    for (BackwardPrefetch prefetch :
         {BackwardPrefetch::BACKWARD_POST, BackwardPrefetch::BACKWARD_PRE})
      for (bool forward_prefetch : {false, true}) {
        auto model = std::make_shared<Plain>();
        model->register_module("lin1", linear(1, 1, false));
        model->register_module("lin2", linear(1, 1, false));
        model->register_module("lin3", linear(1, 1, false));
        auto nested = std::make_shared<Plain>();
        nested->register_module("nested_lin", linear(1, 1, false));
        model->register_module("lin4", nested);
        WrapperOptions o = fsdp_options(pg, size_based_auto_wrap_policy(0));
        o.cpu_offload = CPUOffload{offload};
        o.backward_prefetch = prefetch;
        o.forward_prefetch = forward_prefetch;
        auto wrapped = FSDP::make(model, o);
        auto inner = wrapped->module();
        std::vector<ModulePtr> in_graph_order{
            inner->child("lin1"), inner->child("lin2"),
            inner->child("lin3"), as_fsdp(inner->child("lin4"))->module()->child("nested_lin"),
            inner->child("lin4"), wrapped};
        for (const auto& m : in_graph_order) {
          TS_TEST_REQUIRE(is_fsdp(m));
          auto f = as_fsdp(m);
          TS_TEST(f->cpu_offload().offload_params == offload);  // _check_cpu_offload
          TS_TEST((f->backward_prefetch() == prefetch));        // _check_backward_prefetch
          TS_TEST(f->forward_prefetch() == forward_prefetch);   // _check_forward_prefetch
        }
        // Upstream then runs 6 SGD steps as a sanity check.
        check_main_wrap_api_steps(o);
      }
}

class ZeroArguModel : public nn::Module {
 public:
  FSDP_MODULE_CLASS(ZeroArguModel, nn::Module)
  ZeroArguModel() : nn::Module(static_class()), a(from_vector(std::vector<double>{1.0}, {1})) {}
  nn::Value forward(const nn::Args&) override { return a; }
  Tensor a;
};

BOOST_AUTO_TEST_CASE(test_zero_argument) {
  on_ranks(2, [](std::shared_ptr<comm::ProcessGroup> pg) {
    auto fsdp = FSDP::make(std::make_shared<ZeroArguModel>(), fsdp_options(pg));
    Tensor out = (*fsdp)(nn::Args{}).tensor();
    TS_TEST(out.to_vector() == std::vector<double>{1.0}, boost::test_tools::per_element());
  });
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(TestAutoWrap)

BOOST_AUTO_TEST_CASE(test_wrap) {
  auto pg = fake_group(0, 1);
  for (bool wrap_api : {false, true}) {
    WarningCapture cap;
    ModulePtr layer;
    if (wrap_api) {
      EnableWrap scope(FSDP::wrapper_fn(), fsdp_options(pg));
      layer = wrap(linear(5, 5));
    } else {
      layer = FSDP::make(linear(5, 5), fsdp_options(pg, size_based_auto_wrap_policy(1)));
    }
    TS_TEST_REQUIRE(is_fsdp(layer));
    TS_TEST(as_fsdp(layer)->rank() == pg->rank());
    TS_TEST(as_fsdp(layer)->world_size() == pg->size());
    // A group of one rank has nothing to shard.
    TS_TEST((as_fsdp(layer)->sharding_strategy() == ShardingStrategy::NO_SHARD));
    TS_TEST(
        cap.contains("FSDP is switching to use `NO_SHARD` instead of "
                     "ShardingStrategy.FULL_SHARD since the world size is 1."));
  }
}

class WrapsInCtor : public nn::Module {
 public:
  FSDP_MODULE_CLASS(WrapsInCtor, nn::Module)
  explicit WrapsInCtor(const std::shared_ptr<comm::ProcessGroup>& pg) : nn::Module(static_class()) {
    register_module("lin", wrap(std::make_shared<nn::Linear>(5, 5), fsdp_options(pg)));
  }
};

BOOST_AUTO_TEST_CASE(test_wrap_disabled_outside_context) {
  auto pg = fake_group(0, 1);
  ModulePtr model = std::make_shared<WrapsInCtor>(pg);
  {
    EnableWrap scope(FSDP::wrapper_fn(), fsdp_options(pg));
    model = wrap(model);
  }
  TS_TEST(is_fsdp(model));
  TS_TEST(!is_fsdp(getattr(model, "lin")));
  TS_TEST(is_linear(getattr(model, "lin")));
}

BOOST_AUTO_TEST_CASE(test_wrap_override_defaults) {
  auto pg = fake_group(0, 1);
  auto new_pg = fake_group(0, 2);
  ModulePtr layer;
  {
    EnableWrap scope(FSDP::wrapper_fn(), fsdp_options(pg));
    layer = wrap(linear(5, 5), fsdp_options(new_pg));
  }
  TS_TEST_REQUIRE(is_fsdp(layer));
  TS_TEST(as_fsdp(layer)->process_group() == new_pg);
  TS_TEST(as_fsdp(layer)->rank() == 0);
  TS_TEST(as_fsdp(layer)->world_size() == 2);
}

BOOST_AUTO_TEST_CASE(test_always_wrap) {
  auto pg = fake_group(0, 1);
  auto model = FSDP::make(testing::nested_sequential_model(), fsdp_options(pg, always_wrap_policy));
  verify_model_all_wrapped(model);
}

namespace {
// _test_transformer_wrapping: exactly the root and the 2 + 2 transformer layers are FSDP.
void test_transformer_wrapping(const AutoWrapPolicy& policy) {
  auto pg = fake_group(0, 1);
  auto fsdp_model = FSDP::make(std::make_shared<testing::TransformerWithSharedParams>(),
                               fsdp_options(pg, policy));
  auto transformer = getattr(fsdp_model->module(), "transformer");
  std::set<const nn::Module*> layers;
  for (const char* part : {"encoder", "decoder"})
    for (const auto& l : getattr(getattr(transformer, part), "layers")->children())
      layers.insert(l.get());
  TS_TEST(layers.size() == 4u);
  for (const auto& module : fsdp_model->modules()) {
    const bool expected = module == ModulePtr(fsdp_model) || layers.count(module.get());
    TS_TEST(is_fsdp(module) == expected, module->type_name());
  }
}
const nn::ClassSet kLayerClasses{"TransformerEncoderLayer", "TransformerDecoderLayer"};
}  // namespace

BOOST_AUTO_TEST_CASE(test_transformer_auto_wrap_policy) {
  test_transformer_wrapping(transformer_auto_wrap_policy(kLayerClasses));
}

BOOST_AUTO_TEST_CASE(test_module_wrap_policy) {
  test_transformer_wrapping(ModuleWrapPolicy::make(kLayerClasses));
}

BOOST_AUTO_TEST_CASE(test_module_wrap_policy_callable) {
  test_transformer_wrapping(or_policy({ModuleWrapPolicy::make(kLayerClasses)->as_callable()}));
}

BOOST_AUTO_TEST_CASE(test_custom_policy) {
  for (bool use_uniform_kwargs : {false, true}) {
    auto model = std::make_shared<testing::TransformerWithSharedParams>();
    auto bn = model->child("bn");
    CustomPolicy::LambdaFn uniform = [](nn::Module& m) -> CustomPolicyResult {
      return m.isinstance("BatchNorm1d") || m.isinstance(kLayerClasses);
    };
    CustomPolicy::LambdaFn nonuniform = [&](nn::Module& m) -> CustomPolicyResult {
      if (&m == bn.get()) {
        WrapperOptions o;
        o.sharding_strategy = ShardingStrategy::NO_SHARD;
        return o;
      }
      if (m.isinstance("TransformerEncoderLayer")) return true;
      if (m.isinstance("TransformerDecoderLayer")) {
        WrapperOptions o;
        o.sharding_strategy = ShardingStrategy::SHARD_GRAD_OP;
        o.backward_prefetch = BackwardPrefetch::BACKWARD_POST;
        return o;
      }
      return false;
    };
    // A 2-rank group avoids clamping the strategy to NO_SHARD as for a size-1 group.
    WrapperOptions o = fsdp_options(fake_group(0, 2),
                                    CustomPolicy::make(use_uniform_kwargs ? uniform : nonuniform));
    MixedPrecision fp16;
    fp16.param_dtype = DType::Float16;
    o.mixed_precision = fp16;
    WarningCapture cap;
    auto fsdp_model = FSDP::make(model, o);
    TS_TEST(
        cap.contains("These modules will be wrapped as separate FSDP instacnes with mixed "
                     "precision disabled."));
    for (const auto& module : fsdp_model->modules()) {
      auto f = as_fsdp(module);
      if (module == ModulePtr(fsdp_model)) {
        TS_TEST((f->sharding_strategy() == ShardingStrategy::FULL_SHARD));
        TS_TEST((f->backward_prefetch() == BackwardPrefetch::BACKWARD_PRE));
        TS_TEST((f->mixed_precision() == fp16));
      } else if (f && f->module() == bn) {
        TS_TEST((f->sharding_strategy() ==
                 (use_uniform_kwargs ? ShardingStrategy::FULL_SHARD : ShardingStrategy::NO_SHARD)));
        TS_TEST((f->backward_prefetch() == BackwardPrefetch::BACKWARD_PRE));
        // Batch norm modules are overridden to run in float32.
        TS_TEST((f->mixed_precision() == MixedPrecision{}));
      } else if (f && f->module()->isinstance("TransformerEncoderLayer")) {
        TS_TEST((f->sharding_strategy() == ShardingStrategy::FULL_SHARD));
        TS_TEST((f->backward_prefetch() == BackwardPrefetch::BACKWARD_PRE));
        TS_TEST((f->mixed_precision() == fp16));
      } else if (f && f->module()->isinstance("TransformerDecoderLayer")) {
        TS_TEST((f->sharding_strategy() == (use_uniform_kwargs ? ShardingStrategy::FULL_SHARD
                                                               : ShardingStrategy::SHARD_GRAD_OP)));
        TS_TEST((f->backward_prefetch() == (use_uniform_kwargs ? BackwardPrefetch::BACKWARD_PRE
                                                               : BackwardPrefetch::BACKWARD_POST)));
        TS_TEST((f->mixed_precision() == fp16));
      } else {
        TS_TEST(!f, module->type_name());
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(test_auto_wrap_api) {
  auto model = FSDP::make(testing::nested_sequential_model(),
                          fsdp_options(fake_group(0, 1), size_based_auto_wrap_policy(40)));
  verify_model(model);
}

BOOST_AUTO_TEST_CASE(test_auto_wrap_preset_exclude_wrap) {
  WarningCapture cap;
  auto list = std::make_shared<nn::ModuleList>(std::vector<ModulePtr>{linear(5, 5), linear(5, 5)});
  auto model = FSDP::make(list, fsdp_options(fake_group(0, 1), size_based_auto_wrap_policy(40)));
  TS_TEST(is_fsdp(model));
  TS_TEST(is_linear(at(model, 0)));
  TS_TEST(is_linear(at(model, 1)));
  // Upstream warns "FSDP will not all-gather parameters for containers that do not implement
  // forward" and leaves them sharded; here the unit runs around the list's modules instead.
  TS_TEST(cap.contains(
      "FSDP: ModuleList has no forward, so its unit all-gathers all of its parameters around the "
      "forward of each of its modules (wrapping those modules as units gathers only each one's): "
      "ModuleList("));
}

BOOST_AUTO_TEST_CASE(test_auto_wrap_preset_exclude_wrap_include_children) {
  auto list = std::make_shared<nn::ModuleList>(std::vector<ModulePtr>{linear(10, 10)});
  auto model = FSDP::make(list, fsdp_options(fake_group(0, 1), size_based_auto_wrap_policy(40)));
  TS_TEST(is_fsdp(model));
  TS_TEST(is_fsdp(at(model, 0)));
}

BOOST_AUTO_TEST_CASE(test_auto_wrap_preset_force_leaf) {
  auto seq = std::make_shared<nn::Sequential>(
      std::vector<ModulePtr>{linear(10, 10), std::make_shared<nn::MultiheadAttention>(100, 1)});
  auto model = FSDP::make(seq, fsdp_options(fake_group(0, 1), size_based_auto_wrap_policy(40)));
  TS_TEST(is_fsdp(at(model->module(), 0)));
  // The force-leaf module is neither wrapped nor recursed into.
  TS_TEST(at(model->module(), 1)->type_name() == "MultiheadAttention");
  TS_TEST(getattr(at(model->module(), 1), "out_proj")->isinstance("Linear"));
  TS_TEST(!is_fsdp(getattr(at(model->module(), 1), "out_proj")));
}

BOOST_AUTO_TEST_CASE(test_auto_wrap_preset_force_leaf_custom) {
  auto force_leaf = size_based::default_force_leaf_modules().united(nn::ClassSet{"Linear"});
  auto seq = std::make_shared<nn::Sequential>(std::vector<ModulePtr>{
      linear(10, 10), std::make_shared<nn::ModuleList>(std::vector<ModulePtr>{linear(10, 10)})});
  auto model =
      FSDP::make(seq, fsdp_options(fake_group(0, 1), size_based_auto_wrap_policy(40, force_leaf)));
  // Model was wrapped in FSDP as no inner modules were wrapped.
  TS_TEST(is_fsdp(model));
  TS_TEST(is_linear(at(model->module(), 0)));
  TS_TEST(at(model->module(), 1)->type_name() == "ModuleList");
}

BOOST_AUTO_TEST_CASE(test_auto_wrap_smoke_test) {
  // Upstream: a real 1-rank group (NCCL), size-based(40), then forward + MSE backward on GPU.
  // Here: the wrapping on a 1-rank fake group; then the forward and backward on 2 thread ranks
  // (both with upstream's input), against the plain model: the same output, and the same
  // gradients (read back as the parameters after one SGD step with lr 1).
  for (bool offload : {false, true}) {
    WrapperOptions o = fsdp_options(fake_group(0, 1), size_based_auto_wrap_policy(40));
    o.cpu_offload = CPUOffload{offload};
    auto model = FSDP::make(testing::nested_sequential_model(), o);
    verify_model(model);
    TS_TEST(as_fsdp(at(model->module(), 2))->cpu_offload().offload_params == offload);
  }
  const std::size_t world = 2;
  std::vector<std::shared_ptr<nn::Sequential>> models;
  for (std::size_t r = 0; r <= world; ++r) {  // one per rank, and the plain one
    manual_seed(11);
    models.push_back(testing::nested_sequential_model());
  }
  manual_seed(12);
  const Tensor input = rand({1, 5});
  auto plain = models[world];
  Tensor want = (*plain)(input).tensor();
  mse_loss(input, want).backward();
  optim::SGD(plain->parameters(), optim::SGDOptions{.lr = 1.0}).step();

  for (bool offload : {false, true}) {
    std::vector<std::vector<double>> outputs(world);
    std::vector<std::pair<std::string, Tensor>> stepped;
    for (std::size_t r = 0; r < world; ++r) {  // fresh copies of the initial weights
      manual_seed(11);
      models[r] = testing::nested_sequential_model();
    }
    on_ranks(static_cast<int>(world), [&](std::shared_ptr<comm::ProcessGroup> pg) {
      const auto rank = static_cast<std::size_t>(pg->rank());
      WrapperOptions o = fsdp_options(pg, size_based_auto_wrap_policy(40));
      o.cpu_offload = CPUOffload{offload};
      auto fsdp = FSDP::make(models[rank], o);
      Tensor output = (*fsdp)(input).tensor();
      outputs[rank] = output.to_vector();
      mse_loss(input, output).backward();
      optim::SGD(fsdp->parameters(), optim::SGDOptions{.lr = 1.0}).step();
      auto state = full_state_dict(*fsdp, /*rank0_only=*/true);
      if (rank == 0) stepped = state;
    });
    BOOST_TEST_CONTEXT("cpu_offload " << offload) {
      for (const auto& out : outputs)
        TS_TEST(out == want.to_vector(), boost::test_tools::per_element());
      const auto named = plain->named_parameters();
      TS_REQUIRE_EQUAL(stepped.size(), named.size());
      std::map<std::string, Tensor> by_name(named.begin(), named.end());
      for (const auto& [name, t] : stepped) {
        TS_REQUIRE(by_name.count(name) == 1u);
        const auto got = t.to_vector(), expected = by_name.at(name).to_vector();
        TS_REQUIRE_EQUAL(got.size(), expected.size());
        for (std::size_t i = 0; i < got.size(); ++i)
          TS_TEST(std::abs(got[i] - expected[i]) <= 1e-6 + 1e-5 * std::abs(expected[i]),
                  name << "[" << i << "] = " << got[i] << ", plain " << expected[i]);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(test_always_wrap_with_ignored_modules) {
  for (bool wrap_api : {false, true}) {
    auto sequential = testing::nested_sequential_model();
    std::vector<ModulePtr> ignored{at(sequential, 1), at(at(sequential, 2), 0)};
    WrapperOptions o = fsdp_options(fake_group(0, 1), always_wrap_policy);
    o.ignored_modules = ignored;
    ModulePtr model;
    if (wrap_api) {
      EnableWrap scope(FSDP::wrapper_fn(), o);
      model = wrap(sequential);
    } else {
      model = FSDP::make(sequential, o);
    }
    TS_TEST(is_fsdp(model));
    auto inner = as_fsdp(model)->module();
    TS_TEST(is_fsdp(at(inner, 0)));
    TS_TEST(is_linear(at(inner, 1)));
    TS_TEST(is_fsdp(at(inner, 2)));
    TS_TEST(is_linear(at(as_fsdp(at(inner, 2))->module(), 0)));
    TS_TEST(is_fsdp(at(as_fsdp(at(inner, 2))->module(), 1)));
  }
}

BOOST_AUTO_TEST_CASE(test_auto_wrap_with_ignored_modules) {
  for (bool wrap_api : {false, true}) {
    auto sequential = testing::nested_sequential_model();
    std::vector<ModulePtr> ignored{at(sequential, 1), at(at(sequential, 2), 0)};
    WrapperOptions o = fsdp_options(fake_group(0, 1), size_based_auto_wrap_policy(40));
    o.ignored_modules = ignored;
    ModulePtr model;
    if (wrap_api) {
      EnableWrap scope(FSDP::wrapper_fn(), o);
      model = wrap(sequential);
    } else {
      model = FSDP::make(sequential, o);
    }
    TS_TEST(is_fsdp(model));
    auto inner = as_fsdp(model)->module();
    TS_TEST(is_linear(at(inner, 0)));
    TS_TEST(is_linear(at(inner, 1)));
    TS_TEST(at(inner, 2)->type_name() == "Sequential");
    TS_TEST(is_linear(at(at(inner, 2), 0)));
    TS_TEST(is_linear(at(at(inner, 2), 1)));
  }
}

BOOST_AUTO_TEST_CASE(test_frozen_params) {
  const nn::ClassSet module_classes{"LoraAttention", "LoraMLP", "LoraDecoder"};
  std::vector<AutoWrapPolicy> policies{ModuleWrapPolicy::make(module_classes),
                                       CustomPolicy::make([&](nn::Module& m) -> CustomPolicyResult {
                                         return m.isinstance(module_classes);
                                       }),
                                       CustomPolicy::make([&](nn::Module& m) -> CustomPolicyResult {
                                         if (m.isinstance("LoraAttention")) {
                                           WrapperOptions o;
                                           o.sharding_strategy = ShardingStrategy::SHARD_GRAD_OP;
                                           return o;
                                         }
                                         return m.isinstance(module_classes);
                                       })};
  for (bool use_orig_params : {true, false})
    for (const auto& policy : policies) {
      WrapperOptions o = fsdp_options(fake_group(0, 1), policy);
      o.use_orig_params = use_orig_params;
      std::string msg = "layers.0.attn has both parameters with requires_grad=True and False. ";
      if (use_orig_params) {
        msg += "We do not recommend wrapping such modules";
        WarningCapture cap;
        FSDP::make(std::make_shared<testing::LoraModel>(), o);
        TS_TEST(cap.contains(msg));
      } else {
        msg += "FSDP does not support wrapping such modules when use_orig_params=False.";
        try {
          FSDP::make(std::make_shared<testing::LoraModel>(), o);
          TS_FAIL("expected ValueError");
        } catch (const ValueError& e) {
          TS_TEST(std::string(e.what()).find(msg) != std::string::npos);
        }
      }
    }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(fsdp_module)

BOOST_AUTO_TEST_CASE(wrapped_module_fqns_forwarding_and_defaults) {
  auto model = testing::nested_sequential_model();
  auto fsdp = FSDP::make(model, fsdp_options(fake_group(1, 4), size_based_auto_wrap_policy(40)));
  TS_TEST(fsdp->rank() == 1);
  TS_TEST(fsdp->world_size() == 4);
  TS_TEST((fsdp->sharding_strategy() == ShardingStrategy::FULL_SHARD));
  TS_TEST((fsdp->backward_prefetch() == BackwardPrefetch::BACKWARD_PRE));
  TS_TEST(fsdp->limit_all_gathers());
  TS_TEST(!fsdp->use_orig_params());
  TS_TEST(!fsdp->forward_prefetch());
  TS_TEST((fsdp->mixed_precision() == MixedPrecision{}));
  std::vector<std::string> names;
  for (const auto& [n, p] : fsdp->named_parameters()) names.push_back(n);
  // use_orig_params=False: each unit exposes its FlatParameter, as upstream.
  TS_TEST(names.front() == "_fsdp_wrapped_module._flat_param");
  TS_TEST(names.back() == "_fsdp_wrapped_module.2._fsdp_wrapped_module._flat_param");
  std::vector<std::string> clean;
  for (const auto& [n, p] : clean_named_parameters(*fsdp)) clean.push_back(n);
  TS_TEST(clean.back() == "2._flat_param");
  TS_TEST(clean_tensor_name("a._checkpoint_wrapped_module.b._fsdp_wrapped_module.w") == "a.b.w");
  TS_CHECK_THROW(getattr(fsdp, "nope"), KeyError);
  TS_CHECK_THROW(getitem(fsdp, 3), IndexError);
  TS_TEST(getitem(fsdp, -1) == getitem(fsdp, 2));
  // Explicit None for backward_prefetch disables it.
  WrapperOptions o = fsdp_options(fake_group(0, 2));
  o.backward_prefetch = Setting<BackwardPrefetch>::none();
  TS_TEST(!FSDP::make(linear(2, 2), o)->backward_prefetch().has_value());
  // No process group: upstream's default-group error.
  TS_CHECK_THROW(FSDP::make(linear(2, 2)), ValueError);
}

BOOST_AUTO_TEST_CASE(forward_passes_through_and_no_shard_warning) {
  on_ranks(2, [](std::shared_ptr<comm::ProcessGroup> pg) {
    WarningCapture cap;
    WrapperOptions o = fsdp_options(pg);
    o.sharding_strategy = ShardingStrategy::NO_SHARD;
    auto fsdp = FSDP::make(std::make_shared<nn::Identity>(), o);
    TS_TEST(cap.warnings().size() == 1u);
    TS_TEST(cap.warnings()[0].category == "FutureWarning");
    Tensor x = from_vector(std::vector<double>{1, 2, 3}, {3});
    const auto y = (*fsdp)(x).tensor().to_vector();  // a forward: not inside an assertion
    TS_TEST(y == x.to_vector(), boost::test_tools::per_element());
  });
  // Explicit NO_SHARD on one rank switches silently.
  WarningCapture cap2;
  WrapperOptions o1 = fsdp_options(fake_group(0, 1));
  o1.sharding_strategy = ShardingStrategy::NO_SHARD;
  FSDP::make(std::make_shared<nn::Identity>(), o1);
  TS_TEST(cap2.warnings().empty());
  // sync_module_states: upstream requires GPU tensors (it broadcasts over NCCL); our CPU
  // tensors are compute tensors, so rank 0's values are broadcast on CPU too.
  on_ranks(2, [](std::shared_ptr<comm::ProcessGroup> pg) {
    WrapperOptions o2 = fsdp_options(pg);
    o2.sync_module_states = true;
    o2.use_orig_params = true;
    auto lin = linear(2, 2);
    {
      autograd::NoGradGuard no_grad;
      Tensor w = lin->param("weight");
      w.fill_(pg->rank() + 1.0);
    }
    auto fsdp = FSDP::make(lin, o2);
    auto full = full_state_dict(*fsdp, /*rank0_only=*/false);
    TS_TEST(full.front().first == "weight");
    TS_TEST(full.front().second.to_vector() == std::vector<double>(4, 1.0),
            boost::test_tools::per_element());
  });
}

// The options hold the groups typed: process_group, or hybrid_process_groups for the hybrid
// strategies (upstream's one `process_group` argument); each misuse is one line naming it.
BOOST_AUTO_TEST_CASE(process_group_fields) {
  auto pg = fake_group(0, 2);
  WrapperOptions o = fsdp_options(pg);
  TS_TEST(o.str() == fmt::format("WrapperOptions(process_group=<ProcessGroup at {}>)",
                                 static_cast<const void*>(pg.get())));
  TS_TEST(message_of<ValueError>([] { FSDP::make(linear(2, 2)); }) ==
          "Default process group has not been initialized, please make sure to call "
          "init_process_group. (Pass the group as WrapperOptions::process_group, or "
          "WrapperOptions::hybrid_process_groups for the hybrid strategies.)");
  WrapperOptions both = o;
  both.hybrid_process_groups =
      std::make_shared<const comm::HybridGroups>(comm::HybridGroups{pg, pg});
  TS_TEST(message_of<ValueError>([&] { FSDP::make(linear(2, 2), both); }) ==
          "WrapperOptions: set process_group or hybrid_process_groups, not both (they are "
          "upstream's one process_group argument)");
  WrapperOptions null_group;
  null_group.process_group = std::shared_ptr<comm::ProcessGroup>();
  TS_TEST(message_of<ValueError>([&] { FSDP::make(linear(2, 2), null_group); }) ==
          "WrapperOptions::process_group is a null group");
  WrapperOptions no_shard_group;
  no_shard_group.hybrid_process_groups =
      std::make_shared<const comm::HybridGroups>(comm::HybridGroups{nullptr, pg});
  TS_TEST(message_of<ValueError>([&] { FSDP::make(linear(2, 2), no_shard_group); }) ==
          "hybrid sharding: the shard group is None");
  WrapperOptions hybrid_on_one_group = o;
  hybrid_on_one_group.sharding_strategy = ShardingStrategy::HYBRID_SHARD;
  TS_TEST(message_of<NotImplementedError>([&] { FSDP::make(linear(2, 2), hybrid_on_one_group); }) ==
          "ShardingStrategy.HYBRID_SHARD with a single process group (" + pg->where() +
              "): building the intra-/inter-node groups needs communication; pass "
              "WrapperOptions::hybrid_process_groups = std::make_shared<const "
              "comm::HybridGroups>(comm::split_hybrid(world, shard_size))");
  // Hybrid groups reach every auto-wrapped unit; the shard group is the one FSDP shards over.
  on_ranks(4, [](std::shared_ptr<comm::ProcessGroup> world) {
    auto groups = std::make_shared<const comm::HybridGroups>(comm::split_hybrid(*world, 2));
    WrapperOptions h;
    h.hybrid_process_groups = groups;
    h.sharding_strategy = ShardingStrategy::HYBRID_SHARD;
    h.auto_wrap_policy = size_based_auto_wrap_policy(40);
    auto root = FSDP::make(testing::nested_sequential_model(), h);
    TS_TEST(root->fsdp_units().size() > 1u);
    for (FSDP* unit : root->fsdp_units()) {
      TS_TEST(unit->process_group() == groups->shard);
      TS_TEST(unit->replicate_group() == groups->replicate);
      TS_TEST(unit->world_size() == 2);
    }
  });
}

// param_init_fn is a typed callable: FSDP calls it on each module whose parameters are on the
// meta device, after giving them storage.
BOOST_AUTO_TEST_CASE(param_init_fn_initialises_meta_modules) {
  auto lin = std::make_shared<nn::Linear>(2, 3, true, TensorOptions(DType::Float32, kMeta));
  WrapperOptions o = fsdp_options(fake_group(0, 1));
  std::vector<std::string> called_on;
  o.param_init_fn = [&called_on](nn::Module& m) {
    called_on.push_back(m.type_name());
    autograd::NoGradGuard no_grad;
    for (auto& [name, p] : m.named_parameters("", /*recurse=*/false)) p.fill_(0.5);
  };
  auto fsdp = FSDP::make(lin, o);
  TS_TEST(called_on == std::vector<std::string>{"Linear"}, boost::test_tools::per_element());
  for (const auto& [name, t] : full_state_dict(*fsdp, /*rank0_only=*/false))
    TS_TEST(t.to_vector() == std::vector<double>(std::size_t(t.numel()), 0.5),
            boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
