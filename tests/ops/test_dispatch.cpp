// The op-interception mode stack (core/dispatch): what a mode sees, running, recording and
// replacing calls, nesting, and the fake (meta) mode.
#include <algorithm>
#include <boost/test/unit_test.hpp>

#include "core/dispatch/dispatch_mode.h"
#include "core/nn/nn.h"
#include "core/ops.h"
#include "ops/fake_mode.h"
#include "tests/ops/ops_test_models.h"

using namespace fsdp;
using fsdp::ops_test::RecordingMode;

namespace {
class ReplaceMode : public dispatch::DispatchMode {
 public:
  std::string name() const override { return "ReplaceMode"; }
  nn::Value handle(const dispatch::OpCall& call) override {
    if (std::string(call.name()) == "mul") return nn::Value(full({2}, 42.0));
    return call.run();
  }
};

class RerunMode : public dispatch::DispatchMode {
 public:
  explicit RerunMode(std::vector<Tensor> inputs) : inputs_(std::move(inputs)) {}
  std::string name() const override { return "RerunMode"; }
  nn::Value handle(const dispatch::OpCall& call) override { return call.run(inputs_); }

 private:
  std::vector<Tensor> inputs_;
};

class BadResultMode : public dispatch::DispatchMode {
 public:
  std::string name() const override { return "BadResultMode"; }
  nn::Value handle(const dispatch::OpCall&) override { return nn::Value(1.5); }
};

class CaptureMode : public dispatch::DispatchMode {
 public:
  std::string name() const override { return "CaptureMode"; }
  nn::Value handle(const dispatch::OpCall& call) override {
    args = call.args();
    kinds = call.arg_kinds();
    inputs = call.inputs();
    out = call.run();
    return out;
  }
  std::vector<nn::Value> args;
  std::vector<dispatch::ArgKind> kinds;
  std::vector<Tensor> inputs;
  nn::Value out;
};
}  // namespace

BOOST_AUTO_TEST_SUITE(dispatch_modes)

BOOST_AUTO_TEST_CASE(no_mode_means_the_flag_is_off) {
  BOOST_TEST(!dispatch::any_mode_active());
  BOOST_TEST(dispatch::current_mode() == nullptr);
  {
    dispatch::ModeGuard g(std::make_shared<RecordingMode>());
    BOOST_TEST(dispatch::any_mode_active());
  }
  BOOST_TEST(!dispatch::any_mode_active());
  BOOST_CHECK_EXCEPTION(dispatch::PopModeGuard(), RuntimeError, [](const RuntimeError& e) {
    return std::string(e.what()) == "PopModeGuard: no dispatch mode is active";
  });
}

BOOST_AUTO_TEST_CASE(a_mode_sees_every_op_once_with_its_name) {
  auto mode = std::make_shared<RecordingMode>();
  Tensor a = ones({2, 3}), b = ones({3, 4});
  {
    dispatch::ModeGuard g(mode);
    Tensor y = relu(add(mm(a, b), 1.0));
    Tensor s = sum(y, {1});
    auto parts = split(s, 1);
    auto [v, i] = max(y, 1);
    BOOST_TEST(v.shape() == (Shape{2}));
  }
  // The handling mode is popped while the op runs: ops called inside others are not seen.
  BOOST_TEST(mode->ops ==
             (std::vector<std::string>{"mm", "add.Scalar", "relu", "sum", "split", "max.dim"}));
}

