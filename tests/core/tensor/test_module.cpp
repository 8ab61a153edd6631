#include <boost/test/unit_test.hpp>

#include "core/autograd.h"
#include "core/module.h"
#include "core/ops.h"
#include "tests/support/error_message.h"

using namespace fsdp;
using namespace fsdp::nn;
using fsdp::testing::message_has;

namespace {

// y = x * w, one parameter.
class Scale : public Module {
 public:
  FSDP_MODULE_CLASS(Scale, Module)
  explicit Scale(double w) : Module(static_class()) {
    register_parameter("w", from_vector({w}, {1}));
  }
  Value forward(const Args& a) override { return mul(a.tensor(0), param("w")); }
};

class Chain : public Module {
 public:
  FSDP_MODULE_CLASS(Chain, Module)
  Chain() : Module(static_class()) {}
  Value forward(const Args& a) override {
    Value v = a.positional.at(0);
    for (const auto& [name, c] : child_slots()) v = (*c)(Args{v});
    return v;
  }
};

// A diamond hierarchy to check the C3 method resolution order.
const ModuleClass& base_a() {
  return ModuleClass::get("A", {&Module::static_class()});
}
const ModuleClass& base_b() {
  return ModuleClass::get("B", {&base_a()});
}
const ModuleClass& base_c() {
  return ModuleClass::get("C", {&base_a()});
}

}  // namespace

BOOST_AUTO_TEST_SUITE(module_tree)

BOOST_AUTO_TEST_CASE(named_modules_preorder_with_shared_modules) {
  auto root = std::make_shared<Chain>();
  auto s1 = std::make_shared<Chain>();
  auto shared = std::make_shared<Scale>(2.0);
  s1->register_module("x", shared);
  s1->register_module("y", std::make_shared<Scale>(3.0));
  root->register_module("s1", s1);
  root->register_module("s2", shared);
  root->register_module("empty", nullptr);
  std::vector<std::string> names;
  for (auto& [n, m] : root->named_modules()) names.push_back(n);
  BOOST_TEST(names == (std::vector<std::string>{"", "s1", "s1.x", "s1.y"}));
  names.clear();
  for (auto& [n, m] : root->named_modules("model", false)) names.push_back(n);
  BOOST_TEST(names == (std::vector<std::string>{"model", "model.s1", "model.s1.x", "model.s1.y",
                                                "model.s2"}));
  BOOST_TEST(root->named_children().size() == 2u);
  BOOST_TEST(root->child_slots().size() == 3u);
}

BOOST_AUTO_TEST_CASE(visit_named_modules_matches_named_modules) {
  auto root = std::make_shared<Chain>();
  auto a = root->register_module("a", std::make_shared<Chain>());
  auto shared = std::make_shared<Scale>(1.0);
  a->register_module("x", shared);
  a->register_module("y", std::make_shared<Chain>());
  std::dynamic_pointer_cast<Chain>(a->child("y"))
      ->register_module("z", std::make_shared<Scale>(2.0));
  root->register_module("b", shared);
  root->register_module("c", std::make_shared<Scale>(3.0));
  for (bool dedup : {true, false}) {
    std::vector<std::string> visited;
    root->visit_named_modules([&](const std::string& n, const ModulePtr&) { visited.push_back(n); },
                              "m", dedup);
    std::vector<std::string> expected;
    for (auto& [n, m] : root->named_modules("m", dedup)) expected.push_back(n);
    BOOST_TEST(visited == expected);
  }
}

BOOST_AUTO_TEST_CASE(named_children_dedups_one_object_under_two_names) {
  auto root = std::make_shared<Chain>();
  auto m = std::make_shared<Scale>(1.0);
  root->register_module("a", m);
  root->register_module("b", m);
  auto kids = root->named_children();
  BOOST_TEST(kids.size() == 1u);
  BOOST_TEST(kids[0].first == "a");
}

