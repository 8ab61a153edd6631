// The command lines of fsdp-plan, train_lm and train_gpt as functions (tools/plan/command_line.h,
// examples/train_*_options.h; the fuzzers in tests/fuzz call the same): a good command line
// gives its values, a bad one a UsageError with the job's exit status, a bad value the error the
// job prints with status 1.
#define BOOST_TEST_MODULE tools_command_lines
#include <boost/test/unit_test.hpp>
#include <string>
#include <vector>

#include "core/input_error.h"
#include "core/usage_error.h"
#include "examples/finetune_options.h"
#include "examples/train_gpt_options.h"
#include "examples/train_lm_options.h"
#include "tools/plan/command_line.h"

using namespace fsdp;

namespace {

// argv of `args` after a program name.
struct Argv {
  explicit Argv(std::vector<std::string> args) : strings(std::move(args)) {
    strings.insert(strings.begin(), "prog");
    for (const auto& s : strings) ptrs.push_back(s.c_str());
    ptrs.push_back(nullptr);
  }
  int argc() const { return static_cast<int>(strings.size()); }
  const char* const* argv() const { return ptrs.data(); }
  std::vector<std::string> strings;
  std::vector<const char*> ptrs;
};

// The UsageError `fn` throws, as "STATUS: MESSAGE" ("" if none).
template <typename F>
std::string usage_error_of(F fn) {
  try {
    fn();
  } catch (const UsageError& e) {
    return std::to_string(e.exit_code()) + ": " + e.what();
  }
  return "";
}

plan::CommandLine plan_args(std::vector<std::string> args) {
  const Argv a(std::move(args));
  return plan::parse_command_line(a.argc(), a.argv());
}

}  // namespace

BOOST_AUTO_TEST_CASE(fsdp_plan_values_help_and_errors) {
  const auto cl = plan_args({"m.json", "--world-size", "16", "--sharding", "HYBRID_SHARD",
                             "--node-size", "8", "--policy", "always", "--ignore", "1"});
  BOOST_TEST(cl.model_path == "m.json");
  const auto opts = plan::plan_options(cl);
  BOOST_TEST(opts.world_size == 16);
  BOOST_TEST(opts.node_size == 8);
  BOOST_TEST(opts.policy.has_value());
  BOOST_TEST(opts.ignore == std::vector<std::string>{"1"});
  BOOST_TEST(plan_args({"--help"}).help.find("Usage: fsdp-plan") != std::string::npos);
  BOOST_TEST(usage_error_of([] {
               plan_args({"m.json", "--world-size", "0"});
             }) ==
             "2: --world-size: expected an integer from 1 to 2147483647, got '0' "
             "(see fsdp-plan --help)");
  BOOST_TEST(usage_error_of([] { plan_args({}); }) ==
             "2: MODEL is required (see fsdp-plan --help)");
  // "none" is no policy (the JSON output's name for it): a config.json's default is overridden.
  BOOST_TEST(!plan::plan_options(plan_args({"m", "--policy", "none"})).policy.has_value());
  BOOST_TEST(plan::plan_options(plan_args({"m", "--policy", "always"})).policy.has_value());
  BOOST_CHECK_THROW(plan::plan_options(plan_args({"m", "--world-size", "8", "--sharding",
                                                  "HYBRID_SHARD", "--node-size", "3"})),
                    InputError);
  BOOST_CHECK_THROW(plan::plan_options(plan_args({"m", "--policy", "sise()"})), InputError);
  BOOST_CHECK_THROW(plan::plan_options(plan_args({"m", "--sharding", "HALF"})), InputError);
}

BOOST_AUTO_TEST_CASE(train_lm_values_and_errors) {
  const Argv good({"--steps", "7", "--d-model", "8", "--heads", "2", "--text", "a.txt"});
  const auto o = examples::parse_train_lm_options(good.argc(), good.argv());
  BOOST_TEST(o.steps == 7);
  BOOST_TEST(o.model.d_model == 8);
  BOOST_TEST(o.texts == std::vector<std::string>{"a.txt"});
  const Argv zero({"--log-every", "0"});
  BOOST_TEST(usage_error_of([&] { examples::parse_train_lm_options(zero.argc(), zero.argv()); }) ==
             "2: --log-every: expected an integer from 1 to 100000000, got '0' "
             "(see train_lm --help)");
  const Argv shape({"--d-model", "10", "--heads", "3"});
  BOOST_TEST(usage_error_of([&] {
               examples::parse_train_lm_options(shape.argc(), shape.argv());
             }).rfind("2: --d-model 10 is not a multiple of --heads 3", 0) == 0);
}

