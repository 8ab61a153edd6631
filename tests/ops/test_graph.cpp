// The graph IR: building and printing graphs, the interpreter, and the tracer (a traced graph run
// by the interpreter equals eager).
#include <boost/test/unit_test.hpp>

#include "core/nn/nn.h"
#include "core/ops.h"
#include "ops/graph/interpreter.h"
#include "ops/graph/tracer.h"
#include "ops/wrap.h"
#include "tests/ops/ops_test_models.h"

using namespace fsdp;
using namespace fsdp::ops;
using namespace fsdp::ops::graph;

namespace {
FunctionTargetPtr target(const std::string& name,
                         std::function<Tensor(const Tensor&, const Tensor&)> f) {
  return std::make_shared<const FunctionTarget>(
      FunctionTarget{name, [f](const std::vector<Object>& a, const Kwargs&) -> Object {
                       return Object(f(a.at(0).value().tensor(), a.at(1).value().tensor()));
                     }});
}
}  // namespace

BOOST_AUTO_TEST_SUITE(graph_ir)

BOOST_AUTO_TEST_CASE(a_built_graph_prints_in_fx_format_and_runs) {
  auto gm = std::make_shared<GraphModule>();
  Graph& g = gm->graph;
  auto x = g.placeholder("x");
  auto w = g.get_attr("weight");
  auto mm_node =
      g.call_function(target("mm", [](const Tensor& a, const Tensor& b) { return mm(a, b); }),
                      {Argument::node(x), Argument::node(w)});
  auto t = g.call_method("transpose", {Argument::node(mm_node), nn::Value(0), nn::Value(1)});
  auto lin = g.call_module("proj", {Argument::node(t)});
  auto mm2 =
      g.call_function(target("mm", [](const Tensor& a, const Tensor& b) { return mm(a, b); }),
                      {Argument::node(lin), Argument::node(lin)});
  g.output(Argument::list({Argument::node(mm2), Argument::node(x)}));
  g.node(mm_node).meta["tag"] = std::string("first");

  BOOST_TEST(
      g.str() ==
      "graph():\n"
      "    %x : [num_users=2] = placeholder[target=x]\n"
      "    %weight : [num_users=1] = get_attr[target=weight]\n"
      "    %mm : [num_users=1] = call_function[target=mm](args = (%x, %weight), kwargs = {})\n"
      "    %transpose : [num_users=1] = call_method[target=transpose](args = (%mm, 0, 1), "
      "kwargs = {})\n"
      "    %proj : [num_users=1] = call_module[target=proj](args = (%transpose,), kwargs = {})\n"
      "    %mm_1 : [num_users=1] = call_function[target=mm](args = (%proj, %proj), kwargs = {})\n"
      "    return [%mm_1, %x]\n");
  BOOST_TEST(g.users(x) == (std::vector<std::int32_t>{mm_node, 6}));
  BOOST_TEST(g.find_nodes(NodeOp::call_function) == (std::vector<std::int32_t>{mm_node, mm2}));
  BOOST_TEST(std::string(op_name(g.node(t).op)) == "call_method");

  Tensor weight = from_vector({1, 2, 3, 4}, {2, 2});
  gm->set_tensor_attr("weight", weight);
  auto proj = std::make_shared<nn::Linear>(2, 2, false);
  gm->set_module_attr("proj", proj);
  Tensor in = from_vector({1, 0, 0, 1}, {2, 2});
  nn::Value out = (*gm)(in);
  Tensor ref_lin = linear(transpose(mm(in, weight), 0, 1), proj->param("weight"));
  BOOST_TEST(out[0].tensor().to_vector() == mm(ref_lin, ref_lin).to_vector());
  BOOST_TEST(out[1].tensor().is_same(in));
  BOOST_CHECK_EXCEPTION(gm->get_attr("nope"), KeyError, [](const KeyError& e) {
    return std::string(e.what()) == "GraphModule has no attribute 'nope'";
  });
}