BOOST_AUTO_TEST_CASE(named_parameters_tied_once_first_name) {
  auto root = std::make_shared<Chain>();
  auto a = std::make_shared<Scale>(1.0);
  auto b = std::make_shared<Scale>(2.0);
  b->set_parameter("w", a->param("w"));  // tie
  root->register_module("a", a);
  root->register_module("b", b);
  auto named = root->named_parameters();
  BOOST_TEST(named.size() == 1u);
  BOOST_TEST(named[0].first == "a.w");
  BOOST_TEST(root->named_parameters("", true, false).size() == 2u);
  BOOST_TEST(root->named_parameters("", false).empty());
  auto sd = root->state_dict();
  BOOST_TEST(sd.size() == 2u);
  BOOST_TEST(sd[1].first == "b.w");
}

BOOST_AUTO_TEST_CASE(name_collisions_and_unknown_names_are_errors) {
  Scale s(1.0);
  BOOST_CHECK_EXCEPTION(s.register_buffer("w", zeros({1})), KeyError, [](const KeyError& e) {
    return message_has(e, "'w' already exists as a parameter");
  });
  BOOST_CHECK_EXCEPTION(s.register_module("a.b", nullptr), KeyError,
                        [](const KeyError& e) { return message_has(e, "can't contain \".\""); });
  BOOST_CHECK_EXCEPTION(s.child("nope"), KeyError, [](const KeyError& e) {
    return message_has(e, "Scale has no child module 'nope'");
  });
  BOOST_CHECK_EXCEPTION(s.param("v"), KeyError,
                        [](const KeyError& e) { return message_has(e, "(parameters: w)"); });
}

BOOST_AUTO_TEST_CASE(replaced_child_is_called_through_its_slot) {
  auto root = std::make_shared<Chain>();
  auto original = std::make_shared<Scale>(2.0);
  root->register_module("0", original);
  BOOST_TEST((*root)(from_vector({1}, {1})).tensor().item() == 2.0);
  // A wrapper that doubles whatever the original returns.
  class Wrapper : public Module {
   public:
    explicit Wrapper(ModulePtr inner)
        : Module(ModuleClass::get("Wrapper", {&Module::static_class()})) {
      register_module("inner", std::move(inner));
    }
    Value forward(const Args& a) override { return mul(call_child("inner", a).tensor(), 2.0); }
  };
  root->replace_child("0", std::make_shared<Wrapper>(original));
  BOOST_TEST((*root)(from_vector({1}, {1})).tensor().item() == 4.0);
  BOOST_TEST(root->child_as<Scale>("0") == nullptr);
  BOOST_TEST(root->child_as<Wrapper>("0") != nullptr);
  BOOST_CHECK_THROW(root->replace_child("1", original), KeyError);
}

BOOST_AUTO_TEST_CASE(isinstance_follows_the_c3_mro) {
  const ModuleClass& d = ModuleClass::get("D", {&base_b(), &base_c()});
  BOOST_TEST(d.mro() == (std::vector<std::string>{"D", "B", "C", "A", "Module"}));
  ClassSet set{"A"};
  BOOST_TEST(set.matches(d));
  BOOST_TEST(!ClassSet{"Linear"}.matches(d));
  const ModuleClass& bn =
      ModuleClass::from_names("BatchNorm1d", {"_BatchNorm", "_NormBase", "Module"});
  BOOST_TEST(ClassSet{"_BatchNorm"}.matches(bn));
  BOOST_TEST(&bn == &ModuleClass::from_names("BatchNorm1d", {"_BatchNorm", "_NormBase", "Module"}));
  Scale s(1.0);
  BOOST_TEST(s.isinstance("Module"));
  BOOST_TEST(s.isinstance(ClassSet::of<Scale>()));
}

