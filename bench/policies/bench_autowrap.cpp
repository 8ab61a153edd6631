// Auto-wrap speed on meta-device models, against PyTorch's _recursive_wrap in the same run.
//  (a) 4000 transformer-like blocks (ModuleDict of four Linear(64,64), Sequential(Linear(64,256),
//      GELU, Linear(256,64)), two LayerNorm(64)) between Embedding(1000,64) and Linear(64,1000),
//      with size_based(min_num_params=20000) and transformer({Block});
//  (b) chains of nested Sequentials (one Linear(4,4) per level), depth 1600 and 100000, with
//      size_based(min_num_params=1e9): PyTorch recounts every subtree (quadratic); we are linear.
// Prints microseconds per module (--json FILE: also as JSON). With a python that imports torch
// (bench/common/torch_python.h: /opt/torch2 first) and without --no-torch, runs
// bench_torch_autowrap.py on the same models and prints the ratios and the torch version.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/common/cli.h"
#include "bench/common/report.h"
#include "bench/common/timing.h"
#include "bench/common/torch_python.h"
#include "bench/policies/bench_models.h"
#include "core/nn/nn.h"
#include "core/traversal/wrapper_marker.h"
#include "policies/auto_wrap.h"
#include "policies/size_based.h"
#include "policies/transformer_policy.h"

#ifndef FSDP_BENCH_DIR
#define FSDP_BENCH_DIR "."
#endif

using namespace fsdp;
using nn::ModulePtr;

