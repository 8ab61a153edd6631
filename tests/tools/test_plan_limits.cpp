// fsdp-plan's library at the limits of its input (issue 12): numbers that do not fit in int64,
// world sizes out of range, JSON and policies nested 100 000 deep. Each is an InputError (an
// fsdp::Error) naming the quantity and the place, never a wrong number or a crash.
#define BOOST_TEST_MODULE tools_plan_limits
#include <boost/test/unit_test.hpp>
#include <string>

#include "core/error.h"
#include "policies/policy_expr.h"
#include "tools/plan/model_file.h"
#include "tools/plan/planner.h"

using namespace fsdp;
using namespace fsdp::plan;

namespace {

const char* kHead = R"({"format": "fsdp-model/1", "module": )";

// The message of the error `fn` throws, caught as the root fsdp::Error ("" if none).
template <typename F>
std::string error_of(F fn) {
  try {
    fn();
  } catch (const fsdp::Error& e) {
    return e.what();
  }
  return "";
}

std::string plan_error(const std::string& module, std::int64_t world = 1,
                       ShardingStrategy s = ShardingStrategy::FULL_SHARD) {
  return error_of([&] {
    PlanOptions o;
    o.world_size = world;
    o.sharding = s;
    make_plan(parse_model(std::string(kHead) + module + "}", "m.json").root, o);
  });
}

std::string nested(const std::string& open, const std::string& leaf, const std::string& close,
                   int depth) {
  std::string s;
  s.reserve((open.size() + close.size()) * depth + leaf.size());
  for (int i = 0; i < depth; ++i) s += open;
  s += leaf;
  for (int i = 0; i < depth; ++i) s += close;
  return s;
}

}  // namespace

BOOST_AUTO_TEST_CASE(input_errors_are_fsdp_errors) {
  std::string m = error_of([] { policies::parse_policy("sise()"); });
  BOOST_TEST(m.find("--policy 'sise()': column 1: unknown policy 'sise'") == 0, m);
}

BOOST_AUTO_TEST_CASE(sums_and_byte_counts_are_checked) {
  // [2^62] float32: 2^64 bytes (printed as 0 before).
  std::string m =
      plan_error(R"({"type": "A", "params": [{"name": "w", "shape": [4611686018427387904]}]})");
  BOOST_TEST(m ==
             "the model's parameter bytes does not fit in 64 bits "
             "(4611686018427387904 * 4)");
  // Two [INT64_MAX] uint8 parameters: the numel sum (printed as -2 before).
  m = plan_error(R"({"type": "A", "params": [
      {"name": "w", "shape": [9223372036854775807], "dtype": "uint8"},
      {"name": "v", "shape": [9223372036854775807], "dtype": "uint8"}]})");
  BOOST_TEST(m ==
             "the model's numel does not fit in 64 bits "
             "(9223372036854775807 + 9223372036854775807)");
  // Sharded over 2 ranks, the padded flat parameter overflows: the unit is named.
  m = plan_error(R"({"type": "A", "params": [
      {"name": "w", "shape": [9223372036854775807], "dtype": "uint8"}]})",
                 2);
  BOOST_TEST(m.find("unit '' (A): flat parameter layout: ") == 0, m);
  // Unsharded, the same parameter fits.
  BOOST_TEST(plan_error(R"({"type": "A", "params": [
      {"name": "w", "shape": [9223372036854775807], "dtype": "uint8"}]})",
                        2, ShardingStrategy::NO_SHARD) == "");
}

BOOST_AUTO_TEST_CASE(world_and_node_sizes_are_validated) {
  const std::string small = R"({"type": "A", "params": [{"name": "w", "shape": [10]}]})";
  BOOST_TEST(plan_error(small, 0) == "--world-size must be between 1 and 2147483647, got 0");
  BOOST_TEST(plan_error(small, std::int64_t{1} << 31) ==
             "--world-size must be between 1 and 2147483647, got 2147483648");
  BOOST_TEST(plan_error(small, 2147483647) == "");
  BOOST_TEST(plan_error(small, 12, ShardingStrategy::HYBRID_SHARD) ==
             "--sharding HYBRID_SHARD: world size 12 is not a multiple of the 8 ranks per node "
             "it shards over");
}