BOOST_AUTO_TEST_CASE(forward_hooks_order_and_replacement) {
  Scale s(2.0);
  std::vector<std::string> order;
  s.register_forward_pre_hook([&](Module&, const Args&) -> std::optional<Args> {
    order.push_back("pre");
    return std::nullopt;
  });
  s.register_forward_pre_hook(
      [&](Module&, const Args& a) -> std::optional<Args> {
        order.push_back("pre-first");
        return Args{Value(mul(a.tensor(0), 10.0))};
      },
      /*prepend=*/true);
  auto h =
      s.register_forward_hook([&](Module&, const Args&, const Value& out) -> std::optional<Value> {
        order.push_back("post");
        return Value(add(out.tensor(), 1.0));
      });
  Tensor y = s(from_vector({1}, {1})).tensor();
  BOOST_TEST(order == (std::vector<std::string>{"pre-first", "pre", "post"}));
  BOOST_TEST(y.item() == 21.0);
  h.remove();
  BOOST_TEST(s(from_vector({1}, {1})).tensor().item() == 20.0);
}

BOOST_AUTO_TEST_CASE(module_without_forward_reports_like_pytorch) {
  Chain c;
  Module plain;
  BOOST_CHECK_EXCEPTION(plain(zeros({1})), NotImplementedError, [](const NotImplementedError& e) {
    return message_has(e, "Module [Module] is missing the required \"forward\" function");
  });
}

BOOST_AUTO_TEST_CASE(train_eval_recursive_and_zero_grad) {
  auto root = std::make_shared<Chain>();
  auto s = root->register_module("s", std::make_shared<Scale>(3.0));
  root->eval();
  BOOST_TEST(!s->is_training());
  root->train();
  BOOST_TEST(s->is_training());
  sum((*root)(from_vector({2}, {1})).tensor()).backward();
  BOOST_TEST(s->param("w").grad().item() == 2.0);
  root->zero_grad();
  BOOST_TEST(!s->param("w").grad().defined());
}

BOOST_AUTO_TEST_CASE(state_dict_round_trip_and_strict_errors) {
  auto a = std::make_shared<Chain>();
  a->register_module("s", std::make_shared<Scale>(3.0));
  auto b = std::make_shared<Chain>();
  b->register_module("s", std::make_shared<Scale>(5.0));
  b->load_state_dict(a->state_dict());
  BOOST_TEST(b->child("s")->param("w").item() == 3.0);
  BOOST_CHECK_EXCEPTION(b->load_state_dict({{"s.v", zeros({1})}}), RuntimeError,
                        [](const RuntimeError& e) {
                          return message_has(e, "Missing key(s) in state_dict: \"s.w\"") &&
                                 message_has(e, "Unexpected key(s) in state_dict: \"s.v\"");
                        });
  BOOST_CHECK_EXCEPTION(
      b->load_state_dict({{"s.w", zeros({2})}}), RuntimeError,
      [](const RuntimeError& e) { return message_has(e, "size mismatch for s.w"); });
}

BOOST_AUTO_TEST_CASE(repr_like_pytorch) {
  auto root = std::make_shared<Chain>();
  auto inner = root->register_module("inner", std::make_shared<Chain>());
  inner->register_module("0", std::make_shared<Scale>(1.0));
  root->register_module("s", std::make_shared<Scale>(1.0));
  BOOST_TEST(root->repr() == "Chain(\n  (inner): Chain(\n    (0): Scale()\n  )\n  (s): Scale()\n)");
}

BOOST_AUTO_TEST_CASE(chain_of_100000_modules) {
  auto root = std::make_shared<Chain>();
  Module* cur = root.get();
  for (int i = 0; i < 100000; ++i) {
    auto next = std::make_shared<Chain>();
    next->register_parameter("p", zeros({1}));
    cur->register_module("0", next);
    cur = next.get();
  }
  std::size_t count = 0, last_len = 0;
  root->visit_named_modules([&](const std::string& name, const ModulePtr&) {
    ++count;
    last_len = name.size();
  });
  BOOST_TEST(count == 100001u);
  BOOST_TEST(last_len == 2u * 100000 - 1);
  BOOST_TEST(root->modules().size() == 100001u);
  BOOST_TEST(root->parameters().size() == 100000u);
  BOOST_TEST(root->get_submodule("0.0.0")->child_slots().size() == 1u);
  root.reset();  // iterative teardown
}

