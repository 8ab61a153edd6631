// What each FSDP unit takes (fsdp/unit_claims.h): a parameter shared by two units and a module
// wrapped twice fail at construction with one line naming both; a container (ModuleList) wrapped
// as a unit is never called, its modules' units run, and training equals the plain model's.
#define BOOST_TEST_MODULE fsdp_units
#include <atomic>
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <mutex>

#include "comm/fake/fake_process_group.h"
#include "core/error.h"
#include "core/nn/nn.h"
#include "core/ops.h"
#include "core/random.h"
#include "core/traversal/wrapper_marker.h"
#include "core/warnings.h"
#include "fsdp/attribute_forwarding.h"
#include "fsdp/flat_param.h"
#include "ops/checkpoint_wrapper.h"
#include "policies/always_wrap.h"
#include "policies/module_wrap_policy.h"
#include "tests/support/runtime_harness.h"
#include "tests/support/thread_safe_test.h"

using namespace fsdp;
using namespace fsdp::testing;
namespace bdata = boost::unit_test::data;

namespace units_test {  // named: Boost data test cases capture these types

// Layers in a ModuleList, which has no forward: forward runs them as Python's
// `for layer in self.layers` does, through a wrapper of the list.
class ListNet : public nn::Module {
 public:
  FSDP_MODULE_CLASS(ListNet, nn::Module)
  explicit ListNet(std::uint64_t seed) : nn::Module(static_class()) {
    manual_seed(seed);
    register_module("layers", std::make_shared<nn::ModuleList>(std::initializer_list<nn::ModulePtr>{
                                  std::make_shared<nn::Linear>(6, 10), std::make_shared<nn::ReLU>(),
                                  std::make_shared<nn::Linear>(10, 4)}));
    register_module("norm", std::make_shared<nn::LayerNorm>(4));
  }
  nn::Value forward(const nn::Args& args) override {
    Tensor x = args.tensor(0);
    for (const auto& [name, layer] : traversal::unwrapped(*child("layers")).child_slots())
      x = (*layer)(x).tensor();
    return nn::Value(call_child("norm", x));
  }
};

// An embedding and a head holding one weight (the GPT's tying).
class TiedNet : public nn::Module {
 public:
  FSDP_MODULE_CLASS(TiedNet, nn::Module)
  TiedNet() : nn::Module(static_class()) {
    auto emb = std::make_shared<nn::Embedding>(5, 4);
    register_module("emb", emb);
    auto head = std::make_shared<nn::Linear>(4, 5, false);
    head->set_parameter("weight", emb->param("weight"));
    register_module("head", head);
  }
  nn::Value forward(const nn::Args& args) override {
    return nn::Value(call_child("head", call_child("emb", args.tensor(0))));
  }
};

WrapperOptions options(std::shared_ptr<comm::ProcessGroup> pg, bool use_orig_params) {
  WrapperOptions o;
  o.process_group = std::move(pg);
  o.use_orig_params = use_orig_params;
  return o;
}

WrapperOptions fake_options(bool use_orig_params = false) {
  return options(std::make_shared<comm::FakeProcessGroup>(0, 2), use_orig_params);
}

// The ValueError's message of `make` (empty if it does not throw).
std::string construction_error(const std::function<void()>& make) {
  try {
    make();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

const std::string kSharedAdvice =
    "wrap the modules that share a parameter in one unit (their common parent), e.g. with an "
    "auto-wrap policy that keeps them together";
const std::string kTwiceAdvice =
    "wrap each module once, and pass the wrapped model (not its original submodules) to later "
    "wrapping";

// The batch of step `step`, [rows, 6] inputs and [rows, 4] targets.
std::pair<Tensor, Tensor> batch(int step, std::int64_t rows) {
  Generator gen(500 + static_cast<std::uint64_t>(step));
  std::vector<double> x(static_cast<std::size_t>(rows * 6)), y(static_cast<std::size_t>(rows * 4));
  for (auto& v : x) v = gen.uniform() * 2 - 1;
  for (auto& v : y) v = gen.uniform() * 2 - 1;
  return {from_vector(x, {rows, 6}), from_vector(y, {rows, 4})};
}

constexpr int kSteps = 4;
constexpr std::int64_t kRowsPerRank = 3;

// ListNet's per-step losses with SGD: the plain model on the batch of `world` ranks.
std::vector<double> train_plain(int world) {
  auto model = std::make_shared<ListNet>(11);
  auto opt = make_mlp_optimizer("sgd", model->parameters());
  std::vector<double> losses;
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = batch(step, world * kRowsPerRank);
    opt->zero_grad();
    Tensor loss = mse_loss((*model)(x).tensor(), y);
    loss.backward();
    opt->step();
    losses.push_back(loss.item());
  }
  return losses;
}

// The same under FSDP on `world` thread ranks (rank 0's global mean per step); `prepare` sees
// each rank's wrapped model before training.
std::vector<double> train_sharded(
    int world, const WrapperOptions& base,
    const std::function<void(FullyShardedDataParallel&)>& prepare = nullptr) {
  std::vector<double> result;
  std::mutex mu;
  on_ranks(world, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    WrapperOptions o = base;
    o.process_group = pg;
    auto fsdp = FullyShardedDataParallel::make(std::make_shared<ListNet>(11), o);
    if (prepare) prepare(*fsdp);
    auto opt = make_mlp_optimizer("sgd", fsdp->parameters());
    std::vector<double> losses;
    for (int step = 0; step < kSteps; ++step) {
      auto [x, y] = batch(step, world * kRowsPerRank);
      const std::int64_t r0 = pg->rank() * kRowsPerRank;
      opt->zero_grad();
      Tensor out = (*fsdp)(x.narrow(0, r0, kRowsPerRank).contiguous()).tensor();
      Tensor loss = mse_loss(out, y.narrow(0, r0, kRowsPerRank).contiguous());
      loss.backward();
      opt->step();
      double l = loss.item();
      pg->all_reduce(&l, 1, DType::Float64);
      losses.push_back(l / world);
    }
    if (pg->rank() == 0) {
      std::lock_guard<std::mutex> lock(mu);
      result = losses;
    }
  });
  return result;
}

void check_losses(const std::vector<double>& got, const std::vector<double>& want) {
  TS_REQUIRE_EQUAL(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    TS_TEST(got[i] == want[i], boost::test_tools::tolerance(1e-5));
}

}  // namespace units_test
using namespace units_test;

BOOST_AUTO_TEST_SUITE(shared_parameters)

// The GPT's case: always_wrap_policy puts the embedding and the head, which share a weight, in
// two units; the second one fails before flattening, naming both parameters and both units.
BOOST_DATA_TEST_CASE(tied_weights_in_two_units_fail_at_construction, bdata::make({false, true}),
                     use_orig_params) {
  WrapperOptions o = fake_options(use_orig_params);
  o.auto_wrap_policy = policies::AutoWrapPolicy(policies::always_wrap_policy);
  const std::string msg =
      construction_error([&] { FullyShardedDataParallel::make(std::make_shared<TiedNet>(), o); });
  TS_TEST(msg ==
          "FSDP: parameter 'head.weight' is shared with 'emb.weight', which the FSDP unit "
          "wrapping 'emb' already flattened; the unit wrapping 'head' cannot flatten it again: " +
              kSharedAdvice);
}

// One unit around both (the root here) flattens the tied weight once and trains.
BOOST_AUTO_TEST_CASE(tied_weights_in_one_unit_train) {
  on_ranks(2, [](std::shared_ptr<comm::ProcessGroup> pg) {
    auto fsdp = FullyShardedDataParallel::make(std::make_shared<TiedNet>(), options(pg, false));
    TS_TEST(fsdp->handle()->params().size() == 1u);
    TS_TEST(fsdp->handle()->shared_params().size() == 1u);
    Tensor idx = from_vector(std::vector<double>{0, 3, 4}, {3}).to(DType::Int64);
    (*fsdp)(idx).tensor().sum().backward();
    TS_TEST(fsdp->parameters().front().grad().defined());
  });
}

// Wrapped by hand in a user's model: the root's own parameter is a nested unit's.
BOOST_AUTO_TEST_CASE(shared_with_a_nested_unit_names_both_fqns) {
  auto a = std::make_shared<nn::Linear>(4, 4);
  auto b = std::make_shared<nn::Linear>(4, 4);
  b->set_parameter("weight", a->param("weight"));
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      a, std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{b})});
  const WrapperOptions o = fake_options();
  model->replace_child("1", FullyShardedDataParallel::make(model->child("1"), o));
  const std::string msg = construction_error([&] { FullyShardedDataParallel::make(model, o); });
  TS_TEST(msg ==
          "FSDP: parameter '0.weight' is shared with '1.0.weight', which the FSDP unit wrapping "
          "'1' already flattened; the unit wrapping the Sequential cannot flatten it again: " +
              kSharedAdvice);
}