BOOST_AUTO_TEST_CASE(train_gpt_values_and_errors) {
  const Argv good({"--data", "d.txt", "--steps", "3", "--sharding", "none", "--ranks", "1"});
  auto o = examples::parse_train_gpt_options(good.argc(), good.argv());
  BOOST_TEST(o.cfg.steps == 3);
  examples::check_train_gpt_options(o);
  BOOST_TEST(!o.cfg.sharding.has_value());
  // --data or --synthetic-tokens: one of them, checked with the other combinations.
  const Argv missing({"--steps", "3"});
  auto m = examples::parse_train_gpt_options(missing.argc(), missing.argv());
  BOOST_TEST(usage_error_of([&] { examples::check_train_gpt_options(m); }) ==
             "2: --data is required: the training text (bytes), or with --vocab other than 256 an "
             "llm.c token file; or --synthetic-tokens (see train_gpt --help)");
  const Argv synthetic({"--synthetic-tokens", "--vocab", "50304", "--ranks", "1"});
  auto s = examples::parse_train_gpt_options(synthetic.argc(), synthetic.argv());
  examples::check_train_gpt_options(s);
  BOOST_TEST(s.synthetic_tokens);
  BOOST_TEST(s.cfg.model.vocab == 50304);
  const Argv negative({"--data", "d", "--steps", "-1"});
  BOOST_TEST(usage_error_of(
                 [&] { examples::parse_train_gpt_options(negative.argc(), negative.argv()); }) ==
             "2: --steps: expected an integer from 0 to 100000000, got '-1' "
             "(see train_gpt --help)");
  // Options that parse but cannot run together.
  const Argv unsharded({"--data", "d", "--sharding", "none", "--ranks", "2"});
  auto u = examples::parse_train_gpt_options(unsharded.argc(), unsharded.argv());
  BOOST_TEST(
      usage_error_of([&] {
        examples::check_train_gpt_options(u);
      }).rfind("2: --sharding none runs the unsharded model on one rank, got --ranks 2", 0) == 0);
  BOOST_CHECK_THROW(examples::parse_sharding("HALF_SHARD"), ValueError);
  BOOST_CHECK_THROW(examples::parse_prefetch("early"), ValueError);
  BOOST_CHECK_THROW(examples::parse_mixed_precision("fp8"), ValueError);
}

// --max-shard-size in transformers' units; the defaults: train_gpt's 5GB, finetune's 50GB
// (save_pretrained's).
BOOST_AUTO_TEST_CASE(max_shard_size_units_and_defaults) {
  const std::vector<std::pair<std::string, std::int64_t>> sizes = {{"5GB", 5'000'000'000},
                                                                   {"500MB", 500'000'000},
                                                                   {"2GiB", std::int64_t{1} << 31},
                                                                   {"1.5KB", 1500},
                                                                   {"40000", 40000}};
  for (const auto& [text, bytes] : sizes) {
    const Argv gpt({"--data", "d", "--max-shard-size", text});
    BOOST_TEST(
        examples::parse_train_gpt_options(gpt.argc(), gpt.argv()).cfg.max_shard_bytes == bytes,
        text);
    const Argv ft({"--model-dir", "m", "--data", "d", "--max-shard-size", text});
    BOOST_TEST(examples::parse_finetune_options(ft.argc(), ft.argv()).cfg.max_shard_bytes == bytes,
               text);
  }
  const Argv gpt({"--data", "d"});
  BOOST_TEST(examples::parse_train_gpt_options(gpt.argc(), gpt.argv()).cfg.max_shard_bytes ==
             5'000'000'000);
  const Argv ft({"--model-dir", "m", "--data", "d"});
  BOOST_TEST(examples::parse_finetune_options(ft.argc(), ft.argv()).cfg.max_shard_bytes ==
             50'000'000'000);
  const Argv zero({"--data", "d", "--max-shard-size", "0"});
  BOOST_TEST(usage_error_of([&] { examples::parse_train_gpt_options(zero.argc(), zero.argv()); }) ==
             "2: --max-shard-size: expected a size of at least 1 byte, got '0' "
             "(see train_gpt --help)");
}