BOOST_AUTO_TEST_CASE(wide_module_registers_and_looks_up_by_name) {
  auto root = std::make_shared<Chain>();
  const int n = 200000;  // quadratic registration would take minutes
  for (int i = 0; i < n; ++i) root->register_module(std::to_string(i), std::make_shared<Chain>());
  BOOST_TEST(root->has_child("123456"));
  BOOST_TEST(!root->has_child("200000"));
  auto replacement = std::make_shared<Scale>(1.0);
  root->replace_child("199999", replacement);
  BOOST_TEST(root->child("199999") == ModulePtr(replacement));
  root->replace_child_at(0, replacement);
  BOOST_TEST(root->child("0") == ModulePtr(replacement));
  BOOST_CHECK_THROW(root->register_module("77", nullptr), KeyError);
  BOOST_CHECK_THROW(root->register_parameter("77", zeros({1})), KeyError);
  BOOST_CHECK_THROW(root->replace_child_at(static_cast<std::size_t>(n), nullptr), IndexError);
  root->register_parameter("p", zeros({1}));
  BOOST_TEST(root->param("p").numel() == 1);
}

BOOST_AUTO_TEST_CASE(module_to_dtype_keeps_parameter_identity) {
  Scale s(1.5);
  Tensor w = s.param("w");
  s.to(DType::Float64);
  BOOST_TEST(w.dtype() == DType::Float64);
  BOOST_TEST(s.param("w").is_same(w));
  BOOST_TEST(w.item() == 1.5);
}

BOOST_AUTO_TEST_CASE(values_and_args) {
  Value t(std::vector<Value>{Value(zeros({1})), Value()});
  BOOST_TEST(t.is_tuple());
  BOOST_TEST(t[1].is_none());
  BOOST_CHECK_EXCEPTION(t.tensor(), TypeError, [](const TypeError& e) {
    return message_has(e, "expected a Tensor but got tuple");
  });
  Args a({Value(1.0)}, {{"need_weights", Value(false)}});
  BOOST_TEST(a.get(1, "need_weights").to_bool() == false);
  BOOST_TEST(a.get(2, "missing").is_none());
}

BOOST_AUTO_TEST_CASE(tensor_attributes_are_not_parameters_but_param_finds_them) {
  Scale s(2.0);
  s.register_buffer("b", zeros({1}));
  Tensor w = s.remove_parameter("w");
  Tensor view = make_view(w.detach(), {1}, {1}, 0);  // a plain tensor in the parameter's place
  s.set_tensor_attribute("w", view);
  BOOST_TEST(s.has_tensor_attribute("w"));
  BOOST_TEST(!s.has_parameter("w"));
  BOOST_TEST(s.tensor_attribute("w").impl() == view.impl());
  BOOST_TEST(s.param("w").impl() == view.impl());  // the layer's forward sees the view
  BOOST_TEST(s(from_vector({3}, {1})).tensor().item() == 6.0);
  BOOST_TEST(s.named_parameters().empty());
  BOOST_TEST(s.parameters().empty());
  BOOST_TEST(s.named_buffers().size() == 1u);
  auto sd = s.state_dict();
  BOOST_REQUIRE(sd.size() == 1u);
  BOOST_TEST(sd[0].first == "b");
  // Reassigning keeps one attribute; removing returns it; the parameter can then come back.
  Tensor other = from_vector({5}, {1});
  s.set_tensor_attribute("w", other);
  BOOST_TEST(s.param("w").impl() == other.impl());
  BOOST_TEST(s.remove_tensor_attribute("w").impl() == other.impl());
  BOOST_TEST(!s.has_tensor_attribute("w"));
  s.register_parameter("w", w);
  BOOST_TEST(s.named_parameters().size() == 1u);
}