BOOST_AUTO_TEST_CASE(deeply_nested_json_values_are_shown_briefly) {
  const int d = 100000;
  std::string m = error_of([&] {
    parse_model(std::string(kHead) + R"({"type": )" + nested("[", "", "]", d) + "}}", "m.json");
  });
  BOOST_TEST(m == "m.json: at module.type: expected a string, got [[[[...]]]]");
  m = error_of([&] {
    parse_model(std::string(kHead) + R"({"type": "A", "params": [{"name": "w", "shape": )" +
                    nested("[", "", "]", d) + "}]}}",
                "m.json");
  });
  BOOST_TEST(m ==
             "m.json: at module.params[0].shape: shape must be a list of non-negative "
             "integers, got [[[[...]]]]");
  m = error_of([&] {
    parse_model(R"({"format": )" + nested("[", "", "]", d) + R"(, "module": {"type": "A"}})",
                "m.json");
  });
  BOOST_TEST(m ==
             "m.json: unknown format version [[[[...]]]] (this planner reads "
             "\"fsdp-model/1\")");
  // A long flat value is cut at about 60 characters.
  m = error_of([&] {
    parse_model(std::string(kHead) + R"({"type": [)" + nested("1,", "1", "", 1000) + "]}}",
                "m.json");
  });
  BOOST_TEST(m == "m.json: at module.type: expected a string, got [" + nested("1,", "", "", 30) +
                      "1,...]");
}

BOOST_AUTO_TEST_CASE(number_overflow_has_a_position) {
  std::string m = error_of([] {
    parse_model(std::string(kHead) +
                    "{\"type\": \"A\",\n \"params\": [{\"name\": \"w\", "
                    "\"shape\": [1e400]}]}}",
                "m.json");
  });
  BOOST_TEST(m == "m.json:2:37: number overflow parsing '1e400'");
}

BOOST_AUTO_TEST_CASE(policy_nesting_is_bounded) {
  const std::string ok = nested("or(", "always", ")", policies::kMaxPolicyDepth);
  BOOST_TEST(policies::parse_policy(ok).str() == ok);
  std::string m = error_of([] { policies::parse_policy(nested("or(", "always", ")", 30000)); });
  BOOST_TEST(m.find(": column 304: policies nested more than 100 deep in or(...); list them in "
                    "one or(A, B, C) instead") != std::string::npos,
             m);
  // The policy is quoted by its first 200 characters.
  BOOST_TEST(m.find("--policy '" + nested("or(", "", "", 66) + "or...': ") == 0, m);
}

BOOST_AUTO_TEST_CASE(always_on_a_deep_chain_names_every_unit) {
  // A 3000-deep chain under `always`: every module is a unit inside the one above it.
  const int d = 3000;
  std::string module = nested(R"({"type": "L", "params": [{"name": "w", "shape": [2]}], )"
                              R"("children": [{"name": "c", "module": )",
                              R"({"type": "L"})", "}]}", d);
  PlanOptions o;
  o.policy = policies::parse_policy("always");
  Plan p = make_plan(parse_model(std::string(kHead) + module + "}", "m.json").root, o);
  BOOST_REQUIRE_EQUAL(p.units.size(), static_cast<std::size_t>(d + 1));
  std::string deepest = "c";
  for (int i = 1; i < d; ++i) deepest += ".c";
  BOOST_TEST(p.unit_fqn(p.units[0]) == deepest);  // construction order: the deepest first
  BOOST_TEST(p.unit_fqn(p.units[1]) == deepest.substr(0, deepest.size() - 2));
  BOOST_TEST(p.unit_fqn(p.units.back()) == "");
  for (std::size_t k = 0; k + 1 < p.units.size(); ++k)
    BOOST_TEST_REQUIRE(p.units[k].parent == static_cast<int>(k + 1));
  BOOST_TEST(p.units.back().parent == -1);
  BOOST_TEST(p.param_fqn(p.units[1].params.at(0)) == deepest.substr(0, deepest.size() - 2) + ".w");
}
