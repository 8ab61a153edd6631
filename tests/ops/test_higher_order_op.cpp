// The higher-order operator mechanism: kernels per dispatch key chosen from the mode stack, then
// autograd, then dense; registration errors; missing-kernel and missing-rule messages.
#include <boost/test/unit_test.hpp>

#include "core/autograd.h"
#include "ops/fake_mode.h"
#include "ops/higher_order_op.h"
#include "tests/ops/ops_test_models.h"

using namespace fsdp;
using namespace fsdp::ops;

namespace {
// A kernel that reports its key.
Kernel says(const char* what) {
  return [what](const KernelContext&, const HopArgs&) { return nn::Value(std::string(what)); };
}

class HopAwareMode : public HopMode {
 public:
  std::string name() const override { return "HopAwareMode"; }
  nn::Value handle(const dispatch::OpCall& call) override { return call.run(); }
  nn::Value handle_hop(const HigherOrderOperator& op, const HopArgs&) override {
    return nn::Value("handled " + op.name());
  }
};

// Claims to take higher-order operators but has no handle_hop to take them with.
class ClaimsOperatorsMode : public dispatch::DispatchMode {
 public:
  std::string name() const override { return "ClaimsOperatorsMode"; }
  nn::Value handle(const dispatch::OpCall& call) override { return call.run(); }
  bool supports_higher_order_operators() const override { return true; }
};
}  // namespace

BOOST_AUTO_TEST_SUITE(higher_order_operators)

BOOST_AUTO_TEST_CASE(keys_are_chosen_from_modes_then_autograd_then_dense) {
  HigherOrderOperator op("test_keys");
  op.register_kernel(DispatchKey::Dense, says("dense"));
  op.register_kernel(DispatchKey::Autograd, says("autograd"));
  op.register_kernel(DispatchKey::Fake, [](const KernelContext& ctx, const HopArgs&) {
    // Mode kernels run with their mode popped, and receive it.
    BOOST_TEST(dispatch::current_mode() == nullptr);
    return nn::Value(ctx.mode->name());
  });
  Tensor plain = ones({1});
  Tensor leaf = ones({1}).requires_grad_();
  BOOST_TEST(op(HopArgs{{Object(plain)}, {}}).str() == "dense");
  BOOST_TEST(op(HopArgs{{Object(leaf)}, {}}).str() == "autograd");
  {
    autograd::NoGradGuard no_grad;
    BOOST_TEST(op(HopArgs{{Object(leaf)}, {}}).str() == "dense");
  }
  {
    ExcludeKeyGuard below(DispatchKey::Autograd);
    BOOST_TEST(op(HopArgs{{Object(leaf)}, {}}).str() == "dense");
  }
  BOOST_TEST(op(HopArgs{{}, {{"x", Object(leaf)}}}).str() == "autograd");  // kwargs count
  dispatch::ModeGuard g(std::make_shared<FakeTensorMode>());
  BOOST_TEST(op(HopArgs{{Object(leaf)}, {}}).str() == "FakeTensorMode");
  BOOST_TEST(find_operator("test_keys") == &op);
}

BOOST_AUTO_TEST_CASE(a_fallthrough_key_passes_to_the_next) {
  HigherOrderOperator op("test_fallthrough");
  op.register_kernel(DispatchKey::Dense, says("dense"));
  op.register_fallthrough(DispatchKey::Autograd);
  BOOST_TEST(op(HopArgs{{Object(ones({1}).requires_grad_())}, {}}).str() == "dense");
  BOOST_TEST(
      (op.dispatch_key(HopArgs{{Object(ones({1}).requires_grad_())}, {}}) == DispatchKey::Dense));
}

BOOST_AUTO_TEST_CASE(registering_a_key_twice_is_an_error) {
  HigherOrderOperator op("test_twice");
  op.register_kernel(DispatchKey::Dense, says("dense"));
  BOOST_CHECK_EXCEPTION(op.register_kernel(DispatchKey::Dense, says("again")), RuntimeError,
                        [](const RuntimeError& e) {
                          return std::string(e.what()) ==
                                 "Trying to override a python impl for DispatchKey.Dense on "
                                 "operator test_twice";
                        });
  op.register_fallthrough(DispatchKey::Autograd);
  BOOST_CHECK_THROW(op.register_kernel(DispatchKey::Autograd, says("x")), RuntimeError);
  BOOST_CHECK_EXCEPTION(HigherOrderOperator("test_twice"), RuntimeError, [](const RuntimeError& e) {
    return std::string(e.what()) ==
           "a higher-order operator named test_twice is already registered";
  });
}

