#include <boost/test/unit_test.hpp>
#include <thread>

#include "core/autograd.h"
#include "core/multi_grad_hook.h"
#include "core/ops.h"
#include "tests/support/error_message.h"

using namespace fsdp;
using fsdp::testing::message_has;
namespace ag = fsdp::autograd;

BOOST_AUTO_TEST_SUITE(autograd_engine)

BOOST_AUTO_TEST_CASE(grad_mode_guard_is_exception_safe) {
  BOOST_TEST(ag::is_grad_enabled());
  try {
    ag::NoGradGuard g;
    BOOST_TEST(!ag::is_grad_enabled());
    throw std::runtime_error("boom");
  } catch (const std::runtime_error&) {
  }
  BOOST_TEST(ag::is_grad_enabled());
  {
    ag::NoGradGuard g;
    ag::GradModeGuard enable(true);
    BOOST_TEST(ag::is_grad_enabled());
  }
  BOOST_TEST(ag::is_grad_enabled());
}

BOOST_AUTO_TEST_CASE(no_grad_records_nothing) {
  Tensor x = ones({3}).requires_grad_();
  ag::NoGradGuard g;
  Tensor y = mul(x, x);
  BOOST_TEST(!y.requires_grad());
  BOOST_TEST(!y.grad_fn());
}

BOOST_AUTO_TEST_CASE(leaf_gradients_accumulate) {
  Tensor x = from_vector({1, 2, 3}, {3}, DType::Float64).requires_grad_();
  Tensor y = sum(mul(x, x));
  y.backward(Tensor(), /*retain_graph=*/true);
  BOOST_TEST(x.grad().to_vector() == (std::vector<double>{2, 4, 6}));
  y.backward();
  BOOST_TEST(x.grad().to_vector() == (std::vector<double>{4, 8, 12}));
}

BOOST_AUTO_TEST_CASE(second_backward_through_freed_graph_is_an_error) {
  Tensor x = from_vector({1, 2}, {2}).requires_grad_();
  Tensor y = sum(mul(x, x));
  y.backward();
  BOOST_CHECK_EXCEPTION(y.backward(), RuntimeError, [](const RuntimeError& e) {
    return message_has(e, "Trying to backward through the graph a second time");
  });
}

BOOST_AUTO_TEST_CASE(non_scalar_needs_a_gradient) {
  Tensor x = from_vector({1, 2}, {2}).requires_grad_();
  Tensor y = mul(x, x);
  BOOST_CHECK_EXCEPTION(y.backward(), RuntimeError, [](const RuntimeError& e) {
    return message_has(e, "grad can be implicitly created only for scalar outputs");
  });
  y.backward(from_vector({1, 10}, {2}));
  BOOST_TEST(x.grad().to_vector() == (std::vector<double>{2, 40}));
  Tensor z = zeros({2});
  BOOST_CHECK_EXCEPTION(z.backward(), RuntimeError, [](const RuntimeError& e) {
    return message_has(e, "does not require grad");
  });
}

BOOST_AUTO_TEST_CASE(gradient_shape_mismatch_is_reported) {
  Tensor x = from_vector({1, 2}, {2}).requires_grad_();
  Tensor y = mul(x, x);
  BOOST_CHECK_EXCEPTION(y.backward(ones({3})), RuntimeError, [](const RuntimeError& e) {
    return message_has(e, "Mismatch in shape") && message_has(e, "[3]") && message_has(e, "[2]");
  });
}

BOOST_AUTO_TEST_CASE(tensor_hooks_see_and_replace_gradients) {
  Tensor x = from_vector({1, 2}, {2}).requires_grad_();
  Tensor h = mul(x, 3.0);
  std::vector<double> seen;
  h.register_hook([&](const Tensor& g) {
    seen = g.to_vector();
    return mul(g, 10.0);
  });
  int leaf_calls = 0;
  auto handle = x.register_hook([&](const Tensor&) {
    ++leaf_calls;
    return Tensor();
  });
  sum(h).backward();
  BOOST_TEST(seen == (std::vector<double>{1, 1}));
  BOOST_TEST(x.grad().to_vector() == (std::vector<double>{30, 30}));
  BOOST_TEST(leaf_calls == 1);
  handle.remove();
  x.set_grad(Tensor());
  sum(mul(x, 3.0)).backward();
  BOOST_TEST(leaf_calls == 1);
}

