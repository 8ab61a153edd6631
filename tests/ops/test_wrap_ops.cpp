// The wrap family: wrap, wrap_with_set_grad_enabled, wrap_activation_checkpoint,
// tag_activation_checkpoint (divide_kwargs, node tags, both execution paths), eagerly and traced.
#include <boost/test/unit_test.hpp>

#include "core/autograd.h"
#include "core/random.h"
#include "core/warnings.h"
#include "ops/checkpoint.h"
#include "ops/fake_mode.h"
#include "ops/graph/tracer.h"
#include "ops/selective_checkpoint.h"
#include "ops/wrap.h"
#include "tests/ops/ops_test_models.h"

using namespace fsdp;
using namespace fsdp::ops;
using graph::GraphModulePtr;

namespace {
// y = tanh(x @ w) * x, traced into a graph module.
GraphModulePtr traced_body(const Tensor& x, const Tensor& w) {
  return graph::trace(
      [](const nn::Args& a) {
        return nn::Value(mul(tanh(mm(a.tensor(0), a.tensor(1))), a.tensor(0)));
      },
      {x, w});
}

std::any meta(const GraphModulePtr& gm, std::size_t i, const char* key) {
  return gm->graph.nodes().at(i).meta.at(key);
}
}  // namespace

BOOST_AUTO_TEST_SUITE(wrap_ops)

BOOST_AUTO_TEST_CASE(wrap_calls_the_function_with_args_and_kwargs) {
  Function fn = [](const nn::Args& a) {
    return nn::Value(mul(a.tensor(0), a.get(1, "scale").to_double()));
  };
  nn::Value out = wrap(Object(fn), {ones({2})}, {{"scale", Object(3.0)}});
  BOOST_TEST(out.tensor().to_vector() == (std::vector<double>{3, 3}));
  BOOST_TEST(wrap_op().name() == "wrap");
  BOOST_TEST(find_operator("wrap") == &wrap_op());
  // Under a mode without a rule, the body's ops reach the mode (wrap bypasses the dispatcher).
  auto rec = std::make_shared<ops_test::RecordingMode>();
  {
    dispatch::ModeGuard g(rec);
    wrap(Object(fn), {ones({2})}, {{"scale", Object(2.0)}});
  }
  BOOST_TEST(rec->ops == (std::vector<std::string>{"mul.Scalar"}));
}

BOOST_AUTO_TEST_CASE(fake_and_functionalization_modes_see_the_body) {
  Function fn = [](const nn::Args& a) { return nn::Value(mm(a.tensor(0), a.tensor(1))); };
  Tensor a = ones({2, 3}), b = ones({3, 5});
  {
    dispatch::ModeGuard g(std::make_shared<FakeTensorMode>());
    Tensor out = wrap(Object(fn), {a, b}).tensor();
    BOOST_TEST(out.is_meta());
    BOOST_TEST(out.shape() == (Shape{2, 5}));
  }
  dispatch::ModeGuard g(std::make_shared<FunctionalizeMode>());
  BOOST_TEST(wrap(Object(fn), {a, b}).tensor().to_vector() == std::vector<double>(10, 3.0));
}

BOOST_AUTO_TEST_CASE(wrap_with_set_grad_enabled_sets_and_restores_grad_mode) {
  Tensor x = ones({2}).requires_grad_();
  Function fn = [](const nn::Args& a) {
    return nn::Value(std::vector<nn::Value>{mul(a.tensor(0), 2.0), autograd::is_grad_enabled()});
  };
  nn::Value off = wrap_with_set_grad_enabled(false, Object(fn), {x});
  BOOST_TEST(!off[1].to_bool());
  BOOST_TEST(!off[0].tensor().requires_grad());
  BOOST_TEST(autograd::is_grad_enabled());
  {
    autograd::NoGradGuard no_grad;
    nn::Value on = wrap_with_set_grad_enabled(true, Object(fn), {x});
    BOOST_TEST(on[1].to_bool());
    BOOST_TEST(on[0].tensor().requires_grad());
    BOOST_TEST(!autograd::is_grad_enabled());
  }
  // Restored also when the body throws (upstream does not restore: documented difference).
  Function throws = [](const nn::Args&) -> nn::Value { throw ValueError("body failed"); };
  BOOST_CHECK_THROW(wrap_with_set_grad_enabled(false, Object(throws), {}), ValueError);
  BOOST_TEST(autograd::is_grad_enabled());
}

