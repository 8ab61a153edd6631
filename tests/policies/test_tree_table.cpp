// The tree table (core/traversal/tree_table.h): subtree sizes and parameter numels, with None
// parameter slots (register_parameter(name, Tensor())) among the modules it prefetches ahead of
// (issue 12: the prefetch did pointer arithmetic on a None parameter's null object, which
// UBSan reports).
#include <boost/test/unit_test.hpp>

#include "core/traversal/tree_table.h"

using namespace fsdp;

BOOST_AUTO_TEST_CASE(tree_table_with_none_parameters) {
  // A 40-deep chain: every module has a None parameter, every other one a 3-element one.
  std::vector<nn::ModulePtr> chain;
  for (int i = 0; i < 40; ++i) {
    auto m = std::make_shared<nn::Module>();
    m->register_parameter("none", Tensor());
    if (i % 2 == 0) m->register_parameter("w", empty({3}, TensorOptions(DType::Float32, kMeta)));
    if (!chain.empty()) chain.back()->register_module("c", m);
    chain.push_back(m);
  }
  const traversal::TreeTable table(*chain.front(), traversal::ParamSet{});
  BOOST_REQUIRE(table.is_tree());
  BOOST_REQUIRE_EQUAL(table.size(), 40u);
  for (std::size_t i = 0; i < 40; ++i) {
    BOOST_TEST(table[i].size == static_cast<std::int32_t>(40 - i));
    BOOST_TEST(table[i].numel == static_cast<std::int64_t>(3 * ((41 - i - i % 2) / 2)), i);
  }
  BOOST_TEST(table.name(3) == "c.c.c");
}
