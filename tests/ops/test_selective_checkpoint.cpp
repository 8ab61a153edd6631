// Selective activation checkpointing: per-op policies (enum, bool, op list), caching at forward
// and replay at recomputation matched by op and call order, and upstream's errors.
#include <boost/test/unit_test.hpp>

#include "core/autograd.h"
#include "ops/graph/interpreter.h"
#include "ops/graph/tracer.h"
#include "ops/selective_checkpoint.h"
#include "ops/wrap.h"
#include "tests/ops/ops_test_models.h"

using namespace fsdp;
using namespace fsdp::ops;

namespace {
struct Log {
  std::vector<std::string> calls;  // "fwd mm" / "rec mm" as the policy sees them
};

PolicyFn save_mm(Log& log) {
  return [&log](const SelectiveCheckpointContext& ctx, const dispatch::OpCall& call) {
    log.calls.push_back(std::string(ctx.is_recompute ? "rec " : "fwd ") + call.name());
    return std::string(call.name()) == "mm" ? CheckpointPolicy::MUST_SAVE
                                            : CheckpointPolicy::PREFER_RECOMPUTE;
  };
}

// relu(x @ w) @ w, with the inner ops counted by a mode under the checkpoint.
Tensor region(const Tensor& x, const Tensor& w) {
  return mm(relu(mm(x, w)), w);
}

CheckpointOptions sac(ContextFn ctx) {
  CheckpointOptions o;
  o.use_reentrant = false;
  o.context_fn = std::move(ctx);
  return o;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(selective_checkpointing)

// A Llama-style region (rms_norm, rotary, grouped-query causal attention, silu) with its
// attention and norms saved by name: the same gradients as without checkpointing, and at
// recomputation the saved ops come from the cache while silu and apply_rotary run again.
BOOST_AUTO_TEST_CASE(transformer_ops_are_saved_by_name) {
  Tensor x = randn({1, 2, 6, 8}, DType::Float64).requires_grad_();
  Tensor w = randn({8}, DType::Float64).requires_grad_();
  Tensor kv = randn({1, 1, 6, 8}, DType::Float64);
  auto [cos, sin] = rotary_cos_sin(rotary_inv_freq(8, 1e4), 0, 6, DType::Float64);
  auto block = [&](const Tensor& t) {
    Tensor q = apply_rotary(rms_norm(t, w, 1e-6), cos, sin);
    return silu(scaled_dot_product_attention(q, kv, kv, {}, true, {}, true));
  };
  sum(block(x)).backward();
  const Tensor plain = x.grad();
  x.set_grad(Tensor());
  auto counter = std::make_shared<ops_test::RecordingMode>();
  {
    dispatch::ModeGuard g(counter);
    Tensor y = checkpoint(block, x,
                          sac(selective_context_fn(std::vector<std::string>{
                              "scaled_dot_product_attention", "rms_norm"})));
    counter->ops.clear();
    sum(y).backward();
  }
  BOOST_TEST(x.grad().to_vector() == plain.to_vector());
  auto runs = [&](const char* op) {
    return std::count(counter->ops.begin(), counter->ops.end(), op);
  };
  BOOST_TEST(runs("scaled_dot_product_attention") == 0);
  BOOST_TEST(runs("rms_norm") == 0);
  BOOST_TEST(runs("apply_rotary") == 1);
  BOOST_TEST(runs("silu") == 1);
}

BOOST_AUTO_TEST_CASE(saved_ops_are_replayed_and_the_rest_recomputed) {
  Tensor x = randn({3, 3}, DType::Float64).requires_grad_();
  Tensor w = randn({3, 3}, DType::Float64).requires_grad_();
  Log log;
  auto counter = std::make_shared<ops_test::RecordingMode>();  // sees what really runs below
  Tensor y;
  {
    dispatch::ModeGuard g(counter);
    y = checkpoint([&](const Tensor& t) { return region(t, w); }, x,
                   sac(selective_context_fn(save_mm(log))));
    counter->ops.clear();
    sum(y).backward();
  }
  BOOST_TEST(log.calls == (std::vector<std::string>{"fwd mm", "fwd relu", "fwd mm", "rec mm",
                                                    "rec relu", "rec mm"}));
  // At recomputation only relu runs (the two mm outputs come from the cache); the rest of the
  // ops are backward's own.
  BOOST_TEST(std::count(counter->ops.begin(), counter->ops.end(), "relu") == 1);
  Tensor gx = x.grad(), gw = w.grad();
  x.set_grad(Tensor());
  w.set_grad(Tensor());
  sum(region(x, w)).backward();
  BOOST_TEST(gx.to_vector() == x.grad().to_vector());
  BOOST_TEST(gw.to_vector() == w.grad().to_vector());
}

BOOST_AUTO_TEST_CASE(policies_from_bools_and_lists) {
  BOOST_TEST((policy_from_bool(true) == CheckpointPolicy::MUST_SAVE));
  BOOST_TEST((policy_from_bool(false) == CheckpointPolicy::PREFER_RECOMPUTE));
  BOOST_TEST(to_string(CheckpointPolicy::PREFER_SAVE) == "CheckpointPolicy.PREFER_SAVE");
  BOOST_TEST(is_save(CheckpointPolicy::PREFER_SAVE));
  BOOST_TEST(!is_save(CheckpointPolicy::MUST_RECOMPUTE));
  Tensor x = randn({2, 2}, DType::Float64).requires_grad_();
  Tensor w = randn({2, 2}, DType::Float64);
  BoolPolicyFn bool_policy = [](const SelectiveCheckpointContext&, const dispatch::OpCall& c) {
    return std::string(c.name()) == "relu";
  };
  Tensor y1 =
      checkpoint([&](const Tensor& t) { return region(t, w); }, x,
                 sac([bool_policy] { return create_selective_checkpoint_contexts(bool_policy); }));
  sum(y1).backward();
  Tensor g1 = x.grad();
  x.set_grad(Tensor());
  Tensor y2 = checkpoint([&](const Tensor& t) { return region(t, w); }, x,
                         sac(selective_context_fn(std::vector<std::string>{"mm", "relu"})));
  sum(y2).backward();
  BOOST_TEST(g1.to_vector() == x.grad().to_vector());
  BOOST_CHECK_EXCEPTION(
      create_selective_checkpoint_contexts(std::vector<std::string>{"mm", "matmull"}), ValueError,
      [](const ValueError& e) {
        return std::string(e.what()) ==
               "Expected op in `op_list` to be an OpOverload but got: matmull of "
               "type str. ";
      });
  BOOST_CHECK_EXCEPTION(create_selective_checkpoint_contexts(PolicyFn()), TypeError,
                        [](const TypeError& e) {
                          return std::string(e.what()) ==
                                 "policy_fn_or_list must be either a function or a list of ops.";
                        });
}

BOOST_AUTO_TEST_CASE(a_second_backward_is_an_error) {
  Tensor x = randn({2, 2}).requires_grad_();
  Tensor w = randn({2, 2});
  Log log;
  Tensor y = checkpoint([&](const Tensor& t) { return region(t, w); }, x,
                        sac(selective_context_fn(save_mm(log))));
  sum(y).backward(Tensor(), /*retain_graph=*/true);
  BOOST_CHECK_EXCEPTION(sum(y).backward(), RuntimeError, [](const RuntimeError& e) {
    return std::string(e.what()) ==
           "Trying to backward an extra time. You are only allowed to backward once on any region "
           "computed under selective activation checkpoint.";
  });
}

BOOST_AUTO_TEST_CASE(a_cached_tensor_mutated_in_place_is_an_error_unless_allowed) {
  auto run = [](bool allow) {
    Tensor x = randn({2, 2}).requires_grad_();
    Tensor w = randn({2, 2});
    Tensor y = checkpoint(
        [&](const Tensor& t) {
          Tensor h = mm(t, w);
          {
            autograd::NoGradGuard no_grad;
            mul_(h, 1.0);  // bumps h's version after it was cached
          }
          return relu(h);
        },
        x, sac(selective_context_fn(std::vector<std::string>{"mm"}, allow)));
    sum(y).backward();
  };
  BOOST_CHECK_EXCEPTION(run(false), RuntimeError, [](const RuntimeError& e) {
    return std::string(e.what()) ==
           "Tensor cached during selective activation checkpoint has been mutated";
  });
  BOOST_CHECK_NO_THROW(run(true));
}

BOOST_AUTO_TEST_CASE(an_op_saved_only_at_recomputation_is_not_in_storage) {
  Tensor x = randn({2, 2}).requires_grad_();
  Tensor w = randn({2, 2});
  PolicyFn inconsistent = [](const SelectiveCheckpointContext& ctx, const dispatch::OpCall& c) {
    return ctx.is_recompute && std::string(c.name()) == "relu" ? CheckpointPolicy::MUST_SAVE
                                                               : CheckpointPolicy::PREFER_RECOMPUTE;
  };
  Tensor y = checkpoint([&](const Tensor& t) { return region(t, w); }, x,
                        sac(selective_context_fn(inconsistent)));
  BOOST_CHECK_EXCEPTION(sum(y).backward(), RuntimeError, [](const RuntimeError& e) {
    return std::string(e.what()) == "relu encountered during backward, but not found in storage";
  });
}

BOOST_AUTO_TEST_CASE(selective_gradients_match_on_a_transformer_stack) {
  for (DType dtype : {DType::Float64, DType::Float32}) {
    auto stack = ops_test::transformer_stack(2, dtype, 0.2, 9);
    manual_seed(4);
    Tensor x = randn({2, 4, 8}, TensorOptions(dtype)).requires_grad_();
    auto loss = [&](bool selective) {
      Tensor h = x;
      for (const auto& [name, layer] : stack->named_children()) {
        nn::ModulePtr l = layer;
        auto f = [l](const Tensor& t) { return (*l)(t).tensor(); };
        h = selective ? checkpoint(f, h,
                                   sac(selective_context_fn(
                                       std::vector<std::string>{"linear", "matmul", "bmm", "mm"})))
                      : f(h);
      }
      return sum(h);
    };
    manual_seed(99);
    loss(false).backward();
    auto plain = ops_test::grads(*stack);
    stack->zero_grad();
    manual_seed(99);
    loss(true).backward();
    const double tol = dtype == DType::Float64 ? 0.0 : 1e-6;
    BOOST_TEST(ops_test::max_abs_diff(plain, ops_test::grads(*stack)) <= tol);
  }
}

BOOST_AUTO_TEST_CASE(under_a_tracer_the_policy_tags_the_nodes_being_interpreted) {
  // Upstream's compile path: with a tracer below the caching mode, the policy of each op is
  // written into the "recompute" tag of the graph node that the interpreter is running.
  Tensor x = randn({2, 2}), w = randn({2, 2});
  auto gm = graph::trace(
      [](const nn::Args& a) { return nn::Value(relu(mm(a.tensor(0), a.tensor(1)))); }, {x, w});
  tag_nodes(gm, /*is_sac=*/true);
  Log log;
  graph::trace(
      [&](const nn::Args& a) {
        graph::PreserveNodeMetaGuard preserve;
        return checkpoint(
            [gm](const nn::Args& b) { return graph::Interpreter(gm).run(b.positional); }, a,
            sac(selective_context_fn(save_mm(log))));
      },
      {x, w});
  // nodes: arg0, arg1, mm, relu, output
  BOOST_TEST((std::any_cast<CheckpointPolicy>(gm->graph.node(2).meta.at("recompute")) ==
              CheckpointPolicy::MUST_SAVE));
  BOOST_TEST((std::any_cast<CheckpointPolicy>(gm->graph.node(3).meta.at("recompute")) ==
              CheckpointPolicy::PREFER_RECOMPUTE));
}

BOOST_AUTO_TEST_SUITE_END()
