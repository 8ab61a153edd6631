// The FSDP runtime: flat-parameter layout, sharded training against the plain model on the same
// global batch (every strategy, world sizes, use_orig_params, prefetch modes), the schedule's
// events, gradient accumulation, clip_grad_norm_, full state dicts and the error cases.
#define BOOST_TEST_MODULE fsdp_runtime
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <map>

#include "core/autograd.h"
#include "core/error.h"
#include "core/nn/nn.h"
#include "core/optim/optim.h"
#include "fsdp/clip_grad_norm.h"
#include "fsdp/flat_param_layout.h"
#include "fsdp/full_state_dict.h"
#include "fsdp/runtime.h"
#include "fsdp/sharding.h"
#include "tests/fsdp/runtime_harness.h"

using namespace fsdp;
using namespace fsdp::testing;
namespace bdata = boost::unit_test::data;

namespace fsdp::policies {
std::ostream& operator<<(std::ostream& os, ShardingStrategy s) { return os << to_string(s); }
}  // namespace fsdp::policies

namespace {

void check_close(const RunResult& got, const RunResult& want, double rtol = 1e-5) {
  BOOST_REQUIRE_EQUAL(got.losses.size(), want.losses.size());
  for (std::size_t i = 0; i < got.losses.size(); ++i)
    BOOST_TEST(got.losses[i] == want.losses[i], boost::test_tools::tolerance(rtol));
  std::map<std::string, std::vector<double>> w(want.params.begin(), want.params.end());
  BOOST_REQUIRE_EQUAL(got.params.size(), want.params.size());
  for (const auto& [name, values] : got.params) {
    BOOST_TEST_CONTEXT("parameter " << name) {
      BOOST_REQUIRE(w.count(name) == 1u);
      BOOST_REQUIRE_EQUAL(values.size(), w[name].size());
      for (std::size_t i = 0; i < values.size(); ++i)
        BOOST_TEST(values[i] == w[name][i], boost::test_tools::tolerance(1e-4));
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(layout)

BOOST_AUTO_TEST_CASE(linear_3x3_on_4_ranks) {
  // Upstream's worked example: Linear(3, 3, bias=False) on 4 ranks.
  auto l = flat_param_layout({9}, 4, /*align=*/false, 4, /*sharded=*/true);
  BOOST_TEST(l.unpadded_numel == 9);
  BOOST_TEST(l.shard_numel == 3);
  BOOST_TEST(l.padded_numel == 12);
  BOOST_TEST(l.shard_begin(3) == 9);
  BOOST_TEST(l.shard_end(3) == 9);  // the last rank holds only padding
  auto i2 = l.shard_info(0, 2);
  BOOST_TEST(i2.in_shard);
  BOOST_TEST(i2.offset_in_shard == 0);
  BOOST_TEST(i2.numel_in_shard == 3);
  BOOST_TEST(i2.intra_param_start == 6);
  BOOST_TEST(i2.intra_param_end == 8);
  BOOST_TEST(!l.shard_info(0, 3).in_shard);
}

BOOST_AUTO_TEST_CASE(use_orig_params_alignment) {
  // float32: 16-byte alignment = 4 elements; padding before each misaligned parameter and to a
  // multiple of the world size at the end.
  auto l = flat_param_layout({3, 5, 2}, 4, /*align=*/true, 3, /*sharded=*/true);
  BOOST_TEST((l.offsets == std::vector<std::int64_t>{0, 4, 12}));
  BOOST_REQUIRE_EQUAL(l.paddings.size(), 3u);
  BOOST_TEST(l.paddings[0].start == 3);
  BOOST_TEST(l.paddings[0].numel == 1);
  BOOST_TEST(l.paddings[1].start == 9);
  BOOST_TEST(l.paddings[1].numel == 3);
  BOOST_TEST(l.paddings[2].start == 14);
  BOOST_TEST(l.paddings[2].numel == 1);
  BOOST_TEST(l.unpadded_numel == 15);
  BOOST_TEST(l.shard_numel == 5);
  // Parameter 1 ([4, 9)) spans ranks 0 and 1.
  auto a = l.shard_info(1, 0), b = l.shard_info(1, 1);
  BOOST_TEST(a.offset_in_shard == 4);
  BOOST_TEST(a.numel_in_shard == 1);
  BOOST_TEST(b.offset_in_shard == 0);
  BOOST_TEST(b.numel_in_shard == 4);
  BOOST_TEST(b.intra_param_start == 1);
  // NO_SHARD: no right padding, the shard is everything.
  auto n = flat_param_layout({3, 5}, 4, false, 3, false);
  BOOST_TEST(n.shard_numel == 8);
  BOOST_TEST(n.padded_numel == 8);
}

BOOST_AUTO_TEST_CASE(overflow_is_an_error) {
  const std::int64_t big = std::numeric_limits<std::int64_t>::max();
  BOOST_CHECK_THROW(flat_param_layout({big, big}, 4, false, 2, true), ValueError);
}

BOOST_AUTO_TEST_CASE(divide_factors) {
  auto f = [](int w) {
    auto d = gradient_divide_factors(w);
    return std::make_pair(d.pre, d.post);
  };
  BOOST_TEST((f(1) == std::make_pair(1.0, 1.0)));
  BOOST_TEST((f(2) == std::make_pair(2.0, 1.0)));
  BOOST_TEST((f(3) == std::make_pair(2.0, 1.5)));
  BOOST_TEST((f(4) == std::make_pair(2.0, 2.0)));
  BOOST_TEST((f(8) == std::make_pair(4.0, 2.0)));
  BOOST_TEST((f(16) == std::make_pair(4.0, 4.0)));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(sharded_vs_plain)

const std::vector<ShardingStrategy> kFlatStrategies = {
    ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP, ShardingStrategy::NO_SHARD};

BOOST_DATA_TEST_CASE(strategies_world_sizes_orig_params,
                     bdata::make(kFlatStrategies) * bdata::make({1, 2, 3, 4}) *
                         bdata::make({false, true}),
                     strategy, world, orig) {
  RunOptions o;
  o.strategy = strategy;
  o.use_orig_params = orig;
  check_close(run_mlp(world, o), run_mlp_plain(world, o));
}

BOOST_DATA_TEST_CASE(hybrid_strategies,
                     bdata::make({ShardingStrategy::HYBRID_SHARD,
                                  ShardingStrategy::_HYBRID_SHARD_ZERO2}) *
                         bdata::make({false, true}),
                     strategy, orig) {
  RunOptions o;
  o.strategy = strategy;
  o.use_orig_params = orig;
  o.node_size = 2;
  check_close(run_mlp(4, o), run_mlp_plain(4, o));
}

BOOST_AUTO_TEST_CASE(prefetch_modes_and_adamw) {
  for (auto prefetch : {std::optional<BackwardPrefetch>(BackwardPrefetch::BACKWARD_PRE),
                        std::optional<BackwardPrefetch>(BackwardPrefetch::BACKWARD_POST),
                        std::optional<BackwardPrefetch>()})
    for (bool fwd : {false, true}) {
      RunOptions o;
      o.backward_prefetch = prefetch;
      o.forward_prefetch = fwd;
      o.optimizer = "adamw";
      check_close(run_mlp(2, o), run_mlp_plain(2, o));
    }
}

BOOST_AUTO_TEST_SUITE_END()