BOOST_AUTO_TEST_CASE(node_names_are_unique_identifiers) {
  Graph g;
  auto a = g.placeholder("x");
  g.call_method("view", {Argument::node(a), nn::Value(std::vector<nn::Value>{nn::Value(-1)})});
  g.call_method("view", {Argument::node(a), nn::Value(2.5)});
  g.call_module("layers.0", {Argument::node(a)});
  BOOST_TEST(g.node(1).name == "view");
  BOOST_TEST(g.node(2).name == "view_1");
  BOOST_TEST(g.node(3).name == "layers_0");
  BOOST_TEST(g.str().find("args = (%x, (-1,))") != std::string::npos);
  BOOST_TEST(g.str().find("args = (%x, 2.5)") != std::string::npos);
  g.output(Argument());
  BOOST_CHECK_THROW(g.placeholder("late"), RuntimeError);
}

BOOST_AUTO_TEST_CASE(a_traced_function_prints_its_ops_and_reruns_on_new_inputs) {
  Tensor x = from_vector({1, -2, 3, -4}, {2, 2});
  Tensor w = from_vector({0.5, 1, 1.5, 2}, {2, 2});
  auto fn = [](const nn::Args& a) {
    Tensor h = relu(mm(a.tensor(0), a.tensor(1)));
    return nn::Value(add(mul(h, 2.0), a.tensor(0)));
  };
  GraphModulePtr gm = trace(fn, {x, w});
  // alpha is the Scalar 1 (an int, as aten's add), mul's scalar the float 2.0.
  BOOST_TEST(
      gm->code() ==
      "graph():\n"
      "    %arg0 : [num_users=2] = placeholder[target=arg0]\n"
      "    %arg1 : [num_users=1] = placeholder[target=arg1]\n"
      "    %mm : [num_users=1] = call_function[target=mm](args = (%arg0, %arg1), kwargs = {})\n"
      "    %relu : [num_users=1] = call_function[target=relu](args = (%mm,), kwargs = {})\n"
      "    %mul : [num_users=1] = call_function[target=mul.Scalar](args = (%relu, 2.0), "
      "kwargs = {})\n"
      "    %add : [num_users=1] = call_function[target=add](args = (%mul, %arg0, 1), "
      "kwargs = {})\n"
      "    return add\n");
  Tensor x2 = from_vector({3, 1, -1, 2}, {2, 2});
  Tensor w2 = from_vector({1, -1, 2, 0.25}, {2, 2});
  BOOST_TEST((*gm)(x2, w2).tensor().to_vector() == fn(nn::Args{x2, w2}).tensor().to_vector());
}

BOOST_AUTO_TEST_CASE(tensors_from_outside_become_constants_and_outputs_become_getitems) {
  Tensor bias = from_vector({10, 20}, {2});
  auto fn = [bias](const nn::Args& a) {
    auto [values, indices] = max(add(a.tensor(0), bias), 1);
    return nn::Value(std::vector<nn::Value>{values, indices});
  };
  Tensor x = from_vector({1, 5, 7, 2}, {2, 2});
  GraphModulePtr gm = trace(fn, {x});
  const std::string code = gm->code();
  BOOST_TEST(
      code.find("%_tensor_constant_0 : [num_users=1] = get_attr[target=_tensor_constant_0]") !=
      std::string::npos);
  BOOST_TEST(code.find("call_function[target=getitem](args = (%max, 0), kwargs = {})") !=
                 std::string::npos,
             code);
  BOOST_TEST(gm->get_attr("_tensor_constant_0").value().tensor().is_same(bias));
  nn::Value out = (*gm)(x);
  // [[1, 5], [7, 2]] + [10, 20] = [[11, 25], [17, 22]]: row maxima 25 and 22, both at index 1.
  BOOST_TEST(out[0].tensor().to_vector() == (std::vector<double>{25, 22}));
  BOOST_TEST(out[1].tensor().to_vector() == (std::vector<double>{1, 1}));
}

BOOST_AUTO_TEST_CASE(a_traced_transformer_stack_equals_eager) {
  auto model = ops_test::transformer_stack(2, DType::Float64);
  model->eval();
  Tensor x = randn({2, 3, 8}, DType::Float64);
  GraphModulePtr gm = trace_module(model, {x});
  // Parameters are read by FQN.
  BOOST_TEST(gm->code().find("get_attr[target=0.self_attn.in_proj_weight]") != std::string::npos);
  // Self-attention's fused head split is one node, as in eager.
  BOOST_TEST(gm->code().find("split_heads") != std::string::npos);
  Tensor x2 = randn({2, 3, 8}, DType::Float64);
  Tensor eager = (*model)(x2).tensor();
  Tensor traced = (*gm)(x2).tensor();
  BOOST_TEST(traced.to_vector() == eager.to_vector());
}