BOOST_AUTO_TEST_CASE(wrap_with_set_grad_enabled_traces_to_one_node) {
  Tensor x = ones({2}).requires_grad_();
  Function body = [](const nn::Args& a) { return nn::Value(mul(a.tensor(0), 2.0)); };
  auto gm = graph::trace(
      [&](const nn::Args& a) {
        return wrap_with_set_grad_enabled(false, Object(body), {a.tensor(0)});
      },
      {x});
  BOOST_TEST(gm->code().find("call_function[target=wrap_with_set_grad_enabled](args = (False, "
                             "%wrap_body_0, %arg0), kwargs = {})") != std::string::npos,
             gm->code());
  Tensor y = (*gm)(x).tensor();
  BOOST_TEST(!y.requires_grad());
  BOOST_TEST(y.to_vector() == (std::vector<double>{2, 2}));
}

BOOST_AUTO_TEST_CASE(wrap_activation_checkpoint_recomputes_and_matches_eager_gradients) {
  Tensor x = randn({3, 3}, DType::Float64).requires_grad_();
  Tensor w = randn({3, 3}, DType::Float64).requires_grad_();
  GraphModulePtr body = traced_body(x.detach(), w.detach());
  const auto before = checkpoint_recompute_count();
  sum(wrap_activation_checkpoint(Object(nn::ModulePtr(body)), {x, w}).tensor()).backward();
  BOOST_TEST(checkpoint_recompute_count() - before == 1);
  Tensor gx = x.grad(), gw = w.grad();
  x.set_grad(Tensor());
  w.set_grad(Tensor());
  sum(mul(tanh(mm(x, w)), x)).backward();
  BOOST_TEST(gx.to_vector() == x.grad().to_vector());
  BOOST_TEST(gw.to_vector() == w.grad().to_vector());

  Function not_a_graph = [](const nn::Args& a) { return a.positional[0]; };
  BOOST_CHECK_EXCEPTION(wrap_activation_checkpoint(Object(not_a_graph), {x}), TypeError,
                        [](const TypeError& e) {
                          return std::string(e.what()) ==
                                 "wrap_activation_checkpoint: the function must be a GraphModule, "
                                 "got function";
                        });
}

// Upstream passes use_reentrant=False and preserve_rng_state=False whatever the caller gave:
// use_reentrant=True (which checkpoint itself refuses here) is accepted, and the recompute draws
// a fresh dropout mask instead of replaying the forward's.
BOOST_AUTO_TEST_CASE(wrap_activation_checkpoint_forces_non_reentrant_without_rng_preservation) {
  Function drop = [](const nn::Args& a) { return nn::Value(dropout(a.tensor(0), 0.5, true)); };
  Tensor x = ones({4096}, DType::Float64).requires_grad_();
  GraphModulePtr body = graph::trace(drop, {x.detach()});
  const Kwargs callers{{"use_reentrant", Object(true)}, {"preserve_rng_state", Object(true)}};

  manual_seed(7);
  Tensor y = wrap_activation_checkpoint(Object(nn::ModulePtr(body)), {x}, callers).tensor();
  sum(y).backward();
  // The input is ones and p = 0.5: y is the forward's mask times 2, the gradient the recompute's.
  BOOST_TEST(y.to_vector() != x.grad().to_vector());

  // Plain checkpoint with the same seed replays the forward's mask, as its default promises.
  x.set_grad(Tensor());
  manual_seed(7);
  Tensor replayed = checkpoint(drop, {x}, Kwargs{{"use_reentrant", Object(false)}}).tensor();
  sum(replayed).backward();
  BOOST_TEST(replayed.to_vector() == y.to_vector());
  BOOST_TEST(replayed.to_vector() == x.grad().to_vector());
}

BOOST_AUTO_TEST_CASE(divide_kwargs_splits_checkpoint_keywords_in_call_order) {
  Kwargs kwargs{{"z", Object(1.0)},
                {"use_reentrant", Object(false)},
                {"a", Object(2.0)},
                {"preserve_rng_state", Object(true)},
                {"debug", Object(false)}};
  auto [ckpt, gmod] = divide_kwargs(kwargs);
  BOOST_REQUIRE(ckpt.size() == 3u);
  BOOST_TEST(ckpt[0].first == "use_reentrant");
  BOOST_TEST(ckpt[1].first == "preserve_rng_state");
  BOOST_TEST(ckpt[2].first == "debug");
  BOOST_REQUIRE(gmod.size() == 2u);
  BOOST_TEST(gmod[0].first == "z");
  BOOST_TEST(gmod[1].first == "a");
}