BOOST_AUTO_TEST_CASE(a_mode_sees_arguments_kinds_and_inputs) {
  auto mode = std::make_shared<CaptureMode>();
  Tensor x = ones({2, 3}), w = ones({4, 3});
  {
    dispatch::ModeGuard g(mode);
    linear(x, w);
  }
  BOOST_REQUIRE(mode->args.size() == 3u);
  BOOST_TEST(mode->args[0].tensor().is_same(x));
  BOOST_TEST(!mode->args[2].tensor().defined());  // bias=None
  BOOST_TEST(mode->inputs.size() == 3u);
  BOOST_TEST((mode->kinds[1] == dispatch::ArgKind::Tensor));
  BOOST_TEST(mode->out.tensor().shape() == (Shape{2, 4}));
  {
    dispatch::ModeGuard g(mode);
    cat({x, x}, 0);
  }
  BOOST_TEST((mode->kinds[0] == dispatch::ArgKind::TensorList));
  BOOST_TEST(mode->inputs.size() == 2u);
  BOOST_TEST(mode->args[1].to_int() == 0);
  {
    dispatch::ModeGuard g(mode);
    view(x, {3, 2});
  }
  BOOST_TEST(mode->args[1].tuple().size() == 2u);
  BOOST_TEST(mode->args[1][0].to_int() == 3);
}

BOOST_AUTO_TEST_CASE(a_mode_can_replace_a_result_and_rerun_on_other_inputs) {
  Tensor a = ones({2});
  {
    dispatch::ModeGuard g(std::make_shared<ReplaceMode>());
    Tensor y = add(mul(a, a), a);
    BOOST_TEST(y.to_vector() == (std::vector<double>{43, 43}));
  }
  // The same op (with its scalar) on other inputs; the count must match.
  {
    dispatch::ModeGuard g(std::make_shared<RerunMode>(std::vector<Tensor>{full({3}, 2.0)}));
    BOOST_TEST(mul(a, 3.0).to_vector() == (std::vector<double>{6, 6, 6}));
  }
  dispatch::ModeGuard g(std::make_shared<RerunMode>(std::vector<Tensor>{}));
  BOOST_CHECK_EXCEPTION(mul(a, 3.0), ValueError, [](const ValueError& e) {
    return std::string(e.what()) == "mul.Scalar: expected 1 tensor inputs to rerun the op, got 0";
  });
}

BOOST_AUTO_TEST_CASE(nested_modes_see_calls_innermost_first) {
  auto outer = std::make_shared<RecordingMode>();
  auto inner = std::make_shared<RecordingMode>();
  {
    dispatch::ModeGuard g1(outer);
    dispatch::ModeGuard g2(inner);
    neg(ones({1}));
    BOOST_TEST(dispatch::mode_stack().size() == 2u);
    BOOST_TEST(dispatch::current_mode() == inner.get());
  }
  BOOST_TEST(inner->ops == (std::vector<std::string>{"neg"}));
  BOOST_TEST(outer->ops == (std::vector<std::string>{"neg"}));  // the inner mode's rerun
  {
    dispatch::ModeGuard g(outer);
    dispatch::NoModesGuard none;
    neg(ones({1}));
    BOOST_TEST(!dispatch::any_mode_active());
  }
  BOOST_TEST(outer->ops.size() == 1u);
}

BOOST_AUTO_TEST_CASE(in_place_ops_are_seen_and_return_self) {
  auto mode = std::make_shared<RecordingMode>();
  Tensor a = ones({2});
  {
    dispatch::ModeGuard g(mode);
    Tensor& r = add_(a, ones({2}), 2.0);
    BOOST_TEST(&r == &a);
    mul_(a, 2.0);
  }
  BOOST_TEST(a.to_vector() == (std::vector<double>{6, 6}));
  BOOST_TEST(mode->ops == (std::vector<std::string>{"add_", "mul_"}));
}

BOOST_AUTO_TEST_CASE(a_result_of_the_wrong_kind_names_the_op) {
  dispatch::ModeGuard g(std::make_shared<BadResultMode>());
  BOOST_CHECK_EXCEPTION(mm(ones({1, 1}), ones({1, 1})), TypeError, [](const TypeError& e) {
    return std::string(e.what()) ==
           "mm: a dispatch mode returned float where the op returns a Tensor";
  });
}

BOOST_AUTO_TEST_CASE(autograd_still_records_through_a_mode) {
  Tensor a = full({2}, 3.0).requires_grad_();
  {
    dispatch::ModeGuard g(std::make_shared<RecordingMode>());
    sum(mul(a, a)).backward();
  }
  BOOST_TEST(a.grad().to_vector() == (std::vector<double>{6, 6}));
}