BOOST_AUTO_TEST_CASE(leaf_modules_are_one_call_module_node) {
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(4, 2)});
  TraceOptions options;
  options.is_leaf_module = [](const nn::Module& m, const std::string&) {
    return m.type_name() == "Linear";
  };
  Tensor x = randn({5, 3});
  GraphModulePtr gm = trace_module(model, {x}, options);
  BOOST_TEST(gm->code() ==
             "graph():\n"
             "    %arg0 : [num_users=1] = placeholder[target=arg0]\n"
             "    %_0 : [num_users=1] = call_module[target=0](args = (%arg0,), kwargs = {})\n"
             "    %relu : [num_users=1] = call_function[target=relu](args = (%_0,), kwargs = {})\n"
             "    %_2 : [num_users=1] = call_module[target=2](args = (%relu,), kwargs = {})\n"
             "    return _2\n");
  Tensor x2 = randn({5, 3});
  BOOST_TEST((*gm)(x2).tensor().to_vector() == (*model)(x2).tensor().to_vector());
}

BOOST_AUTO_TEST_CASE(a_higher_order_operator_is_one_node_with_a_nested_graph) {
  Tensor constant = from_vector({1, 2}, {2});  // unknown to the trace: a constant of the body
  auto fn = [constant](const nn::Args& a) {
    Tensor y = neg(a.tensor(0));
    Tensor outer = exp(a.tensor(0));  // a result of the enclosing trace: lifted into the body
    Function body = [constant, outer](const nn::Args& b) {
      return nn::Value(mul(add(b.tensor(0), constant), outer));
    };
    return nn::Value(relu(wrap(Object(body), {y}).tensor()));
  };
  Tensor x = from_vector({-1, 4}, {2});
  GraphModulePtr gm = trace(fn, {x});
  BOOST_TEST(
      gm->code() ==
      "graph():\n"
      "    %arg0 : [num_users=2] = placeholder[target=arg0]\n"
      "    %neg : [num_users=1] = call_function[target=neg](args = (%arg0,), kwargs = {})\n"
      "    %exp : [num_users=1] = call_function[target=exp](args = (%arg0,), kwargs = {})\n"
      "    %wrap_body_0 : [num_users=1] = get_attr[target=wrap_body_0]\n"
      "    %wrap : [num_users=1] = call_function[target=wrap](args = (%wrap_body_0, %neg, "
      "%exp), kwargs = {})\n"
      "    %relu : [num_users=1] = call_function[target=relu](args = (%wrap,), kwargs = {})\n"
      "    return relu\n");
  auto body = std::dynamic_pointer_cast<GraphModule>(gm->get_attr("wrap_body_0").module());
  BOOST_REQUIRE(body != nullptr);
  BOOST_TEST(gm->has_child("wrap_body_0"));
  BOOST_TEST(body->code() ==
             "graph():\n"
             "    %arg0 : [num_users=1] = placeholder[target=arg0]\n"
             "    %_tensor_constant_0 : [num_users=1] = get_attr[target=_tensor_constant_0]\n"
             "    %add : [num_users=1] = call_function[target=add](args = (%arg0, "
             "%_tensor_constant_0, 1), kwargs = {})\n"
             "    %lifted_0 : [num_users=1] = placeholder[target=lifted_0]\n"
             "    %mul : [num_users=1] = call_function[target=mul](args = (%add, %lifted_0), "
             "kwargs = {})\n"
             "    return mul\n");
  const Node& wrap_node = gm->graph.node(4);
  BOOST_TEST(wrap_node.name == "wrap");
  BOOST_TEST(wrap_node.function->hop == &wrap_op());
  Tensor x2 = from_vector({2, -7}, {2});
  BOOST_TEST((*gm)(x2).tensor().to_vector() == fn(nn::Args{x2}).tensor().to_vector());
}

BOOST_AUTO_TEST_SUITE_END()
