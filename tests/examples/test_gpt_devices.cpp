// train_gpt's --device: the GPT trained on the fake_cuda test device (every kernel queued on the
// device's streams, memory reachable only through copies) gives the CPU run's per-step losses
// bit for bit, unsharded and under FSDP at 1, 2 and 4 thread ranks with every strategy, and its
// run under the stream sanitizer reports nothing.
#define BOOST_TEST_MODULE examples_gpt_devices
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <memory>
#include <string>
#include <vector>

#include "comm/threads/run_ranks.h"
#include "core/stream_sanitizer_mode.h"
#include "examples/gpt_train.h"
#include "tests/examples/gpt_reference.h"

using namespace fsdp;
using examples::GPTTrainConfig;

namespace {

const Device kFakeCuda(DeviceType::FakeCUDA);

GPTTrainConfig small(Device device) {
  GPTTrainConfig cfg = testing::gpt_reference().base;
  cfg.model = examples::GPTConfig{.layers = 2, .d_model = 32, .heads = 4, .seq = 16, .vocab = 256};
  cfg.load_path.clear();  // the fixture's weights are for its own model
  cfg.steps = 3;
  cfg.batch = 4;
  cfg.sharding.reset();  // the unsharded model: FSDP on devices comes with its stream protocol
  cfg.device = device;
  return cfg;
}

std::vector<double> losses(const GPTTrainConfig& cfg, int ranks = 1) {
  std::vector<double> out;
  comm::run_ranks(ranks, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto r = examples::train_gpt(cfg, pg).losses;
    if (pg->rank() == 0) out = r;
  });
  return out;
}

using policies::ShardingStrategy;

}  // namespace

BOOST_AUTO_TEST_CASE(the_unsharded_gpt_on_fake_cuda_gives_the_cpu_losses_bit_for_bit) {
  const auto cpu = losses(small(kCPU));
  const auto fake = losses(small(kFakeCuda));
  BOOST_TEST_REQUIRE(cpu.size() == 3u);
  BOOST_TEST(fake == cpu);
}

BOOST_AUTO_TEST_CASE(the_gpt_on_fake_cuda_is_clean_under_the_stream_sanitizer) {
  stream_sanitizer::clear_reports();
  comm::run_ranks(1, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    dispatch::ModeGuard mode(std::make_shared<stream_sanitizer::StreamSanitizerMode>());
    examples::train_gpt(small(kFakeCuda), pg);
  });
  std::vector<std::string> got;
  for (const auto& r : stream_sanitizer::reports()) got.push_back(r.message);
  BOOST_TEST(got.empty(), (got.empty() ? std::string() : got.front()));
}

BOOST_DATA_TEST_CASE(
    fsdp_on_fake_cuda_gives_the_cpu_losses_bit_for_bit,
    boost::unit_test::data::make({1, 2, 4}) *
        boost::unit_test::data::make({ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP,
                                      ShardingStrategy::NO_SHARD, ShardingStrategy::HYBRID_SHARD,
                                      ShardingStrategy::_HYBRID_SHARD_ZERO2}),
    ranks, strategy) {
  GPTTrainConfig cpu = small(kCPU), fake = small(kFakeCuda);
  for (auto* cfg : {&cpu, &fake}) {
    cfg->sharding = strategy;
    cfg->batch = 8 / ranks;  // the same global batch
    cfg->node_size = ranks > 1 ? 2 : 1;
  }
  const auto want = losses(cpu, ranks);
  const auto got = losses(fake, ranks);
  BOOST_TEST_REQUIRE(want.size() == 3u);
  BOOST_TEST(got == want);
}
