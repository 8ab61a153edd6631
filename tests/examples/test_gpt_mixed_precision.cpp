// train_gpt's GPT under FSDP mixed precision on 2 thread ranks: trained in bf16/fp16 it follows
// the float32 run within 2e-2 for 50 steps of AdamW and moves half the bytes in its all-gathers
// and reductions (every flat strategy).
#define BOOST_TEST_MODULE examples_gpt_mixed_precision
#pragma GCC diagnostic ignored "-Wrestrict"  // GCC 12 on Boost's data-test-case names
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <mutex>
#include <optional>
#include <vector>

#include "comm/threads/run_ranks.h"
#include "examples/gpt_train.h"
#include "tests/examples/gpt_reference.h"
#include "tests/support/thread_safe_test.h"

using namespace fsdp;
using policies::ShardingStrategy;
namespace bdata = boost::unit_test::data;

BOOST_AUTO_TEST_SUITE(gpt)

namespace {

struct GptRun {
  std::vector<double> losses;
  examples::GPTTrainResult result;
};

// The GPT of the train_gpt fixture, 50 steps of AdamW on 2 thread ranks.
GptRun train(ShardingStrategy strategy, std::optional<DType> mp, bool orig = false) {
  examples::GPTTrainConfig cfg = testing::gpt_reference().base;
  cfg.batch = 2;
  cfg.steps = 50;
  cfg.lr = 3e-3;
  cfg.sharding = strategy;
  cfg.use_orig_params = orig;
  cfg.mixed_precision = mp;
  GptRun run;
  std::mutex mu;
  comm::run_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto r = examples::train_gpt(cfg, pg);
    std::lock_guard<std::mutex> lock(mu);
    if (pg->rank() == 0) run = {r.losses, r};
  });
  return run;
}

}  // namespace

BOOST_DATA_TEST_CASE(low_precision_follows_float32_with_half_the_bytes,
                     bdata::make({ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP,
                                  ShardingStrategy::NO_SHARD}) *
                         bdata::make({DType::BFloat16, DType::Float16}),
                     strategy, dtype) {
  const GptRun full = train(strategy, std::nullopt);
  const GptRun low = train(strategy, dtype, strategy == ShardingStrategy::FULL_SHARD);
  TS_REQUIRE(low.losses.size() == 50u);
  TS_REQUIRE(full.losses.size() == 50u);
  for (std::size_t i = 0; i < 50; ++i)
    TS_TEST(low.losses[i] == full.losses[i], boost::test_tools::tolerance(2e-2));
  TS_TEST(full.losses.back() < full.losses.front() - 0.5);  // it learnt something
  TS_TEST(2 * low.result.all_gather_bytes == full.result.all_gather_bytes);
  TS_TEST(2 * low.result.reduce_bytes == full.result.reduce_bytes);
  TS_TEST(full.result.reduce_bytes > 0u);
}

BOOST_AUTO_TEST_SUITE_END()