BOOST_AUTO_TEST_CASE(post_accumulate_grad_hook_runs_after_accumulation) {
  Tensor w = from_vector({1, 2}, {2}).requires_grad_();
  std::vector<double> at_hook;
  w.register_post_accumulate_grad_hook([&](const Tensor& p) { at_hook = p.grad().to_vector(); });
  sum(mul(w, w)).backward();
  BOOST_TEST(at_hook == (std::vector<double>{2, 4}));
  Tensor nonleaf = mul(w, 2.0);
  BOOST_CHECK_THROW(nonleaf.register_post_accumulate_grad_hook([](const Tensor&) {}), RuntimeError);
}

BOOST_AUTO_TEST_CASE(retain_grad_on_intermediate) {
  Tensor x = from_vector({1, 2}, {2}).requires_grad_();
  Tensor h = mul(x, x);
  h.retain_grad();
  sum(mul(h, 3.0)).backward();
  BOOST_TEST(h.grad().to_vector() == (std::vector<double>{3, 3}));
}

BOOST_AUTO_TEST_CASE(saved_tensor_hooks_pack_and_unpack) {
  Tensor x = from_vector({1, 2, 3}, {3}, DType::Float64).requires_grad_();
  int packs = 0, unpacks = 0;
  Tensor y;
  {
    ag::SavedTensorHooksGuard hooks({[&](const Tensor& t) -> std::any {
                                       ++packs;
                                       return t.clone();
                                     },
                                     [&](const std::any& a) -> Tensor {
                                       ++unpacks;
                                       return std::any_cast<Tensor>(a);
                                     }});
    y = sum(mul(x, x));
  }
  BOOST_TEST(packs >= 1);
  BOOST_TEST(unpacks == 0);
  y.backward();
  BOOST_TEST(unpacks == packs);
  BOOST_TEST(x.grad().to_vector() == (std::vector<double>{2, 4, 6}));
}

BOOST_AUTO_TEST_CASE(inplace_modification_of_saved_tensor_is_detected) {
  Tensor x = from_vector({1, 2}, {2}).requires_grad_();
  Tensor a = mul(x, 1.0);
  Tensor y = sum(mul(a, a));
  {
    ag::NoGradGuard g;
    a.fill_(5);
  }
  BOOST_CHECK_EXCEPTION(y.backward(), RuntimeError, [](const RuntimeError& e) {
    return message_has(e, "modified by an inplace operation");
  });
}

BOOST_AUTO_TEST_CASE(queue_callback_runs_at_end_of_backward) {
  Tensor x = from_vector({1, 2}, {2}).requires_grad_();
  std::vector<std::string> order;
  x.register_post_accumulate_grad_hook([&](const Tensor&) {
    order.push_back("accumulate");
    ag::queue_callback([&] { order.push_back("final"); });
  });
  BOOST_TEST(!ag::in_backward());
  BOOST_CHECK_THROW(ag::queue_callback([] {}), RuntimeError);
  sum(mul(x, x)).backward();
  BOOST_TEST(order == (std::vector<std::string>{"accumulate", "final"}));
}

BOOST_AUTO_TEST_CASE(autograd_grad_does_not_touch_dot_grad) {
  Tensor x = from_vector({1, 2}, {2}, DType::Float64).requires_grad_();
  Tensor h = mul(x, x);
  Tensor y = sum(mul(h, 2.0));
  auto g = ag::grad({y}, {x, h});
  BOOST_TEST(g[0].to_vector() == (std::vector<double>{4, 8}));
  BOOST_TEST(g[1].to_vector() == (std::vector<double>{2, 2}));
  BOOST_TEST(!x.grad().defined());
}

BOOST_AUTO_TEST_CASE(deep_graph_backward_and_free) {
  Tensor x = scalar_tensor(1.0, DType::Float64).requires_grad_();
  Tensor y = x;
  for (int i = 0; i < 100000; ++i) y = add(y, x);
  y.backward();
  BOOST_TEST(x.grad().item() == 100001.0);
  y = Tensor();  // frees a 100 000-node chain without recursion
}

BOOST_AUTO_TEST_CASE(grad_mode_is_per_thread) {
  ag::NoGradGuard g;
  bool other_thread_enabled = false;
  std::thread t([&] { other_thread_enabled = ag::is_grad_enabled(); });
  t.join();
  BOOST_TEST(other_thread_enabled);
  BOOST_TEST(!ag::is_grad_enabled());
}