// Two units built one after the other: the second knows only its own module and the other
// unit's class, and says so.
BOOST_DATA_TEST_CASE(shared_by_two_units_built_by_hand, bdata::make({false, true}),
                     use_orig_params) {
  auto a = std::make_shared<nn::Linear>(4, 4);
  auto b = std::make_shared<nn::Linear>(4, 4);
  b->set_parameter("bias", a->param("bias"));
  const WrapperOptions o = fake_options(use_orig_params);
  auto unit_a = FullyShardedDataParallel::make(a, o);
  const std::string msg = construction_error([&] { FullyShardedDataParallel::make(b, o); });
  TS_TEST(msg ==
          "FSDP: parameter 'bias' is shared with 'bias' of a Linear wrapped by another FSDP "
          "unit, which that unit already flattened; the unit wrapping the Linear cannot flatten "
          "it again: " +
              kSharedAdvice);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(wrapped_twice)

BOOST_DATA_TEST_CASE(the_same_module_by_hand, bdata::make({false, true}), use_orig_params) {
  auto linear = std::make_shared<nn::Linear>(4, 4);
  const WrapperOptions o = fake_options(use_orig_params);
  auto unit = FullyShardedDataParallel::make(linear, o);
  const std::string msg = construction_error([&] { FullyShardedDataParallel::make(linear, o); });
  TS_TEST(msg == "FSDP: the Linear is already wrapped by FSDP: " + kTwiceAdvice);
}

// A submodule wrapped on its own (and left out of the model), then the model auto-wrapped: the
// policy meets the original submodule again and names it by its FQN.
BOOST_DATA_TEST_CASE(a_submodule_then_the_model, bdata::make({false, true}), use_orig_params) {
  auto model = std::make_shared<ListNet>(1);
  WrapperOptions o = fake_options(use_orig_params);
  auto unit = FullyShardedDataParallel::make(model->child("layers")->child("0"), o);
  o.auto_wrap_policy = policies::AutoWrapPolicy(policies::always_wrap_policy);
  const std::string msg = construction_error([&] { FullyShardedDataParallel::make(model, o); });
  TS_TEST(msg == "FSDP: 'layers.0' is already wrapped by FSDP: " + kTwiceAdvice);
}

// The model wrapped, then a module inside it: the root unit manages that module already.
BOOST_DATA_TEST_CASE(a_module_inside_a_unit, bdata::make({false, true}), use_orig_params) {
  auto model = std::make_shared<ListNet>(1);
  const nn::ModulePtr inner = model->child("layers")->child("2");
  const WrapperOptions o = fake_options(use_orig_params);
  auto root = FullyShardedDataParallel::make(model, o);
  const std::string msg = construction_error([&] { FullyShardedDataParallel::make(inner, o); });
  TS_TEST(msg ==
          "FSDP: the Linear is already wrapped by FSDP (another FSDP unit, wrapping a ListNet, "
          "manages it): " +
              kTwiceAdvice);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(containers)

// always_wrap_policy makes every module a unit, the ModuleList too: the list's unit holds no
// parameters and is never called; its modules' units run, and the losses are the plain model's.
BOOST_DATA_TEST_CASE(always_wrap_policy_trains,
                     bdata::make({2, 4}) * bdata::make({false, true}) *
                         bdata::make({ShardingStrategy::FULL_SHARD,
                                      ShardingStrategy::SHARD_GRAD_OP}),
                     world, use_orig_params, strategy) {
  WrapperOptions o;
  o.use_orig_params = use_orig_params;
  o.sharding_strategy = strategy;
  o.auto_wrap_policy = policies::AutoWrapPolicy(policies::always_wrap_policy);
  std::atomic<int> containers{0};
  const auto losses = train_sharded(world, o, [&](FullyShardedDataParallel& root) {
    for (auto* u : root.fsdp_units())
      if (u->module()->isinstance("ModuleList")) {
        ++containers;
        TS_TEST(u->handle() == nullptr);
      }
  });
  TS_TEST(containers.load() == world);
  check_losses(losses, train_plain(world));
}

// torch.nn.TransformerEncoder runs the layers of its ModuleList: under always_wrap_policy the
// list is a unit (never called) and the encoder still runs its layers' units, giving the plain
// model's output (it once called the list: "Module [ModuleList] is missing the required forward
// function").
BOOST_DATA_TEST_CASE(transformer_encoder_under_always_wrap_policy, bdata::make({false, true}),
                     use_orig_params) {
  auto build = [] {
    manual_seed(5);
    nn::TransformerEncoderLayerOptions o;
    o.dim_feedforward = 16;
    o.dropout = 0.0;
    o.batch_first = true;
    return std::make_shared<nn::TransformerEncoder>(
        std::make_shared<nn::TransformerEncoderLayer>(8, 2, o), 2);
  };
  Generator gen(9);
  std::vector<double> values(2 * 3 * 8);
  for (auto& v : values) v = gen.uniform() * 2 - 1;
  const Tensor x = from_vector(values, {2, 3, 8});
  const std::vector<double> want = (*build())(x).tensor().to_vector();
  on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    WrapperOptions o = options(pg, use_orig_params);
    o.auto_wrap_policy = policies::AutoWrapPolicy(policies::always_wrap_policy);
    auto fsdp = FullyShardedDataParallel::make(build(), o);
    TS_TEST(getattr(fsdp, "layers")->isinstance("FullyShardedDataParallel"));
    Tensor out = (*fsdp)(x).tensor();
    TS_TEST(out.to_vector() == want, boost::test_tools::tolerance(1e-6)
                                         << boost::test_tools::per_element());
    out.sum().backward();
    for (const auto& p : fsdp->parameters())
      if (p.numel() > 0) TS_TEST(p.grad().defined());
  });
}

