// fsdp-plan: shows which FSDP units a model gets under an auto-wrap policy, what each rank holds
// and what a training step communicates, for a model described in an fsdp-model/1 file
// (tools/README.md). Errors: one line on stderr, nothing on stdout, exit status 1 (2 for usage).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iostream>
#include <string>

#include "core/env.h"
#include "core/error.h"
#include "tools/plan/format.h"
#include "tools/plan/model_file.h"
#include "tools/plan/planner.h"

namespace {

// Upstream's messages can span lines (the frozen-parameter ValueError lists FQNs); the
// planner's error contract is one line, so lines are joined with "; " ... keeping every word.
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

// A rank count: an integer from 1 to kMaxWorldSize (ranks are ints), said in one line.
CLI::Validator rank_count() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        std::int64_t v = 0;
        const char* end = s.data() + s.size();
        auto [p, ec] = std::from_chars(s.data(), end, v);
        if (ec == std::errc() && p == end && v >= 1 && v <= fsdp::plan::kMaxWorldSize) return "";
        return fmt::format("expected an integer from 1 to {}, got '{}'", fsdp::plan::kMaxWorldSize,
                           s);
      },
      "INT in [1, 2147483647]");
}

int fail(const std::string& msg) {
  std::cerr << "fsdp-plan: error: " << one_line(msg) << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fsdp::plan;
  CLI::App app{"fsdp-plan: FSDP units, per-rank memory and communication for a model file",
               "fsdp-plan"};
  std::string model_path, policy, sharding = "FULL_SHARD", format = "table";
  std::vector<std::string> ignore;
  PlanOptions opts;
  app.add_option("MODEL.json", model_path, "model file (format fsdp-model/1)")->required();
  app.add_option("--policy", policy,
                 "auto-wrap policy: always | size(min_num_params=N[, force_leaf=[..]]"
                 "[, exclude_wrap=[..]]) | transformer([..]) | individually([..]) | "
                 "modules([..]) | or(EXPR, ...); absent: only the root unit");
  app.add_option("--ignore", ignore, "ignore the module at this FQN and its subtree (repeatable)")
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
  app.add_option("--sharding", sharding,
                 "FULL_SHARD (default), SHARD_GRAD_OP, NO_SHARD, "
                 "HYBRID_SHARD");
  auto* node_size = app.add_option("--node-size", opts.node_size,
                                   "ranks per node, over which HYBRID_SHARD shards (default 8; "
                                   "it must divide the world size)")
                        ->check(rank_count());
  app.add_option("--batch", opts.batch,
                 "sequences per rank per step: with --seq, estimate the activations and the "
                 "peak with them")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
  app.add_option("--seq", opts.seq, "tokens per sequence (with --batch)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
  app.add_option("--format", format, "table (default), json or dot")
      ->check(CLI::IsMember({"table", "json", "dot"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "fsdp-plan: error: " << one_line(e.what()) << " (see fsdp-plan --help)\n";
    return 2;
  }
  try {
    opts.sharding = parse_strategy(sharding);
    if (node_size->count() > 0 && fsdp::policies::is_hybrid(opts.sharding) &&
        opts.world_size % opts.node_size != 0)
      throw InputError(
          fmt::format("--node-size {} does not divide --world-size {}: {} shards "
                      "within whole nodes",
                      opts.node_size, opts.world_size, sharding));
    opts.ignore = ignore;
    if (!policy.empty()) opts.policy = parse_policy(policy);
    // FSDP_PLAN_TIMING=1 prints the time of each phase on stderr.
    const bool timing = fsdp::env::enabled("FSDP_PLAN_TIMING");
    auto t0 = std::chrono::steady_clock::now();
    std::clock_t c0 = std::clock();
    auto lap = [&](const char* what) {
      if (!timing) return;
      auto t1 = std::chrono::steady_clock::now();
      std::cerr << "fsdp-plan: " << what << ": " << std::chrono::duration<double>(t1 - t0).count()
                << " s (cpu " << double(std::clock() - c0) / CLOCKS_PER_SEC << " s)\n";
      c0 = std::clock();
      t0 = t1;
    };
    LoadedModel model = load_model(model_path);
    lap("load");
    Plan plan = make_plan(model.root, opts);
    lap("plan");
    // JSON is written as it is made (it can be far larger than the plan); the others at once.
    errno = 0;
    bool written = true;
    std::string out;
    if (format == "json")
      written = write_json(plan, stdout);
    else
      out = format == "dot" ? format_dot(plan) : format_table(plan);
    lap("format");
    if (format == "table")
      for (const auto& w : plan.warnings) std::cerr << "fsdp-plan: warning: " << w << "\n";
    written = written && std::fwrite(out.data(), 1, out.size(), stdout) == out.size() &&
              std::fflush(stdout) == 0 && !std::ferror(stdout);
    if (!written) {
      const int err = errno;
      std::cerr << "fsdp-plan: error: writing the " << format
                << " output to standard output: " << (err ? std::strerror(err) : "write failed")
                << "\n";
    }
    // Freeing a million-module tree costs as much as building it; the process ends here.
    std::cerr.flush();
    std::_Exit(written ? 0 : 1);
  } catch (const InputError& e) {
    return fail(e.what());
  } catch (const fsdp::Error& e) {
    return fail(e.what());
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  return 0;
}