BOOST_AUTO_TEST_CASE(tensor_attribute_name_clashes_name_both_sides) {
  Scale s(1.0);
  s.register_buffer("b", zeros({1}));
  s.register_module("child", std::make_shared<Scale>(3.0));
  auto clash = [](const std::string& text) {
    return [text](const KeyError& e) { return message_has(e, text); };
  };
  BOOST_CHECK_EXCEPTION(s.set_tensor_attribute("w", zeros({1})), KeyError,
                        clash("attribute 'w' already exists as a parameter of Scale: cannot "
                              "register a tensor attribute with the same name"));
  BOOST_CHECK_EXCEPTION(s.set_tensor_attribute("b", zeros({1})), KeyError,
                        clash("'b' already exists as a buffer of Scale"));
  BOOST_CHECK_EXCEPTION(s.set_tensor_attribute("child", zeros({1})), KeyError,
                        clash("'child' already exists as a child module of Scale"));
  BOOST_CHECK_EXCEPTION(s.set_tensor_attribute("a.b", zeros({1})), KeyError,
                        clash("tensor attribute name can't contain \".\""));
  s.set_tensor_attribute("t", zeros({1}));
  BOOST_CHECK_EXCEPTION(s.register_parameter("t", zeros({1})), KeyError,
                        clash("attribute 't' already exists as a tensor attribute of Scale: "
                              "cannot register a parameter with the same name"));
  BOOST_CHECK_EXCEPTION(s.register_buffer("t", zeros({1})), KeyError,
                        clash("cannot register a buffer with the same name"));
  BOOST_CHECK_EXCEPTION(s.register_module("t", nullptr), KeyError,
                        clash("cannot register a module with the same name"));
  BOOST_CHECK_EXCEPTION(s.tensor_attribute("nope"), KeyError,
                        clash("Scale has no tensor attribute 'nope' (tensor attributes: t)"));
  BOOST_CHECK_EXCEPTION(s.remove_tensor_attribute("nope"), KeyError,
                        clash("Scale has no tensor attribute 'nope'"));
  BOOST_CHECK_EXCEPTION(s.param("nope"), KeyError, clash("Scale has no parameter 'nope'"));
}

BOOST_AUTO_TEST_CASE(to_empty_materialises_meta_tensors_in_place) {
  auto meta = TensorOptions(DType::Float32, kMeta);
  auto root = std::make_shared<Chain>();
  auto a = root->register_module("a", std::make_shared<Scale>(1.0));
  auto b = root->register_module("b", std::make_shared<Scale>(1.0));
  Tensor shared = empty({2, 3}, meta);
  a->register_parameter("tied", shared);
  b->register_parameter("tied", shared);
  root->register_buffer("stat", empty({4}, TensorOptions(DType::Int64, kMeta)));
  a->set_parameter("w", empty({1}, meta).requires_grad_());
  const TensorImpl* w_before = a->param("w").impl();

  root->to_empty(kCPU, /*recurse=*/false);  // only root's own buffer
  BOOST_TEST(root->buffer("stat").device().is_cpu());
  BOOST_TEST(root->buffer("stat").dtype() == DType::Int64);
  BOOST_TEST(a->param("tied").is_meta());

  root->to_empty(kCPU);
  for (const auto& [name, p] : root->named_parameters(/*prefix=*/"", true, false))
    BOOST_TEST((p.device().is_cpu() && p.storage()->data() != nullptr), name);
  BOOST_TEST(a->param("w").impl() == w_before);  // identity kept
  BOOST_TEST(a->param("w").requires_grad());
  BOOST_TEST(a->param("tied").impl() == b->param("tied").impl());  // still tied
  BOOST_TEST(shared.device().is_cpu());
  BOOST_TEST((shared.shape() == Shape{2, 3}));
}

BOOST_AUTO_TEST_SUITE_END()