// A policy that wraps the list but not its modules leaves their parameters in the list's unit,
// which is never called: it all-gathers them around each module's forward (upstream's FSDP1
// leaves them sharded), and training equals the plain model's.
BOOST_DATA_TEST_CASE(container_unit_with_parameters_trains,
                     bdata::make({2, 4}) * bdata::make({false, true}) *
                         bdata::make({ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP,
                                      ShardingStrategy::NO_SHARD}),
                     world, use_orig_params, strategy) {
  WrapperOptions o;
  o.use_orig_params = use_orig_params;
  o.sharding_strategy = strategy;
  o.auto_wrap_policy = policies::AutoWrapPolicy(
      std::make_shared<policies::ModuleWrapPolicy>(nn::ClassSet{"ModuleList"}));
  std::atomic<int> held{0};
  const auto losses = train_sharded(world, o, [&](FullyShardedDataParallel& root) {
    for (auto* u : root.fsdp_units())
      if (u->module()->isinstance("ModuleList") && u->handle() != nullptr)
        held += static_cast<int>(u->handle()->params().size());
  });
  TS_TEST(held.load() == 4 * world);  // two Linear layers' weights and biases on each rank
  check_losses(losses, train_plain(world));
}

// The same with the list's Linear layers under activation checkpointing, recomputed whole
// (early_stop off): their recomputation in backward runs their forward hooks again, which must
// leave the unit unsharded.
BOOST_DATA_TEST_CASE(container_unit_with_parameters_under_activation_checkpointing,
                     bdata::make({2, 4}) * bdata::make({false, true}), world, use_orig_params) {
  WrapperOptions o;
  o.use_orig_params = use_orig_params;
  o.auto_wrap_policy = policies::AutoWrapPolicy(
      std::make_shared<policies::ModuleWrapPolicy>(nn::ClassSet{"ModuleList"}));
  const auto losses = train_sharded(world, o, [](FullyShardedDataParallel& root) {
    auto whole = [](nn::ModulePtr m, const WrapperOptions&) {
      ops::CheckpointOptions c;
      c.early_stop = false;
      return ops::checkpoint_wrapper(std::move(m), ops::CheckpointImpl::NO_REENTRANT, c);
    };
    ops::apply_activation_checkpointing(root.shared_from_this(), whole,
                                        [](nn::Module& m) { return m.isinstance("Linear"); });
    TS_TEST(
        getattr(getattr(root.shared_from_this(), "layers"), "0")->isinstance("CheckpointWrapper"));
  });
  check_losses(losses, train_plain(world));
}

BOOST_AUTO_TEST_SUITE_END()
