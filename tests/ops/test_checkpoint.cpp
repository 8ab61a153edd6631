// Non-reentrant activation checkpointing: gradients equal without checkpointing (float64 exactly,
// float32 within 1e-6) on a transformer stack, identical dropout masks under recomputation,
// recompute counts, less memory held between forward and backward, and the errors.
#include <boost/test/unit_test.hpp>

#include "core/autograd.h"
#include "core/memory.h"
#include "ops/checkpoint.h"
#include "tests/ops/ops_test_models.h"

using namespace fsdp;
using namespace fsdp::ops;
using ops_test::grads;
using ops_test::max_abs_diff;
using ops_test::transformer_stack;

namespace {
// Runs the stack's layers, each checkpointed when `ckpt`, and returns the loss.
Tensor run_stack(nn::Sequential& stack, const Tensor& x, bool ckpt) {
  Tensor h = x;
  for (const auto& [name, layer] : stack.named_children()) {
    nn::ModulePtr l = layer;
    auto f = [l](const Tensor& t) { return (*l)(t).tensor(); };
    h = ckpt ? checkpoint(f, h, CheckpointOptions{.use_reentrant = false}) : f(h);
  }
  return sum(mul(h, h));
}

std::vector<Tensor> stack_grads(DType dtype, bool ckpt, double dropout, std::uint64_t data_seed) {
  auto stack = transformer_stack(3, dtype, dropout, /*seed=*/7);
  manual_seed(data_seed);
  Tensor x = randn({2, 5, 8}, TensorOptions(dtype)).requires_grad_();
  run_stack(*stack, x, ckpt).backward();
  auto g = grads(*stack);
  g.push_back(x.grad());
  return g;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(activation_checkpointing)

BOOST_AUTO_TEST_CASE(float64_gradients_are_exactly_those_without_checkpointing) {
  auto plain = stack_grads(DType::Float64, false, 0.0, 1);
  auto ckpt = stack_grads(DType::Float64, true, 0.0, 1);
  BOOST_REQUIRE(plain.size() == ckpt.size());
  BOOST_TEST(max_abs_diff(plain, ckpt) == 0.0);
}

BOOST_AUTO_TEST_CASE(float32_gradients_match_within_1e_6) {
  auto plain = stack_grads(DType::Float32, false, 0.0, 2);
  auto ckpt = stack_grads(DType::Float32, true, 0.0, 2);
  BOOST_TEST(max_abs_diff(plain, ckpt) <= 1e-6);
}

BOOST_AUTO_TEST_CASE(dropout_masks_are_replayed_so_gradients_match) {
  auto plain = stack_grads(DType::Float64, false, 0.3, 3);
  auto ckpt = stack_grads(DType::Float64, true, 0.3, 3);
  BOOST_TEST(max_abs_diff(plain, ckpt) == 0.0);
}

BOOST_AUTO_TEST_CASE(the_recomputed_dropout_mask_is_the_forward_one) {
  manual_seed(11);
  Tensor x = ones({64}, DType::Float64).requires_grad_();
  Tensor forward_out;
  auto f = [&](const Tensor& t) {
    Tensor y = dropout(t, 0.5, true);
    if (!forward_out.defined()) forward_out = y.detach();
    return mul(y, y);
  };
  Tensor out = checkpoint(f, x);
  rand({5});  // the generator moves on before backward
  sum(out).backward();
  // d/dx (mask*2*x)^2 = 2 * (mask*2)^2 * x: nonzero exactly where the forward mask kept x.
  auto g = x.grad().to_vector(), kept = forward_out.to_vector();
  for (std::size_t i = 0; i < g.size(); ++i) BOOST_TEST((g[i] != 0) == (kept[i] != 0));
  // Without preserve_rng_state the recomputation draws a new mask.
  manual_seed(11);
  Tensor x2 = ones({64}, DType::Float64).requires_grad_();
  forward_out = Tensor();
  Tensor out2 = checkpoint(f, x2, CheckpointOptions{.preserve_rng_state = false});
  sum(out2).backward();
  auto g2 = x2.grad().to_vector();
  std::size_t differ = 0;
  for (std::size_t i = 0; i < g2.size(); ++i) differ += (g2[i] != 0) != (kept[i] != 0);
  BOOST_TEST(differ > 0u);
}

BOOST_AUTO_TEST_CASE(the_function_is_recomputed_once_per_backward) {
  int calls = 0;
  Tensor x = randn({4}).requires_grad_();
  auto f = [&](const Tensor& t) {
    ++calls;
    return tanh(exp(t));
  };
  const auto before = checkpoint_recompute_count();
  Tensor y = checkpoint(f, x);
  BOOST_TEST(calls == 1);
  sum(y).backward(Tensor(), /*retain_graph=*/true);
  BOOST_TEST(calls == 2);
  sum(y).backward();  // recomputed again: each recomputed tensor is freed once used
  BOOST_TEST(calls == 3);
  BOOST_TEST(checkpoint_recompute_count() - before == 2);
  // A function whose outputs nobody differentiates is never recomputed.
  Tensor z = checkpoint(f, x);
  BOOST_TEST(calls == 4);
  (void)z;
}

BOOST_AUTO_TEST_CASE(recomputation_stops_once_every_saved_tensor_is_back) {
  std::vector<std::string> ran;
  Tensor x = randn({3}).requires_grad_();
  Function f = [&](const nn::Args& a) {
    Tensor h = exp(a.tensor(0));  // saves its output
    ran.push_back("exp");
    Tensor out = mul(h, 2.0);  // saves nothing
    ran.push_back("mul");
    return nn::Value(out);
  };
  Tensor y = checkpoint(f, nn::Args{x}).tensor();
  ran.clear();
  sum(y).backward();
  BOOST_TEST(ran.empty());  // stopped inside exp, right after it saved its output
  Tensor x2 = randn({3}).requires_grad_();
  Tensor y2 = checkpoint(f, nn::Args{x2}, CheckpointOptions{.early_stop = false}).tensor();
  ran.clear();
  sum(y2).backward();
  BOOST_TEST(ran == (std::vector<std::string>{"exp", "mul"}));
}

BOOST_AUTO_TEST_CASE(checkpointing_holds_less_memory_between_forward_and_backward) {
  auto stack = transformer_stack(4, DType::Float32, 0.0, 5);
  Tensor x = randn({4, 16, 8}).requires_grad_();
  auto held = [&](bool ckpt) {
    auto stats = std::make_shared<MemoryStats>();
    MemoryStatsScope scope(stats);
    Tensor loss = run_stack(*stack, x, ckpt);
    const auto bytes = stats->current_bytes.load();
    loss.backward();
    return bytes;
  };
  const auto plain = held(false), ckpt = held(true);
  BOOST_TEST(ckpt * 3 < plain, "checkpointed " << ckpt << " bytes, plain " << plain);
}

BOOST_AUTO_TEST_CASE(a_recomputation_with_other_metadata_is_a_checkpoint_error) {
  int calls = 0;
  Tensor x = randn({4}).requires_grad_();
  auto f = [&](const Tensor& t) { return exp(++calls == 1 ? t : view(t, {2, 2})); };
  Tensor y = checkpoint(f, x);
  BOOST_CHECK_EXCEPTION(sum(y).backward(), CheckpointError, [](const CheckpointError& e) {
    return std::string(e.what()) ==
           "torch.utils.checkpoint: Recomputed values for the following tensors have different "
           "metadata than during the forward pass.\ntensor at position 0:\nsaved metadata: "
           "{'shape': [4], 'dtype': float32, 'device': cpu}\nrecomputed metadata: {'shape': [2, "
           "2], 'dtype': float32, 'device': cpu}\n";
  });
  calls = 0;
  Tensor x2 = randn({4}).requires_grad_();
  Tensor y2 = checkpoint(f, x2, CheckpointOptions{.determinism_check = "none"});
  BOOST_CHECK_THROW(sum(y2).backward(), Error);  // unchecked: the shapes then fail in backward
}

BOOST_AUTO_TEST_CASE(a_recomputation_saving_fewer_or_more_tensors_is_a_checkpoint_error) {
  int calls = 0;
  Tensor x = randn({4}).requires_grad_();
  Function fewer = [&](const nn::Args& a) {
    Tensor h = ++calls == 1 ? exp(exp(a.tensor(0))) : exp(a.tensor(0));
    return nn::Value(h);
  };
  Tensor y = checkpoint(fewer, nn::Args{x}, CheckpointOptions{.early_stop = false}).tensor();
  BOOST_CHECK_EXCEPTION(sum(y).backward(), CheckpointError, [](const CheckpointError& e) {
    return std::string(e.what()) ==
           "torch.utils.checkpoint: A different number of tensors was saved during the original "
           "forward and recomputation.\nNumber of tensors saved during forward: 2\nNumber of "
           "tensors saved during recomputation: 1";
  });
  calls = 0;
  Function more = [&](const nn::Args& a) {
    Tensor h = ++calls == 1 ? exp(a.tensor(0)) : exp(exp(a.tensor(0)));
    return nn::Value(h);
  };
  Tensor z = checkpoint(more, nn::Args{x}, CheckpointOptions{.early_stop = false}).tensor();
  BOOST_CHECK_EXCEPTION(sum(z).backward(), CheckpointError, [](const CheckpointError& e) {
    return std::string(e.what()) ==
           "torch.utils.checkpoint: trying to save more tensors during recomputation than during "
           "the original forward pass.";
  });
}

BOOST_AUTO_TEST_CASE(invalid_options_are_errors) {
  Tensor x = ones({1});
  auto f = [](const Tensor& t) { return t; };
  BOOST_CHECK_EXCEPTION(checkpoint(f, x, CheckpointOptions{.use_reentrant = true}),
                        NotImplementedError, [](const NotImplementedError& e) {
                          return std::string(e.what()).rfind(
                                     "checkpoint: use_reentrant=True is not supported", 0) == 0;
                        });
  ContextFn ctx = [] { return std::pair<dispatch::ModePtr, dispatch::ModePtr>{}; };
  BOOST_CHECK_EXCEPTION(
      checkpoint(f, x, CheckpointOptions{.use_reentrant = true, .context_fn = ctx}), ValueError,
      [](const ValueError& e) {
        return std::string(e.what()) ==
               "Passing `context_fn` or `debug` is only supported when use_reentrant=False.";
      });
  BOOST_CHECK_EXCEPTION(checkpoint(f, x, CheckpointOptions{.determinism_check = "strict"}),
                        ValueError, [](const ValueError& e) {
                          return std::string(e.what()) ==
                                 "determinism_check should be one of ['default', 'none'], but got "
                                 "strict";
                        });
  BOOST_CHECK_EXCEPTION(checkpoint(f, x, CheckpointOptions{.context_fn = ctx, .debug = true}),
                        ValueError, [](const ValueError& e) {
                          return std::string(e.what()) ==
                                 "debug=True is incompatible with non-default context_fn";
                        });
}

BOOST_AUTO_TEST_CASE(the_keyword_form_passes_other_keywords_to_the_function) {
  Tensor x = full({2}, 2.0).requires_grad_();
  Function f = [](const nn::Args& a) {
    return nn::Value(mul(a.tensor(0), a.get(1, "scale").to_double()));
  };
  Tensor y = checkpoint(f, std::vector<nn::Value>{x},
                        Kwargs{{"use_reentrant", Object(false)}, {"scale", Object(5.0)}})
                 .tensor();
  BOOST_TEST(y.to_vector() == (std::vector<double>{10, 10}));
  sum(y).backward();
  BOOST_TEST(x.grad().to_vector() == (std::vector<double>{5, 5}));
}

BOOST_AUTO_TEST_SUITE_END()
