// train_gpt's resumable checkpoints: N steps in one run equal k steps + save + resume + (N - k)
// steps bit-identically (every strategy, SGD and AdamW, use_orig_params or not, on thread ranks),
// and a resume at another world size and strategy (the same global batch) gives the same losses
// within 1e-5.
#define BOOST_TEST_MODULE fsdp_checkpoint_train_gpt
#pragma GCC diagnostic ignored "-Wrestrict"  // GCC 12 on Boost's data-test-case names
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>

#include "comm/threads/run_ranks.h"
#include "examples/gpt_train.h"
#include "fsdp/checkpoint.h"
#include "tests/support/thread_safe_test.h"

using namespace fsdp;
using examples::GPTTrainConfig;
using policies::ShardingStrategy;
namespace bdata = boost::unit_test::data;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kGlobalBatch = 4;

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/fsdp_resume_XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

GPTTrainConfig config(ShardingStrategy s, int world, const std::string& optimizer, int steps) {
  static const auto data = [] {
    std::string text;
    for (int i = 0; text.size() < 4000; ++i)
      text += "line " + std::to_string(i * 7919 % 1000) + ": the quick brown fox.\n";
    return std::make_shared<const std::string>(text);
  }();
  GPTTrainConfig c;
  c.model = examples::GPTConfig{.layers = 2, .d_model = 16, .heads = 2, .seq = 8, .vocab = 256};
  c.batch = kGlobalBatch / world;
  c.steps = steps;
  c.lr = optimizer == "sgd" ? 0.05 : 3e-3;
  c.optimizer = optimizer;
  c.seed = 3;
  c.data = data;
  c.sharding = s;
  c.node_size = policies::is_hybrid(s) ? std::max(1, world / 2) : 0;
  return c;
}

// Runs `c` on `world` thread ranks; rank 0's losses.
std::vector<double> run(const GPTTrainConfig& c, int world) {
  std::vector<double> losses;
  std::mutex mu;
  comm::run_ranks(world, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto r = examples::train_gpt(c, pg);
    std::lock_guard<std::mutex> lock(mu);
    if (pg->rank() == 0) losses = r.losses;
  });
  return losses;
}

const std::vector<ShardingStrategy> kStrategies = {
    ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP, ShardingStrategy::NO_SHARD,
    ShardingStrategy::HYBRID_SHARD, ShardingStrategy::_HYBRID_SHARD_ZERO2};

}  // namespace

BOOST_DATA_TEST_CASE(resume_is_bit_identical,
                     bdata::make(kStrategies) * bdata::make({"sgd", "adamw"}) *
                         bdata::make({1, 2, 4}) * bdata::make({false, true}),
                     strategy, optimizer, world, orig) {
  TempDir dir;
  GPTTrainConfig all = config(strategy, world, optimizer, 6);
  all.use_orig_params = orig;
  const auto straight = run(all, world);
  GPTTrainConfig first = config(strategy, world, optimizer, 3);
  first.use_orig_params = orig;
  first.checkpoint_dir = dir.path.string();
  first.save_every = 2;  // checkpoints after steps 2 and 3
  const auto head = run(first, world);
  TS_TEST(fs::exists(dir.path / "step-00000002" / "index.json"));
  TS_TEST(latest_checkpoint(dir.path.string()).value() == (dir.path / "step-00000003").string());
  GPTTrainConfig second = config(strategy, world, optimizer, 6);
  second.use_orig_params = orig;
  second.resume_dir = dir.path.string();
  const auto tail = run(second, world);
  std::vector<double> losses = head;
  losses.insert(losses.end(), tail.begin(), tail.end());
  TS_REQUIRE_EQUAL(losses.size(), 6u);
  TS_TEST(losses == straight, boost::test_tools::per_element());
}

BOOST_DATA_TEST_CASE(resume_at_another_world_size,
                     bdata::make({1, 2, 4}) * bdata::make({1, 2, 4}) *
                         bdata::make({"sgd", "adamw"}),
                     save_world, load_world, optimizer) {
  TempDir dir;
  const auto straight =
      run(config(ShardingStrategy::FULL_SHARD, save_world, optimizer, 5), save_world);
  GPTTrainConfig first = config(ShardingStrategy::FULL_SHARD, save_world, optimizer, 2);
  first.checkpoint_dir = dir.path.string();
  first.keep = 1;
  run(first, save_world);
  GPTTrainConfig second = config(ShardingStrategy::SHARD_GRAD_OP, load_world, optimizer, 5);
  second.use_orig_params = true;
  second.resume_dir = dir.path.string();
  second.allow_changes = {"world-size"};  // the same global batch on other ranks
  const auto tail = run(second, load_world);
  TS_REQUIRE_EQUAL(tail.size(), 3u);
  for (std::size_t i = 0; i < tail.size(); ++i)
    TS_TEST(tail[i] == straight[2 + i], boost::test_tools::tolerance(1e-5));
}

BOOST_AUTO_TEST_CASE(activation_checkpointed_blocks_save_clean_names) {
  TempDir dir;
  GPTTrainConfig all = config(ShardingStrategy::FULL_SHARD, 2, "adamw", 4);
  all.checkpoint_activations = "full";
  const auto straight = run(all, 2);
  GPTTrainConfig first = all;
  first.steps = 2;
  first.checkpoint_dir = dir.path.string();
  auto losses = run(first, 2);
  std::ifstream in(dir.path / "step-00000002" / "index.json");
  const std::string index((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TS_TEST(index.find("\"blocks.1.linear2.weight\"") != std::string::npos);
  TS_TEST(index.find("_checkpoint_wrapped_module") == std::string::npos);
  TS_TEST(index.find("_fsdp_wrapped_module") == std::string::npos);
  GPTTrainConfig second = all;
  second.resume_dir = dir.path.string();
  const auto tail = run(second, 2);
  losses.insert(losses.end(), tail.begin(), tail.end());
  TS_TEST(losses == straight, boost::test_tools::per_element());
}
