// train_gpt's job guards (issue 22, parts 3 and 4), on thread ranks: ranks given different
// arguments all stop before training, each naming the argument and every rank's value; a NaN or
// infinite loss stops the job at its step, before the optimizer step and before any save.
#define BOOST_TEST_MODULE examples_gpt_guards
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "comm/agreement.h"
#include "comm/threads/run_ranks.h"
#include "core/io/checksum.h"
#include "examples/gpt_train.h"

using namespace fsdp;
using examples::GPTTrainConfig;

namespace {

std::shared_ptr<const std::string> text(std::size_t n, char first) {
  std::string s(n, ' ');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>(first + i * 7 % 26);
  return std::make_shared<const std::string>(std::move(s));
}

GPTTrainConfig tiny() {
  GPTTrainConfig c;
  c.model = examples::GPTConfig{.layers = 1, .d_model = 8, .heads = 2, .seq = 8, .vocab = 256};
  c.batch = 2;
  c.steps = 3;
  c.data = text(512, 'a');
  return c;
}

// Runs train_gpt on `world` thread ranks, rank r with config_of(r); each rank's error message
// ("" where it finished), with `is_expected` checked on each error's type.
std::vector<std::string> run_ranks(int world, const std::function<GPTTrainConfig(int)>& config_of,
                                   const std::function<bool(const std::exception&)>& is_expected) {
  std::vector<std::string> out(static_cast<std::size_t>(world));
  std::mutex m;
  comm::run_ranks(world, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    try {
      examples::train_gpt(config_of(pg->rank()), pg);
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(m);
      BOOST_TEST(is_expected(e), "unexpected error type: " << e.what());
      out[static_cast<std::size_t>(pg->rank())] = e.what();
    }
  });
  return out;
}

bool disagreement(const std::exception& e) {
  return dynamic_cast<const comm::RanksDisagreeError*>(&e) != nullptr;
}

bool runtime_error(const std::exception& e) {
  return dynamic_cast<const RuntimeError*>(&e) != nullptr;
}

struct Mismatch {
  const char* what;
  std::function<void(GPTTrainConfig&)> on_rank_1;
  std::string message;
};

}  // namespace

// Each argument alone, given another value on rank 1: both ranks stop with the same message.
BOOST_AUTO_TEST_CASE(ranks_disagreeing_on_an_argument_all_stop_naming_it) {
  const std::vector<Mismatch> cases = {
      {"lr", [](GPTTrainConfig& c) { c.lr = 0.5; },
       "ranks disagree on --lr: rank 0 has 0.001, rank 1 has 0.5"},
      {"seed", [](GPTTrainConfig& c) { c.seed = 7; },
       "ranks disagree on --seed: rank 0 has 0, rank 1 has 7"},
      {"batch", [](GPTTrainConfig& c) { c.batch = 3; },
       "ranks disagree on --batch: rank 0 has 2, rank 1 has 3"},
      {"optimizer", [](GPTTrainConfig& c) { c.optimizer = "sgd"; },
       "ranks disagree on --optimizer: rank 0 has adamw, rank 1 has sgd"},
      {"sharding", [](GPTTrainConfig& c) { c.sharding = policies::ShardingStrategy::NO_SHARD; },
       "ranks disagree on --sharding: rank 0 has FULL_SHARD, rank 1 has NO_SHARD"},
      {"allow-nonfinite", [](GPTTrainConfig& c) { c.allow_nonfinite = true; },
       "ranks disagree on --allow-nonfinite: rank 0 has off, rank 1 has on"},
      {"data", [](GPTTrainConfig& c) { c.data = text(512, 'b'); },
       fmt::format("ranks disagree on --data: rank 0 has 512 bytes, xxh3 {}, rank 1 has "
                   "512 bytes, xxh3 {}",
                   io::xxh3_hex(text(512, 'a')->data(), 512),
                   io::xxh3_hex(text(512, 'b')->data(), 512))},
  };
  for (const auto& c : cases) {
    BOOST_TEST_CONTEXT(c.what) {
      const auto messages = run_ranks(
          2,
          [&](int rank) {
            GPTTrainConfig cfg = tiny();
            if (rank == 1) c.on_rank_1(cfg);
            return cfg;
          },
          disagreement);
      for (const auto& m : messages) BOOST_TEST(m == c.message);
    }
  }
}

// --heads changes no shape, but the model's fingerprint holds the configuration too.
BOOST_AUTO_TEST_CASE(heads_with_the_same_shapes_differ_in_argument_and_fingerprint) {
  const auto messages = run_ranks(
      2,
      [](int rank) {
        GPTTrainConfig cfg = tiny();
        if (rank == 1) cfg.model.heads = 4;
        return cfg;
      },
      disagreement);
  for (const auto& m : messages) {
    BOOST_TEST(
        m.starts_with("ranks disagree on --heads: rank 0 has 2, rank 1 has 4; ranks "
                      "disagree on the model: rank 0 has GPT L1 D8 H2 T8 V256, "));
    BOOST_TEST(m.find(", rank 1 has GPT L1 D8 H4 T8 V256, ") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(ranks_that_agree_train) {
  const auto messages = run_ranks(
      2, [](int) { return tiny(); }, disagreement);
  for (const auto& m : messages) BOOST_TEST(m == "");
}

// A learning rate of 1e300 makes step 1's loss NaN: the job stops there on every rank, names
// the step and the first unit with a non-finite gradient, and writes no checkpoint.
BOOST_AUTO_TEST_CASE(a_nonfinite_loss_stops_the_job_before_saving) {
  const std::string save =
      (std::filesystem::temp_directory_path() / "gpt_guards_nonfinite.safetensors").string();
  std::filesystem::remove(save);
  const std::string expected =
      "step 1: the loss is NaN (first non-finite gradient: the root unit); stopped before the "
      "optimizer step and before saving anything (--allow-nonfinite trains on)";
  for (int world : {1, 2}) {
    BOOST_TEST_CONTEXT("world " << world) {
      const auto messages = run_ranks(
          world,
          [&](int) {
            GPTTrainConfig cfg = tiny();
            cfg.lr = 1e300;
            cfg.save_path = save;
            cfg.checkpoint_dir = save + ".ckpt";
            return cfg;
          },
          runtime_error);
      for (const auto& m : messages) BOOST_TEST(m == expected);
      BOOST_TEST(!std::filesystem::exists(save));
      BOOST_TEST(!std::filesystem::exists(save + ".ckpt/step-00000003"));
    }
  }
  std::filesystem::remove_all(save + ".ckpt");
}

// With allow_nonfinite the job trains to the end on NaN losses (as asked) and saves.
BOOST_AUTO_TEST_CASE(allow_nonfinite_trains_on) {
  const std::string save =
      (std::filesystem::temp_directory_path() / "gpt_guards_allowed.safetensors").string();
  std::filesystem::remove(save);
  std::vector<double> losses;
  comm::run_ranks(1, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    GPTTrainConfig cfg = tiny();
    cfg.lr = 1e300;
    cfg.save_path = save;
    cfg.allow_nonfinite = true;
    losses = examples::train_gpt(cfg, pg).losses;
  });
  BOOST_TEST(losses.size() == 3u);
  BOOST_TEST(std::isfinite(losses[0]));
  BOOST_TEST(std::isnan(losses[1]));
  BOOST_TEST(std::filesystem::exists(save));
  std::filesystem::remove(save);
}
