// fsdp-plan: shows which FSDP units a model gets under an auto-wrap policy, what each rank holds
// and what a training step communicates, for a model described in an fsdp-model/1 file or by a
// Hugging Face config.json (tools/README.md). Errors: one line on stderr, nothing on stdout, exit
// status 1 (2 for usage).
#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iostream>
#include <string>

#include "core/env.h"
#include "core/error.h"
#include "policies/policy_expr.h"
#include "tools/plan/command_line.h"
#include "tools/plan/format.h"
#include "tools/plan/plan_input.h"
#include "tools/plan/planner.h"

namespace {

int fail(const std::string& msg) {
  std::cerr << "fsdp-plan: error: " << fsdp::plan::one_line(msg) << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fsdp::plan;
  CommandLine cl;
  try {
    cl = parse_command_line(argc, argv);
  } catch (const fsdp::UsageError& e) {
    std::cerr << "fsdp-plan: error: " << e.what() << "\n";
    return e.exit_code();
  }
  if (!cl.help.empty()) {
    std::cout << cl.help;
    return 0;
  }
  const std::string& format = cl.format;
  try {
    PlanOptions opts = plan_options(cl);
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
    PlanInput input = load_plan_input(cl.model_path);
    if (cl.policy.empty() && !input.default_policy.empty())
      opts.policy = fsdp::policies::parse_policy(input.default_policy);
    lap("load");
    Plan plan = make_plan(input.model.root, opts);
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
  } catch (const fsdp::InputError& e) {
    return fail(e.what());
  } catch (const fsdp::Error& e) {
    return fail(e.what());
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  return 0;
}