BOOST_AUTO_TEST_CASE(a_key_without_kernel_names_the_operator_and_the_key) {
  HigherOrderOperator op("test_missing");
  BOOST_CHECK_EXCEPTION(op(HopArgs{}), NotImplementedError, [](const NotImplementedError& e) {
    return std::string(e.what()) ==
           "could not find kernel for HigherOrderOperator test_missing at dispatch key "
           "DispatchKey.Dense (resolved from DispatchKey.Dense)";
  });
  op.register_fallthrough(DispatchKey::Autograd);
  BOOST_CHECK_EXCEPTION(op(HopArgs{{Object(ones({1}).requires_grad_())}, {}}), NotImplementedError,
                        [](const NotImplementedError& e) {
                          return std::string(e.what()).find(
                                     "at dispatch key DispatchKey.Dense (resolved from "
                                     "DispatchKey.Dense)") != std::string::npos;
                        });
  HigherOrderOperator op2("test_missing_autograd");
  op2.register_kernel(DispatchKey::Dense, says("dense"));
  BOOST_CHECK_EXCEPTION(op2(HopArgs{{Object(ones({1}).requires_grad_())}, {}}), NotImplementedError,
                        [](const NotImplementedError& e) {
                          return std::string(e.what()) ==
                                 "could not find kernel for HigherOrderOperator "
                                 "test_missing_autograd at dispatch key DispatchKey.Autograd "
                                 "(resolved from DispatchKey.Autograd)";
                        });
}

BOOST_AUTO_TEST_CASE(a_mode_without_a_rule_is_an_error_unless_it_takes_operators) {
  HigherOrderOperator op("test_modes");
  op.register_kernel(DispatchKey::Dense, says("dense"));
  {
    dispatch::ModeGuard g(std::make_shared<ops_test::RecordingMode>());
    BOOST_CHECK_EXCEPTION(op(HopArgs{}), NotImplementedError, [](const NotImplementedError& e) {
      return std::string(e.what()).rfind(
                 "There was no rule registered for HigherOrderOperator test_modes and mode "
                 "RecordingMode.Hint: set RecordingMode's supports_higher_order_operators to True.",
                 0) == 0;
    });
  }
  {
    dispatch::ModeGuard g(std::make_shared<FakeTensorMode>());  // a key, but no kernel for it
    BOOST_CHECK_THROW(op(HopArgs{}), NotImplementedError);
  }
  {
    dispatch::ModeGuard g(std::make_shared<ClaimsOperatorsMode>());
    BOOST_CHECK_EXCEPTION(op(HopArgs{}), TypeError, [](const TypeError& e) {
      return std::string(e.what()) ==
             "ClaimsOperatorsMode supports higher-order operators but is not a HopMode";
    });
  }
  dispatch::ModeGuard g(std::make_shared<HopAwareMode>());
  BOOST_TEST(op(HopArgs{}).str() == "handled test_modes");
}

BOOST_AUTO_TEST_CASE(functionalize_rules_get_the_functionalization_api) {
  HigherOrderOperator op("test_functionalize");
  op.register_kernel(DispatchKey::Dense, [](const KernelContext&, const HopArgs& a) {
    return nn::Value(mul(a.args.at(0).value().tensor(), 2.0));
  });
  op.register_functionalize_impl([&op](FunctionalizeContext& ctx, const HopArgs& a) {
    HopArgs unwrapped = ctx.unwrap_tensors(a);
    auto next = ctx.redispatch_to_next();
    (void)next;
    return ctx.wrap_tensors(op(unwrapped));
  });
  dispatch::ModeGuard g(std::make_shared<FunctionalizeMode>());
  BOOST_TEST(op(HopArgs{{Object(ones({2}))}, {}}).tensor().to_vector() ==
             (std::vector<double>{2, 2}));
  BOOST_TEST(key_name(DispatchKey::Functionalize) == "DispatchKey.Functionalize");
}

BOOST_AUTO_TEST_SUITE_END()