BOOST_AUTO_TEST_CASE(leaf_grads_never_alias_each_other) {
  Tensor a = from_vector({1, 2}, {2}).requires_grad_();
  Tensor b = from_vector({3, 4}, {2}).requires_grad_();
  sum(add(a, b)).backward();
  Tensor ga = a.grad();
  mul_(ga, 5.0);
  BOOST_TEST(a.grad().to_vector() == (std::vector<double>{5, 5}));
  BOOST_TEST(b.grad().to_vector() == (std::vector<double>{1, 1}));
  BOOST_TEST(a.grad().storage() != b.grad().storage());
}

BOOST_AUTO_TEST_CASE(diamond_graph_sums_both_paths) {
  Tensor x = from_vector({3}, {1}, DType::Float64).requires_grad_();
  Tensor a = mul(x, 2.0);
  Tensor b = mul(x, x);
  Tensor y = sum(add(mul(a, b), a));  // 2x^3 + 2x -> 6x^2 + 2
  y.backward();
  BOOST_TEST(x.grad().item() == 56.0);
}

BOOST_AUTO_TEST_CASE(will_execute_names_the_nodes_of_the_running_pass) {
  Tensor a = from_vector({1, 2}, {2}).requires_grad_();
  Tensor unused = from_vector({5}, {1}).requires_grad_();
  Tensor other = mul(unused, 2.0);  // creates unused's accumulator, outside this pass's graph
  Tensor h = mul(a, a);
  std::vector<bool> seen;
  std::uint64_t task = 0;
  h.register_hook([&](const Tensor&) {
    task = ag::current_graph_task_id();
    seen = {ag::will_execute(h.grad_fn().get()), ag::will_execute(ag::gradient_edge(a).fn.get()),
            ag::will_execute(other.grad_fn().get()),
            ag::will_execute(ag::gradient_edge(unused).fn.get())};
    return Tensor();
  });
  BOOST_TEST(!ag::will_execute(h.grad_fn().get()));
  BOOST_TEST(ag::current_graph_task_id() == 0u);
  sum(h).backward(Tensor(), /*retain_graph=*/true);
  BOOST_TEST(seen == (std::vector<bool>{true, true, false, false}));
  const std::uint64_t first = task;
  BOOST_TEST(first != 0u);
  // autograd::grad captures leaf gradients instead of running their accumulators.
  ag::grad({sum(h)}, {a});
  BOOST_TEST(seen == (std::vector<bool>{true, false, false, false}));
  BOOST_TEST(task != first);
}

BOOST_AUTO_TEST_CASE(multi_grad_hook_fires_once_after_the_grads_this_pass_computes) {
  Tensor a = from_vector({1, 2}, {2}, DType::Float64).requires_grad_();
  Tensor b = from_vector({3}, {1}, DType::Float64).requires_grad_();
  Tensor c = from_vector({4}, {1}, DType::Float64).requires_grad_();  // not reached
  Tensor frozen = from_vector({7}, {1}, DType::Float64);              // skipped
  std::vector<std::string> order;
  a.register_hook([&](const Tensor&) {
    order.push_back("a");
    return Tensor();
  });
  b.register_hook([&](const Tensor&) {
    order.push_back("b");
    return Tensor();
  });
  int calls = 0;
  std::vector<Tensor> got;
  auto handle = ag::register_multi_grad_hook({a, b, c, frozen}, [&](const std::vector<Tensor>& g) {
    ++calls;
    got = g;
    order.push_back("multi");
  });
  auto loss = [&] { return add(sum(mul(a, a)), sum(mul(b, 3.0))); };
  loss().backward();
  BOOST_TEST(calls == 1);
  BOOST_REQUIRE(got.size() == 4u);
  BOOST_TEST(got[0].to_vector() == (std::vector<double>{2, 4}));
  BOOST_TEST(got[1].to_vector() == (std::vector<double>{3}));
  BOOST_TEST(!got[2].defined());
  BOOST_TEST(!got[3].defined());
  BOOST_TEST(order.back() == "multi");
  BOOST_TEST(order.size() == 3u);

  loss().backward();
  BOOST_TEST(calls == 2);
  BOOST_TEST(got[1].to_vector() == (std::vector<double>{3}));

  // A pass that reaches only c fires with c's gradient alone.
  sum(mul(c, 5.0)).backward();
  BOOST_TEST(calls == 3);
  BOOST_TEST(!got[0].defined());
  BOOST_TEST(got[2].to_vector() == (std::vector<double>{5}));

  handle.remove();
  loss().backward();
  BOOST_TEST(calls == 3);
}