namespace {

using bench::blocks_model;
using bench::kMetaF32;
// PyTorch recounts every subtree of a chain (quadratic): deeper chains than this take it minutes.
constexpr std::int64_t kTorchMaxChain = 1600;

// The cheapest wrapper: holds the module, marked as a wrapper (what the planner records).
class BenchWrapper : public nn::Module {
 public:
  FSDP_MODULE_CLASS(BenchWrapper, nn::Module)
  explicit BenchWrapper(ModulePtr m) : nn::Module(static_class()) {
    register_module("module", std::move(m));
    traversal::mark_as_wrapper(*this, "BenchWrapper");
  }
};

ModulePtr chain(std::int64_t depth) {
  std::shared_ptr<nn::Sequential> level;
  for (std::int64_t i = 0; i < depth; ++i) {
    auto s = std::make_shared<nn::Sequential>();
    s->append(std::make_shared<nn::Linear>(4, 4, true, kMetaF32));
    if (level) s->append(level);
    level = s;
  }
  return level;
}

struct Result {
  double us_per_module;
  std::size_t modules;
  int wrapped;
};

// Best of `repeats` runs, each on a freshly built model (wrapping changes it).
Result time_case(const std::function<ModulePtr()>& build, const policies::AutoWrapPolicy& policy,
                 int repeats) {
  Result best{1e300, 0, 0};
  for (int r = 0; r < repeats; ++r) {
    ModulePtr model = build();
    std::size_t n = model->modules().size();
    int wrapped = 0;
    policies::WrapperFn wrap_fn = [&](ModulePtr m, const policies::WrapperOptions&) -> ModulePtr {
      ++wrapped;
      return std::make_shared<BenchWrapper>(std::move(m));
    };
    const double t0 = bench::wall_now_ms();
    policies::auto_wrap(model, policy, {}, {}, {}, wrap_fn);
    const double us = (bench::wall_now_ms() - t0) * 1e3 / static_cast<double>(n);
    if (us < best.us_per_module) best = {us, n, wrapped};
  }
  return best;
}

// PyTorch's _recursive_wrap on the same models (bench_torch_autowrap.py): microseconds per module
// per case, and "torch_version"/"python" in `info`.
std::map<std::string, double> run_torch(const std::string& json_out, int blocks,
                                        const std::string& chains, int repeats,
                                        nlohmann::json& info) {
  std::map<std::string, double> out;
  const auto found = bench::find_torch_python(bench::default_torch_pythons());
  bench::warn_unless_preferred(found, bench::default_torch_pythons().front());
  if (found.python.empty()) return out;
  const std::string cmd =
      fmt::format("{} " FSDP_BENCH_DIR
                  "/bench_torch_autowrap.py --blocks {} --chains '{}' --iters {} "
                  "--json {} >/dev/null",
                  found.python, blocks, chains, repeats, json_out);
  if (std::system(cmd.c_str()) != 0) return out;
  std::ifstream in(json_out);
  nlohmann::json j;
  in >> j;
  for (auto& [k, v] : j.items())
    if (v.is_number()) out[k] = v.get<double>();
  info = {{"version", found.version}, {"python", found.python}};
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Cli cli("bench_autowrap", "auto-wrap speed on meta-device models, against PyTorch's");
  CLI::App& app = cli.app();
  // Best of this many runs on the block models, here and in bench_torch_autowrap.py: our time is
  // bound by memory latency, which a busy host disturbs more than PyTorch's interpreter.
  int repeats = 7, blocks = 4000;
  std::vector<std::int64_t> depths{400, 800, 1600, 100000};
  bool no_torch = false;
  cli.add_iters(repeats, "runs on each block model (best of); chains run 3 times");
  app.add_option("--blocks", blocks, "blocks of the block models")
      ->check(bench::at_least(1))
      ->capture_default_str();
  app.add_option("--chains", depths, "depths of the nested-Sequential chains")
      ->delimiter(',')
      ->check(bench::at_least(1))
      ->capture_default_str();
  app.add_flag("--no-torch", no_torch, "skip the PyTorch baseline");
  if (const int rc = cli.parse(argc, argv); rc >= 0) return rc;
  return bench::run_main(cli.program(), [&] {
    std::map<std::string, Result> ours;
    ours["blocks_size_based"] = time_case([&] { return blocks_model(blocks); },
                                          policies::size_based_auto_wrap_policy(20000), repeats);
    ours["blocks_transformer"] =
        time_case([&] { return blocks_model(blocks); },
                  policies::transformer_auto_wrap_policy(nn::ClassSet{"Block"}), repeats);
    std::string torch_chains;
    for (std::int64_t depth : depths) {
      ours["chain_" + std::to_string(depth)] =
          time_case([depth] { return chain(depth); },
                    policies::size_based_auto_wrap_policy(1'000'000'000), 3);
      if (depth <= kTorchMaxChain)
        torch_chains += (torch_chains.empty() ? "" : ",") + std::to_string(depth);
    }

    std::map<std::string, double> torch;
    nlohmann::json torch_info;
    if (!no_torch) {
      const auto torch_json = std::filesystem::temp_directory_path() /
                              fmt::format("bench_autowrap.{}.torch.json", ::getpid());
      torch = run_torch(torch_json.string(), blocks, torch_chains, repeats, torch_info);
      std::filesystem::remove(torch_json);
    }
    if (!torch.empty())
      std::printf("PyTorch baseline: torch %s (%s)\n",
                  torch_info["version"].get<std::string>().c_str(),
                  torch_info["python"].get<std::string>().c_str());

    std::printf("%-22s %9s %8s %14s %14s %10s\n", "case", "modules", "wrapped", "ours us/module",
                "torch us/mod", "speedup");
    bench::Report report(cli);
    for (const auto& [name, r] : ours) {
      auto it = torch.find(name);
      double t = it == torch.end() ? 0.0 : it->second;
      if (t > 0)
        std::printf("%-22s %9zu %8d %14.4f %14.3f %9.0fx\n", name.c_str(), r.modules, r.wrapped,
                    r.us_per_module, t, t / r.us_per_module);
      else
        std::printf("%-22s %9zu %8d %14.4f %14s %10s\n", name.c_str(), r.modules, r.wrapped,
                    r.us_per_module, "-", "-");
      nlohmann::ordered_json row = {{"case", name},
                                    {"modules", r.modules},
                                    {"wrapped", r.wrapped},
                                    {"us_per_module", r.us_per_module}};
      if (t > 0) {
        row["torch_us_per_module"] = t;
        report.ratio(name + "_speedup_vs_torch", t / r.us_per_module);
      }
      report.row(row);
    }
    // Linear vs quadratic: per-module cost stays flat while the tree fits in the cache; the
    // 100 000-deep chain (200 000 modules, about 200 MB of objects) adds main-memory latency.
    auto scaling = [](const std::map<std::string, Result>& m, std::int64_t deep,
                      std::int64_t shallow) -> double {
      const auto d = m.find(fmt::format("chain_{}", deep)),
                 s = m.find(fmt::format("chain_{}", shallow));
      return d == m.end() || s == m.end() ? 0.0 : d->second.us_per_module / s->second.us_per_module;
    };
    if (const double r = scaling(ours, 1600, 400); r > 0) {
      std::printf("depth 1600 vs 400, us/module ratio: %.2f (1.0 = linear, 4.0 = quadratic)\n", r);
      report.ratio("chain_1600_vs_400_us_per_module", r);
    }
    if (const double r = scaling(ours, 100000, 1600); r > 0) {
      std::printf("depth 100000 vs 1600, us/module ratio: %.2f (out of cache)\n", r);
      report.ratio("chain_100000_vs_1600_us_per_module", r);
    }
    if (torch.count("chain_1600") && torch.count("chain_400")) {
      std::printf("torch depth 1600 vs 400, us/module ratio: %.2f (4.0 = quadratic)\n",
                  torch["chain_1600"] / torch["chain_400"]);
      report.ratio("torch_chain_1600_vs_400_us_per_module",
                   torch["chain_1600"] / torch["chain_400"]);
    }
    if (!torch.empty()) report["torch"] = torch_info;
    report.write();
    return 0;
  });
}
