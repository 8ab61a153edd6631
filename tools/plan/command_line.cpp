#include "tools/plan/command_line.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <charconv>

#include "core/suggest.h"
#include "policies/sharding_strategy_names.h"
#include "tools/plan/model_file.h"

namespace fsdp::plan {

namespace {

// A rank count: an integer from 1 to kMaxWorldSize (ranks are ints), said in one line.
CLI::Validator rank_count() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        std::int64_t v = 0;
        const char* end = s.data() + s.size();
        auto [p, ec] = std::from_chars(s.data(), end, v);
        if (ec == std::errc() && p == end && v >= 1 && v <= kMaxWorldSize) return "";
        return fmt::format("expected an integer from 1 to {}, got '{}'", kMaxWorldSize, s);
      },
      "INT in [1, 2147483647]");
}

// --sharding's value; a typo gets the close names.
ShardingStrategy parse_strategy(const std::string& s) {
  if (auto v = policies::find_strategy(s)) return *v;
  throw InputError("--sharding: " + policies::unknown_strategy_message(
                                        s, did_you_mean(s, policies::strategy_names())));
}

}  // namespace

// Upstream's messages can span lines (the frozen-parameter ValueError lists FQNs).
std::string one_line(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n') {
      if (!out.empty() && out.back() != ' ') out += ' ';
      continue;
    }
    out += s[i];
  }
  return out;
}

CommandLine parse_command_line(int argc, const char* const* argv) {
  CLI::App app{
      "fsdp-plan: FSDP units, per-rank memory and communication for a model file or a "
      "Hugging Face config.json",
      "fsdp-plan"};
  CommandLine cl;
  PlanOptions& opts = cl.opts;
  app.add_option("MODEL", cl.model_path,
                 "model file (format fsdp-model/1), or a Hugging Face config.json (GPT-2, Llama, "
                 "Mistral, Qwen2, Qwen3, Gemma 2 and 3) or the directory holding it, built on meta "
                 "in float32")
      ->required();
  app.add_option("--policy", cl.policy,
                 "auto-wrap policy: always | size(min_num_params=N[, force_leaf=[..]]"
                 "[, exclude_wrap=[..]]) | transformer([..]) | individually([..]) | "
                 "modules([..]) | or(EXPR, ...) | none (only the root unit); absent: none for a "
                 "model file, transformer([<decoder block class>]) for a config.json (one unit "
                 "per GPT2Block or LlamaDecoderLayer, as finetune wraps it)");
  app.add_option("--ignore", cl.ignore,
                 "ignore the module at this FQN and its subtree (repeatable)")
      ->take_last()
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_flag("--mixed-precision", opts.mixed_precision,
               "MixedPrecision(param_dtype=reduce_dtype=bfloat16): BatchNorm modules become "
               "their own units in full precision");
  app.add_flag("--use-orig-params", opts.use_orig_params,
               "use_orig_params=True (the frozen-parameter error becomes a warning)");
  app.add_option("--world-size", opts.world_size, "number of ranks (default 1)")
      ->check(rank_count());
  app.add_option("--sharding", cl.sharding,
                 "FULL_SHARD (default), SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD or "
                 "_HYBRID_SHARD_ZERO2");
  auto* node_size =
      app.add_option("--node-size", opts.node_size,
                     "ranks per node, over which HYBRID_SHARD (and _ZERO2) shards (default 8; "
                     "it must divide the world size)")
          ->check(rank_count());
  app.add_option("--batch", opts.batch,
                 "sequences per rank per step: with --seq, estimate the activations and the "
                 "peak with them")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
  app.add_option("--seq", opts.seq, "tokens per sequence (with --batch)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
  app.add_option("--format", cl.format, "table (default), json or dot")
      ->check(CLI::IsMember({"table", "json", "dot"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    cl.help = app.help();
    return cl;
  } catch (const CLI::ParseError& e) {
    throw UsageError(one_line(e.what()) + " (see fsdp-plan --help)");
  }
  cl.node_size_given = node_size->count() > 0;
  return cl;
}

PlanOptions plan_options(const CommandLine& cl) {
  PlanOptions opts = cl.opts;
  opts.sharding = parse_strategy(cl.sharding);
  if (cl.node_size_given && fsdp::policies::is_hybrid(opts.sharding) &&
      opts.world_size % opts.node_size != 0)
    throw InputError(
        fmt::format("--node-size {} does not divide --world-size {}: {} shards within whole nodes",
                    opts.node_size, opts.world_size, cl.sharding));
  opts.ignore = cl.ignore;
  // "none" is the JSON output's name for no policy; a config.json's default is set by main.
  if (!cl.policy.empty() && cl.policy != "none") opts.policy = policies::parse_policy(cl.policy);
  return opts;
}

}  // namespace fsdp::plan