BOOST_AUTO_TEST_CASE(multi_grad_hook_on_outputs_runs_before_the_leaves_accumulate) {
  Tensor w = from_vector({1, 2}, {2}).requires_grad_();
  Tensor out1 = mul(w, 2.0);
  Tensor out2 = mul(w, w);
  std::vector<std::string> order;
  ag::register_multi_grad_hook({out1, out2}, [&](const std::vector<Tensor>& g) {
    order.push_back(fmt::format("pre-backward {} {}", g[0].defined(), g[1].defined()));
  });
  w.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back("accumulated"); });
  sum(add(out1, out2)).backward();
  BOOST_TEST(order == (std::vector<std::string>{"pre-backward true true", "accumulated"}));
  BOOST_TEST(w.grad().to_vector() == (std::vector<double>{4, 6}));
}

BOOST_AUTO_TEST_CASE(multi_grad_hook_fires_at_the_end_when_a_reached_grad_stays_undefined) {
  Tensor x = from_vector({1}, {1}).requires_grad_();
  Tensor y = from_vector({2}, {1}).requires_grad_();
  Tensor out = empty({1});
  out.copy_(y);
  // An op whose backward leaves x's gradient undefined: x's accumulator runs without a gradient.
  ag::record("IgnoresX", {x, y}, {out}, {},
             [](const ag::variable_list&, const ag::variable_list& g) {
               return ag::variable_list{Tensor(), g[0]};
             });
  int calls = 0;
  std::vector<Tensor> got;
  ag::register_multi_grad_hook({x, y}, [&](const std::vector<Tensor>& g) {
    ++calls;
    got = g;
  });
  sum(out).backward();
  BOOST_TEST(calls == 1);
  BOOST_TEST(!got[0].defined());
  BOOST_TEST(got[1].to_vector() == (std::vector<double>{1}));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(fsdp_support)

BOOST_AUTO_TEST_CASE(accumulate_grad_adds_in_place_into_an_owned_gradient) {
  Tensor w = from_vector({1, 2}, {2}).requires_grad_();
  sum(mul(w, 2.0)).backward();
  Tensor first = w.grad();
  const void* storage = first.data_ptr();
  sum(mul(w, 3.0)).backward();
  // Same tensor object and storage: a gradient view into a flat buffer stays a view.
  BOOST_TEST(w.grad().is_same(first));
  BOOST_TEST(w.grad().data_ptr() == storage);
  BOOST_TEST(w.grad().to_vector() == (std::vector<double>{5, 5}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_freed_storage_is_an_error_naming_the_op) {
  Tensor t = ones({4});
  Tensor v = t.narrow(0, 1, 2);
  t.storage()->resize(0);
  try {
    (void)add(v, v);
    BOOST_FAIL("expected a RuntimeError");
  } catch (const RuntimeError& e) {
    const std::string msg = e.what();
    BOOST_TEST(
        msg.rfind("add: the storage of a tensor of shape [2] (float32) has been freed", 0) == 0u,
        msg);
  }
  BOOST_CHECK_THROW((void)v.to_vector(), RuntimeError);
  t.storage()->resize(16);  // refilled: usable again
  BOOST_TEST(add(v, v).numel() == 2);
}

BOOST_AUTO_TEST_CASE(copy_unversioned_keeps_saved_tensors_valid) {
  Tensor w = from_vector({1, 2}, {2});
  Tensor x = from_vector({3, 4}, {2}).requires_grad_();
  Tensor y = sum(mul(x, w));  // saves w
  const auto version = w.storage()->version();
  copy_unversioned(w, from_vector({1, 2}, {2}));
  BOOST_TEST(w.storage()->version() == version);
  y.backward();  // no "modified by an inplace operation" error
  BOOST_TEST(x.grad().to_vector() == (std::vector<double>{1, 2}), boost::test_tools::per_element());
  // copy_ bumps the version: backward through a modified saved tensor fails.
  Tensor y2 = sum(mul(x, w));
  w.copy_(from_vector({5, 6}, {2}));
  BOOST_CHECK_THROW(y2.backward(), RuntimeError);
}

BOOST_AUTO_TEST_SUITE_END()