BOOST_AUTO_TEST_CASE(fake_mode_propagates_shapes_without_data) {
  auto fake = std::make_shared<ops::FakeTensorMode>();
  Tensor x = ones({5, 3}), w = ones({4, 3}), b = ones({4});
  Tensor y;
  {
    dispatch::ModeGuard g(fake);
    y = softmax(relu(linear(x, w, b)), -1);
    y = sum(y, {0});
  }
  BOOST_TEST(y.is_meta());
  BOOST_TEST(y.shape() == (Shape{4}));
  BOOST_TEST(fake->fake(x).is_same(fake->fake(x)));  // one fake per real tensor
  BOOST_TEST(fake->fake(x).is_meta());
}

BOOST_AUTO_TEST_CASE(fake_mode_runs_self_attention_through_its_fused_ops) {
  // MultiheadAttention's fused head split and masked softmax are core ops: under a mode they are
  // seen (and propagate meta shapes) like any other, so modes do not change the kernels it runs.
  manual_seed(0);
  nn::MultiheadAttention mha(8, 2, nn::MultiheadAttentionOptions{.batch_first = true});
  Tensor x = randn({2, 5, 8});
  Tensor mask = zeros({5, 5});
  auto fake = std::make_shared<ops::FakeTensorMode>();
  auto rec = std::make_shared<RecordingMode>();
  std::pair<Tensor, Tensor> out;
  {
    dispatch::ModeGuard g(fake);
    dispatch::ModeGuard r(rec);
    out = mha.forward(x, x, x, nn::AttentionArgs{.need_weights = false, .attn_mask = mask});
  }
  const auto& seen = rec->ops;
  BOOST_TEST(out.first.is_meta());
  BOOST_TEST(out.first.shape() == (Shape{2, 5, 8}));
  BOOST_TEST(std::count(seen.begin(), seen.end(), "split_heads") == 1);
  BOOST_TEST(std::count(seen.begin(), seen.end(), "masked_softmax") == 1);
}

BOOST_AUTO_TEST_CASE(causal_self_attention_reads_its_heads_from_the_projection) {
  // GPT's blocks (the is_causal hint, no weights): one packed_causal_attention over the in-
  // projection, no split into heads, no scaled_dot_product_attention on copies; its meta
  // output the caller's shape. Asking for the weights brings the split back.
  manual_seed(0);
  nn::MultiheadAttention mha(8, 2, nn::MultiheadAttentionOptions{.batch_first = true});
  Tensor x = randn({2, 5, 8});
  const Tensor causal = nn::Transformer::generate_square_subsequent_mask(5);
  auto fake = std::make_shared<ops::FakeTensorMode>();
  auto seen_with = [&](bool need_weights) {
    auto rec = std::make_shared<RecordingMode>();
    std::pair<Tensor, Tensor> out;
    {
      dispatch::ModeGuard g(fake);
      dispatch::ModeGuard r(rec);
      out = mha.forward(
          x, x, x,
          nn::AttentionArgs{.need_weights = need_weights, .attn_mask = causal, .is_causal = true});
    }
    BOOST_TEST(out.first.is_meta());
    BOOST_TEST((out.first.shape() == Shape{2, 5, 8}));
    return rec->ops;
  };
  auto count = [](const std::vector<std::string>& ops, const char* name) {
    return std::count(ops.begin(), ops.end(), name);
  };
  const auto hinted = seen_with(false);
  BOOST_TEST(count(hinted, "packed_causal_attention") == 1);
  BOOST_TEST(count(hinted, "split_heads") == 0);
  BOOST_TEST(count(hinted, "scaled_dot_product_attention") == 0);
  const auto weighted = seen_with(true);
  BOOST_TEST(count(weighted, "packed_causal_attention") == 0);
  BOOST_TEST(count(weighted, "split_heads") == 1);
}

BOOST_AUTO_TEST_SUITE_END()
