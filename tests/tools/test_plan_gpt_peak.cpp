// fsdp-plan's prediction of a training step's peak memory against the peak train_gpt measures
// (issue 14): the GPT of examples/train_gpt exported to a model file and planned with the same
// policy, world size, batch and sequence length, within 10% in float32 and under bf16.
#define BOOST_TEST_MODULE tools_plan_gpt_peak
#pragma GCC diagnostic ignored "-Wrestrict"  // GCC 12 on Boost's data-test-case names
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <memory>
#include <vector>

#include "comm/threads/run_ranks.h"
#include "examples/gpt_train.h"
#include "policies/policy_expr.h"
#include "tests/examples/gpt_reference.h"
#include "tools/plan/model_export.h"
#include "tools/plan/model_file.h"
#include "tools/plan/planner.h"

using namespace fsdp;
using examples::GPTTrainConfig;
using policies::ShardingStrategy;
namespace bdata = boost::unit_test::data;

namespace {
const testing::GptReference& reference() {
  return testing::gpt_reference();
}

// fsdp-plan's plan of the job `cfg` runs on 2 ranks: the GPT exported to a model file and planned
// with the job's policy, strategy, batch and sequence length.
plan::Plan plan_of(const GPTTrainConfig& cfg, bool bf16) {
  examples::GPT meta(cfg.model, TensorOptions(DType::Float32, kMeta));
  plan::PlanOptions opts;
  opts.policy = policies::parse_policy(cfg.policy);
  opts.world_size = 2;
  opts.sharding = cfg.sharding.value_or(ShardingStrategy::FULL_SHARD);
  opts.batch = cfg.batch;
  opts.seq = cfg.model.seq;
  opts.mixed_precision = bf16;
  return plan::make_plan(plan::parse_model(plan::model_to_json(meta), "gpt.json").root, opts);
}
}  // namespace

BOOST_DATA_TEST_CASE(planner_predicts_the_measured_step_peak, bdata::make({false, true}), bf16) {
  GPTTrainConfig cfg = reference().base;
  cfg.model = examples::GPTConfig{.layers = 2, .d_model = 128, .heads = 4, .seq = 64, .vocab = 256};
  cfg.load_path.clear();  // the fixture's initial weights are for its smaller model
  cfg.steps = 3;
  cfg.batch = 8;
  cfg.sharding = ShardingStrategy::FULL_SHARD;
  if (bf16) cfg.mixed_precision = DType::BFloat16;
  std::vector<examples::GPTTrainResult> results(2);
  comm::run_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    results[std::size_t(pg->rank())] = examples::train_gpt(cfg, pg);
  });

  const plan::Plan p = plan_of(cfg, bf16);
  const double predicted = double(p.totals.peak_with_activations_bytes);
  for (const auto& r : results) {
    const double ratio = predicted / double(r.step_peak_bytes);
    BOOST_TEST_MESSAGE("planned " << predicted << " B, measured " << r.step_peak_bytes << " B");
    BOOST_TEST(ratio >= 0.9);
    BOOST_TEST(ratio <= 1.1);
  }
}

// What each unit's collectives move comes from one rule (fsdp/sharding.h): the bytes fsdp-plan
// predicts per step are those the runtime counts as it issues the collectives.
BOOST_DATA_TEST_CASE(planner_predicts_the_counted_collective_bytes,
                     bdata::make({ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP,
                                  ShardingStrategy::NO_SHARD}) *
                         bdata::make({false, true}),
                     strategy, bf16) {
  GPTTrainConfig cfg = reference().base;
  cfg.model = examples::GPTConfig{.layers = 2, .d_model = 64, .heads = 4, .seq = 32, .vocab = 128};
  cfg.load_path.clear();
  cfg.steps = 3;
  cfg.batch = 4;
  cfg.sharding = strategy;
  if (bf16) cfg.mixed_precision = DType::BFloat16;
  std::vector<examples::GPTTrainResult> results(2);
  comm::run_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    results[std::size_t(pg->rank())] = examples::train_gpt(cfg, pg);
  });

  const plan::Plan p = plan_of(cfg, bf16);
  const std::uint64_t timed_steps = std::uint64_t(cfg.steps - 1);
  for (const auto& r : results) {
    BOOST_TEST(r.all_gather_bytes == std::uint64_t(p.totals.all_gather_bytes) * timed_steps);
    BOOST_TEST(r.reduce_bytes ==
               std::uint64_t(p.totals.reduce_scatter_bytes + p.totals.all_reduce_bytes) *
                   timed_steps);
  }
}
