// The --policy language (policies/policy_expr.h): every form parses to its canonical spelling,
// a malformed expression is an InputError naming the column with close matches, and
// build_policy (policies/policy_build.h) wraps exactly as the same policy built in code.
#include <boost/test/unit_test.hpp>
#include <string>
#include <vector>

#include "core/input_error.h"
#include "core/nn/nn.h"
#include "core/traversal/module_sets.h"
#include "policies/auto_wrap.h"
#include "policies/module_wrap_policy.h"
#include "policies/or_policy.h"
#include "policies/policy_build.h"
#include "policies/policy_expr.h"
#include "policies/size_based.h"
#include "policies/transformer_policy.h"
#include "tests/support/error_message.h"

using namespace fsdp;
using namespace fsdp::policies;

namespace {

bool has(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

// The FQNs auto_wrap wraps under `policy`, in wrapping order (children before parents).
std::vector<std::string> wrapped(const AutoWrapPolicy& policy) {
  auto block = [] {
    return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
        std::make_shared<nn::Linear>(8, 8), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(8, 2)});
  };
  auto root = std::make_shared<nn::Sequential>(
      std::initializer_list<nn::ModulePtr>{block(), std::make_shared<nn::Linear>(2, 2), block()});
  std::vector<std::string> fqns;
  auto_wrap(root, policy, traversal::ModuleSet{}, traversal::ParamSet{}, WrapperOptions{},
            [&](nn::ModulePtr m, const WrapperOptions&) {
              for (const auto& [name, sub] : root->named_modules())
                if (sub.get() == m.get()) fqns.push_back(name);
              return m;  // identity: the tree keeps its shape, the call is the record
            });
  return fqns;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(policy_expr)

BOOST_AUTO_TEST_CASE(policy_forms_parse) {
  BOOST_TEST(parse_policy("always").str() == "always");
  BOOST_TEST(parse_policy(" always ( ) ").str() == "always");
  BOOST_TEST(parse_policy("size").str() == "size(min_num_params=100000000)");
  BOOST_TEST(parse_policy("size(1e8)").min_num_params == 100000000);
  BOOST_TEST(parse_policy("size(min_num_params=1_000)").min_num_params == 1000);
  BOOST_TEST(
      parse_policy("size(min_num_params=2.5e3, force_leaf=[A, B], exclude_wrap=[C])").str() ==
      "size(min_num_params=2500, force_leaf=[A, B], exclude_wrap=[C])");
  BOOST_TEST(parse_policy("size(force_leaf_modules=[torch.nn.Linear])").force_leaf->at(0).name ==
             "Linear");
  BOOST_TEST(parse_policy("transformer([Block,])").str() == "transformer([Block])");
  BOOST_TEST(parse_policy("transformer(transformer_layer_cls=[A, B])").str() ==
             "transformer([A, B])");
  BOOST_TEST((parse_policy("individually([_BatchNorm])").kind == PolicyExpr::Kind::Individually));
  BOOST_TEST(parse_policy("modules([])").str() == "modules([])");
  auto e = parse_policy("or(size(min_num_params=10), or(transformer([A])), modules([B]))");
  BOOST_TEST(e.str() == "or(size(min_num_params=10), or(transformer([A])), modules([B]))");
  auto refs = e.class_refs();
  BOOST_TEST(refs.size() == 2u);
  BOOST_TEST(refs[0].name == "A");
  BOOST_TEST(refs[0].column == 45u);
  BOOST_TEST(refs[1].name == "B");
}

BOOST_AUTO_TEST_CASE(policy_errors_point_at_the_column) {
  auto err = [](const std::string& t) {
    return testing::error_message<InputError>([&] { parse_policy(t); });
  };
  std::string m = err("sise(min_num_params=1)");
  BOOST_TEST(has(m,
                 "--policy 'sise(min_num_params=1)': column 1: unknown policy 'sise' (did you "
                 "mean 'size'?)"),
             m);
  m = err("or(size(min_num_params=1), transfomer([A]))");
  BOOST_TEST(has(m, "column 28: unknown policy 'transfomer' (did you mean 'transformer'?)"), m);
  m = err("size(min_params=5)");
  BOOST_TEST(has(m,
                 "column 6: unknown argument 'min_params' of size() (did you mean "
                 "'min_num_params'?)"),
             m);
  m = err("size(min_num_params=1.5)");
  BOOST_TEST(has(m, "column 21: min_num_params must be a non-negative integer, got 1.5"), m);
  m = err("size(min_num_params=-3)");
  BOOST_TEST(has(m, "column 21: min_num_params must be a non-negative integer"), m);
  m = err("size(min_num_params=abc)");
  BOOST_TEST(has(m, "column 21: min_num_params must be a number"), m);
  m = err("transformer(Block)");
  BOOST_TEST(has(m, "column 13: expected a list of class names [A, B]"), m);
  m = err("transformer([Block]");
  BOOST_TEST(has(m, "column 20: expected ')'"), m);
  m = err("always extra");
  BOOST_TEST(has(m, "column 8: unexpected 'extra'"), m);
  m = err("");
  BOOST_TEST(has(m, "column 1: empty policy"), m);
  m = err("or()");
  BOOST_TEST(has(m, "column 4: or() needs at least one policy"), m);
  m = err("size(min_num_params=1, min_num_params=2)");
  BOOST_TEST(has(m, "column 24: size() got 'min_num_params' twice"), m);
  m = err("modules([A B])");
  BOOST_TEST(has(m, "column 12: expected ',' or ']'"), m);
  m = err("transformer(layer_cls=[A])");
  BOOST_TEST(has(m, "unknown argument 'layer_cls' of transformer()"), m);
}

// Each form and or() over them: the same units as the policy written in code.
BOOST_AUTO_TEST_CASE(build_policy_wraps_as_the_policy_built_in_code) {
  using Strings = std::vector<std::string>;
  const Strings by_size = wrapped(size_based_auto_wrap_policy(80));
  BOOST_TEST(by_size == Strings({"0", "2"}));
  BOOST_TEST(wrapped(build_policy("size(min_num_params=80)")) == by_size);
  const Strings linears = wrapped(ModuleWrapPolicy::make(nn::ClassSet{"Linear"}));
  BOOST_TEST(linears == Strings({"0.0", "0.2", "1", "2.0", "2.2"}));
  BOOST_TEST(wrapped(build_policy("modules([Linear])")) == linears);
  BOOST_TEST(wrapped(build_policy(parse_policy("transformer([ReLU])"))) ==
             wrapped(transformer_auto_wrap_policy(nn::ClassSet{"ReLU"})));
  BOOST_TEST(wrapped(build_policy("or(size(min_num_params=80), transformer([ReLU]))")) ==
             wrapped(or_policy({size_based_auto_wrap_policy(80),
                                transformer_auto_wrap_policy(nn::ClassSet{"ReLU"})})));
  BOOST_TEST(
      testing::error_message<InputError>([] { build_policy("modules([Linear]"); }) ==
      "--policy 'modules([Linear]': column 17: expected ')' to close modules(...), which takes one "
      "list of class names, found the end");
}

BOOST_AUTO_TEST_SUITE_END()