BOOST_AUTO_TEST_CASE(tag_activation_checkpoint_tags_nodes_with_a_fresh_graph_id_per_call) {
  Tensor x = randn({2, 2}), w = randn({2, 2});
  GraphModulePtr gm = traced_body(x, w);
  // nodes: arg0, arg1, mm, tanh, mul, output
  nn::Value out = tag_activation_checkpoint(gm, {x, w});
  BOOST_TEST(out.tensor().to_vector() == mul(tanh(mm(x, w)), x).to_vector());
  const auto id = std::any_cast<std::int64_t>(meta(gm, 2, "ac_graph_id"));
  for (std::size_t i : {2u, 3u, 4u}) {
    BOOST_TEST(std::any_cast<std::int64_t>(meta(gm, i, "ac_graph_id")) == id);
    BOOST_TEST((std::any_cast<CheckpointPolicy>(meta(gm, i, "recompute")) ==
                CheckpointPolicy::PREFER_RECOMPUTE));
  }
  for (std::size_t i : {0u, 1u, 5u}) BOOST_TEST(gm->graph.nodes()[i].meta.empty());
  tag_activation_checkpoint(gm, {x, w});
  BOOST_TEST(std::any_cast<std::int64_t>(meta(gm, 2, "ac_graph_id")) == id + 1);
  GraphModulePtr other = traced_body(x, w);
  tag_nodes(other, false);
  BOOST_TEST(std::any_cast<std::int64_t>(meta(other, 3, "ac_graph_id")) == id + 2);
}

BOOST_AUTO_TEST_CASE(tag_activation_checkpoint_drops_kwargs_on_the_plain_path) {
  Tensor x = randn({2, 2}), w = randn({2, 2});
  GraphModulePtr gm = traced_body(x, w);
  // Upstream's quirk, reproduced: kwargs (checkpoint's and the body's) are ignored.
  nn::Value out =
      tag_activation_checkpoint(gm, {x, w}, {{"use_reentrant", Object(true)}, {"z", Object(3.0)}});
  BOOST_TEST(out.tensor().to_vector() == mul(tanh(mm(x, w)), x).to_vector());
}

BOOST_AUTO_TEST_CASE(tag_activation_checkpoint_with_a_context_fn_runs_selective_checkpointing) {
  Tensor x = randn({2, 2}, DType::Float64).requires_grad_();
  Tensor w = randn({2, 2}, DType::Float64).requires_grad_();
  GraphModulePtr gm = traced_body(x.detach(), w.detach());
  std::vector<std::string> seen;
  PolicyFn policy = [&](const SelectiveCheckpointContext& ctx, const dispatch::OpCall& call) {
    seen.push_back(std::string(ctx.is_recompute ? "recompute " : "forward ") + call.name());
    return std::string(call.name()) == "mm" ? CheckpointPolicy::MUST_SAVE
                                            : CheckpointPolicy::PREFER_RECOMPUTE;
  };
  gm->meta[kCheckpointContextFnKey] = selective_context_fn(policy);
  WarningCapture warnings;
  nn::Value out = tag_activation_checkpoint(gm, {x, w});
  BOOST_TEST(warnings.contains(
      "Detected that context_fn is passed to torch.utils.checkpoint under torch.compile."));
  for (std::size_t i : {2u, 3u, 4u}) BOOST_TEST(!meta(gm, i, "recompute").has_value());
  sum(out.tensor()).backward();
  BOOST_TEST(seen == (std::vector<std::string>{"forward mm", "forward tanh", "forward mul",
                                               "recompute mm", "recompute tanh", "recompute mul"}));
  Tensor gx = x.grad();
  x.set_grad(Tensor());
  sum(mul(tanh(mm(x, w)), x)).backward();
  BOOST_TEST(gx.to_vector() == x.grad().to_vector());
  // The warning is issued once per process.
  warnings.clear();
  tag_activation_checkpoint(gm, {x, w});
  BOOST_TEST(warnings.warnings().empty());
}

BOOST_AUTO_TEST_CASE(tag_activation_checkpoint_under_a_tracer_is_one_node) {
  Tensor x = randn({2, 2}), w = randn({2, 2});
  GraphModulePtr body = traced_body(x, w);
  auto outer = graph::trace(
      [&](const nn::Args& a) {
        return nn::Value(neg(tag_activation_checkpoint(body, {a.tensor(0), a.tensor(1)}).tensor()));
      },
      {x, w});
  BOOST_TEST(outer->code().find("call_function[target=tag_activation_checkpoint](args = "
                                "(%wrap_body_0, %arg0, %arg1), kwargs = {})") != std::string::npos,
             outer->code());
  BOOST_TEST(body->graph.nodes()[2].meta.count("ac_graph_id") == 1u);
  BOOST_TEST((*outer)(x, w).tensor().to_vector() == neg(mul(tanh(mm(x, w)), x)).to_vector());
}

BOOST_AUTO_TEST_SUITE_END()
