// trace_wrapped in every mode: eager (no grad), tracing (one node with the gradient's metadata),
// fake (an error), autograd on the operator itself (a deferred error), functionalization.
#include <boost/test/unit_test.hpp>

#include "core/autograd.h"
#include "ops/fake_mode.h"
#include "ops/graph/tracer.h"
#include "ops/trace_wrapped.h"
#include "tests/ops/ops_test_models.h"

using namespace fsdp;
using namespace fsdp::ops;

namespace {
int g_calls = 0;
Function doubling() {
  return [](const nn::Args& a) {
    ++g_calls;
    return nn::Value(mul(a.tensor(0), 2.0));
  };
}
}  // namespace

BOOST_AUTO_TEST_SUITE(trace_wrapped_op_modes)

BOOST_AUTO_TEST_CASE(eager_calls_fn_without_grad) {
  Tensor g = ones({2}).requires_grad_();
  Function fn = [](const nn::Args& a) {
    BOOST_TEST(!autograd::is_grad_enabled());
    return nn::Value(add(a.tensor(0), 1.0));
  };
  Tensor out = trace_wrapped({g}, fn).tensor();
  BOOST_TEST(out.to_vector() == (std::vector<double>{2, 2}));
  BOOST_TEST(!out.requires_grad());
  BOOST_TEST(trace_wrapped_op().name() == "trace_wrapped");
}

BOOST_AUTO_TEST_CASE(tracing_records_one_node_without_tracing_into_fn) {
  g_calls = 0;
  Tensor grad = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  auto gm = graph::trace(
      [](const nn::Args& a) { return trace_wrapped({a.positional[0]}, doubling()); }, {grad});
  BOOST_TEST(g_calls == 0);  // fn is not run while tracing
  BOOST_TEST(gm->code() ==
             "graph():\n"
             "    %arg0 : [num_users=1] = placeholder[target=arg0]\n"
             "    %trace_wrapped : [num_users=1] = call_function[target=self_invoke](args = "
             "(%arg0,), kwargs = {})\n"
             "    return trace_wrapped\n");
  Tensor out = (*gm)(grad).tensor();  // the node calls fn
  BOOST_TEST(g_calls == 1);
  BOOST_TEST(out.to_vector() == (std::vector<double>{2, 4, 6, 8, 10, 12}));
}

BOOST_AUTO_TEST_CASE(tracing_gives_the_output_the_metadata_of_the_gradient_argument) {
  Tensor grad = ones({4, 1}, DType::Float64);
  Tensor other = ones({3});
  nn::Value traced_out;
  auto gm = graph::trace(
      [&](const nn::Args& a) {
        // "module backward hooks": (None, grad)
        traced_out = trace_wrapped({nn::Value(), a.positional[0], a.positional[1]}, doubling());
        return traced_out;
      },
      {grad, other});
  BOOST_TEST(traced_out.tensor().shape() == (Shape{4, 1}));
  BOOST_TEST((traced_out.tensor().dtype() == DType::Float64));
  BOOST_TEST(gm->code().find("args = (None, %arg0, %arg1)") != std::string::npos, gm->code());
}

BOOST_AUTO_TEST_CASE(tracing_takes_a_backward_state_and_rejects_other_types) {
  Tensor grad = ones({2});
  auto state = std::make_shared<BackwardState>();
  BOOST_CHECK_EXCEPTION(
      graph::trace(
          [&](const nn::Args& a) { return trace_wrapped({a.positional[0]}, doubling(), state); },
          {grad}),
      AssertionError, [](const AssertionError& e) {
        return std::string(e.what()) ==
               "trace_wrapped: bw_state must be a BackwardState with a proxy";
      });
  auto gm = graph::trace(
      [&](const nn::Args& a) {
        state->proxy = 0;  // the placeholder stands for the state
        return trace_wrapped({a.positional[0]}, doubling(), state);
      },
      {grad});
  BOOST_TEST(gm->code().find("kwargs = {bw_state: %arg0}") != std::string::npos, gm->code());
  BOOST_CHECK_EXCEPTION(graph::trace(
                            [&](const nn::Args& a) {
                              return trace_wrapped({a.positional[0], 2.5}, doubling());
                            },
                            {grad}),
                        AssertionError, [](const AssertionError& e) {
                          return std::string(e.what()) == "unhandled type: float";
                        });
}

BOOST_AUTO_TEST_CASE(fake_mode_never_invokes_it) {
  dispatch::ModeGuard g(std::make_shared<FakeTensorMode>());
  BOOST_CHECK_EXCEPTION(trace_wrapped({ones({2})}, doubling()), RuntimeError,
                        [](const RuntimeError& e) {
                          return std::string(e.what()) == "This op should never be invoked here";
                        });
}

BOOST_AUTO_TEST_CASE(the_dense_kernel_refuses_an_active_mode) {
  dispatch::ModeGuard g(std::make_shared<ops_test::RecordingMode>());
  HopArgs a{{Object(ones({1}))}, {{"fn", Object(doubling())}}};
  BOOST_CHECK_EXCEPTION(trace_wrapped_op().call_kernel(DispatchKey::Dense, a), AssertionError,
                        [](const AssertionError& e) {
                          return std::string(e.what()) ==
                                 "Mode should never be enabled for CPU/CUDA key";
                        });
}

BOOST_AUTO_TEST_CASE(autograd_defers_its_error_until_backward_reaches_it) {
  Tensor x = full({2}, 3.0).requires_grad_();
  HopArgs a{{Object(x)}, {{"fn", Object(doubling())}}};
  // The operator itself (not trace_wrapped(), which runs it without grad).
  Tensor out = trace_wrapped_op()(a).tensor();
  BOOST_TEST(out.to_vector() == (std::vector<double>{6, 6}));
  BOOST_TEST(out.requires_grad());
  Tensor unrelated = sum(mul(x, 2.0));
  unrelated.backward();  // a backward that does not reach the output is fine
  BOOST_TEST(x.grad().to_vector() == (std::vector<double>{2, 2}));
  BOOST_CHECK_EXCEPTION(sum(out).backward(), RuntimeError, [](const RuntimeError& e) {
    return std::string(e.what()) == "Autograd not implemented for trace_wrapped";
  });
  // Without inputs that require grad, nothing is marked.
  Tensor plain =
      trace_wrapped_op()(HopArgs{{Object(ones({2}))}, {{"fn", Object(doubling())}}}).tensor();
  BOOST_TEST(!plain.requires_grad());
}

BOOST_AUTO_TEST_CASE(functionalization_redispatches_to_the_dense_kernel) {
  dispatch::ModeGuard g(std::make_shared<FunctionalizeMode>());
  BOOST_TEST(trace_wrapped({ones({2})}, doubling()).tensor().to_vector() ==
             (std::vector<double>{2, 2}));
}

BOOST_AUTO_TEST_SUITE_END()
