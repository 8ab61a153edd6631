// Activation checkpointing composed with FSDP as FSDP(checkpoint_wrapper(block)): sharded training
// of a transformer stack on 2 thread ranks gives, step by step, the losses of the unsharded model
// without checkpointing (so also its updates), and every block is recomputed once per step on every
// rank.
#define BOOST_TEST_MODULE ops_fsdp
#include <boost/test/unit_test.hpp>
#include <mutex>

#include "comm/threads/run_ranks.h"
#include "core/optim/optim.h"
#include "fsdp/fully_sharded_data_parallel.h"
#include "ops/checkpoint_wrapper.h"
#include "policies/module_wrap_policy.h"
#include "tests/ops/ops_test_models.h"
#include "tests/support/thread_safe_test.h"

using namespace fsdp;

namespace {
constexpr int kWorld = 2, kSteps = 3, kLayers = 2;
constexpr std::int64_t kRowsPerRank = 2;

// The global batch of a step: [kWorld * kRowsPerRank, 3, 8].
Tensor global_batch(int step) {
  Generator gen(500 + static_cast<std::uint64_t>(step));
  return randn({kWorld * kRowsPerRank, 3, 8}, {}, &gen);
}

Tensor mean_square(const Tensor& y) {
  return mean(mul(y, y));
}

struct Trained {
  std::vector<double> losses;
  std::int64_t recomputes = 0;
};

Trained train_plain() {
  auto model = ops_test::transformer_stack(kLayers, DType::Float32, 0.0, 3);
  optim::SGD opt(model->parameters(), optim::SGDOptions{.lr = 0.1});
  Trained t;
  for (int step = 0; step < kSteps; ++step) {
    opt.zero_grad();
    Tensor loss = mean_square((*model)(global_batch(step)).tensor());
    loss.backward();
    opt.step();
    t.losses.push_back(loss.item());
  }
  return t;
}
}  // namespace

BOOST_AUTO_TEST_CASE(fsdp_of_checkpoint_wrapped_blocks_trains_like_the_plain_model) {
  const Trained want = train_plain();
  Trained got;
  std::mutex mu;
  comm::run_ranks(kWorld, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto model = ops_test::transformer_stack(kLayers, DType::Float32, 0.0, 3);
    WrapperOptions w;
    w.process_group = pg;
    w.sharding_strategy = ShardingStrategy::FULL_SHARD;
    for (int i = 0; i < kLayers; ++i) {
      const std::string name = std::to_string(i);
      model->replace_child(
          name, FullyShardedDataParallel::make(ops::checkpoint_wrapper(model->child(name)), w));
    }
    auto root = FullyShardedDataParallel::make(model, w);
    optim::SGD opt(root->parameters(), optim::SGDOptions{.lr = 0.1});
    Trained mine;
    const auto before = ops::checkpoint_recompute_count();
    for (int step = 0; step < kSteps; ++step) {
      opt.zero_grad();
      Tensor local = global_batch(step).narrow(0, pg->rank() * kRowsPerRank, kRowsPerRank);
      Tensor loss = mean_square((*root)(local.contiguous()).tensor());
      loss.backward();
      opt.step();
      // The global loss: the mean of the ranks' means (equal shares).
      double value = loss.item() / kWorld;
      pg->all_reduce(&value, 1, DType::Float64, comm::ReduceOp::Sum);
      mine.losses.push_back(value);
    }
    mine.recomputes = ops::checkpoint_recompute_count() - before;
    if (pg->rank() == 0) {
      std::lock_guard lock(mu);
      got = mine;
    }
  });
  TS_TEST(got.recomputes == kSteps * kLayers);
  TS_REQUIRE(got.losses.size() == want.losses.size());
  for (std::size_t i = 0; i < got.losses.size(); ++i)
    TS_TEST(got.losses[i] == want.losses[i], boost::test_tools::tolerance(1e-5));
}

// Upstream's order: FSDP first (auto-wrapping the blocks), then apply_activation_checkpointing
// wraps the blocks inside their units: FSDP(CheckpointWrapper(block)). Selective, too.
BOOST_AUTO_TEST_CASE(checkpointing_applied_after_fsdp_wraps_the_blocks_inside_their_units) {
  const Trained want = train_plain();
  for (const std::string mode : {"full", "selective"}) {
    Trained got;
    std::mutex mu;
    comm::run_ranks(kWorld, [&](std::shared_ptr<comm::ProcessGroup> pg) {
      auto model = ops_test::transformer_stack(kLayers, DType::Float32, 0.0, 3);
      WrapperOptions w;
      w.process_group = pg;
      w.auto_wrap_policy = policies::AutoWrapPolicy(
          policies::ModuleWrapPolicy::make(nn::ClassSet{"TransformerEncoderLayer"}));
      auto root = FullyShardedDataParallel::make(model, w);
      ops::checkpoint_activations(root, mode, nn::ClassSet{"TransformerEncoderLayer"});
      std::vector<std::string> wrapped;
      for (const auto& [name, m] : root->named_modules())
        if (m->type_name() == "CheckpointWrapper") wrapped.push_back(name);
      TS_TEST(wrapped == (std::vector<std::string>{"_fsdp_wrapped_module.0._fsdp_wrapped_module",
                                                   "_fsdp_wrapped_module.1._fsdp_wrapped_module"}));
      optim::SGD opt(root->parameters(), optim::SGDOptions{.lr = 0.1});
      Trained mine;
      const auto before = ops::checkpoint_recompute_count();
      for (int step = 0; step < kSteps; ++step) {
        opt.zero_grad();
        Tensor local = global_batch(step).narrow(0, pg->rank() * kRowsPerRank, kRowsPerRank);
        Tensor loss = mean_square((*root)(local.contiguous()).tensor());
        loss.backward();
        opt.step();
        double value = loss.item() / kWorld;
        pg->all_reduce(&value, 1, DType::Float64, comm::ReduceOp::Sum);
        mine.losses.push_back(value);
      }
      mine.recomputes = ops::checkpoint_recompute_count() - before;
      if (pg->rank() == 0) {
        std::lock_guard lock(mu);
        got = mine;
      }
    });
    BOOST_TEST_CONTEXT("mode " << mode) {
      TS_TEST(got.recomputes == kSteps * kLayers);
      TS_REQUIRE(got.losses.size() == want.losses.size());
      for (std::size_t i = 0; i < got.losses.size(); ++i)
        TS_TEST(got.losses[i] == want.losses[i], boost::test_tools::tolerance(1e-5));
    }
  }
}
