// The one table of sharding strategy names: every strategy by name and back, Python's repr,
// and the one message for an unknown name.
#include <boost/test/unit_test.hpp>

#include "policies/sharding_strategy_names.h"

using namespace fsdp::policies;

BOOST_AUTO_TEST_SUITE(strategy_names_table)

BOOST_AUTO_TEST_CASE(every_strategy_round_trips_in_declaration_order) {
  const std::vector<std::string> expected{"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD",
                                          "_HYBRID_SHARD_ZERO2"};
  BOOST_TEST(strategy_names() == expected, boost::test_tools::per_element());
  for (const auto& name : expected) {
    auto s = find_strategy(name);
    BOOST_TEST_REQUIRE(s.has_value(), name);
    BOOST_TEST(strategy_name(*s) == name);
    BOOST_TEST(to_string(*s) == "ShardingStrategy." + name);
    BOOST_TEST((find_strategy("ShardingStrategy." + name) == s));  // Python's spelling too
  }
  BOOST_TEST((find_strategy("_HYBRID_SHARD_ZERO2") == ShardingStrategy::_HYBRID_SHARD_ZERO2));
}

BOOST_AUTO_TEST_CASE(unknown_names_are_refused) {
  BOOST_TEST(!find_strategy("full_shard").has_value());  // case-sensitive, as the enum
  BOOST_TEST(!find_strategy("").has_value());
  BOOST_TEST(!find_strategy("ShardingStrategy.").has_value());
  BOOST_TEST(!find_strategy("FULL_SHARD ").has_value());
}

BOOST_AUTO_TEST_CASE(one_message_lists_every_choice) {
  BOOST_TEST(unknown_strategy_message("FULL") ==
             "unknown strategy 'FULL'; choose FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD "
             "or _HYBRID_SHARD_ZERO2");
  BOOST_TEST(unknown_strategy_message("FULL", " (did you mean 'FULL_SHARD'?)", "none") ==
             "unknown strategy 'FULL' (did you mean 'FULL_SHARD'?); choose FULL_SHARD, "
             "SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, _HYBRID_SHARD_ZERO2 or none");
}

BOOST_AUTO_TEST_SUITE_END()
