// Auto-wrap speed on meta-device models, against PyTorch's _recursive_wrap in the same run.
//  (a) 4000 transformer-like blocks (ModuleDict of four Linear(64,64), Sequential(Linear(64,256),
//      GELU, Linear(256,64)), two LayerNorm(64)) between Embedding(1000,64) and Linear(64,1000),
//      with size_based(min_num_params=20000) and transformer({Block});
//  (b) chains of nested Sequentials (one Linear(4,4) per level), depth 1600 and 100000, with
//      size_based(min_num_params=1e9): PyTorch recounts every subtree (quadratic); we are linear.
// Prints microseconds per module and writes JSON (argv[1], default bench_autowrap.json). With a
// python that imports torch (bench/torch_python.h: /opt/torch2 first), runs
// bench_torch_autowrap.py and prints the ratios and the torch version.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "bench/policies/bench_models.h"
#include "bench/torch_python.h"
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
// Best of this many runs on the block models, here and in bench_torch_autowrap.py: our time is
// bound by memory latency, which a busy host disturbs more than PyTorch's interpreter.
constexpr int kBlockRepeats = 7;

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
    auto t0 = std::chrono::steady_clock::now();
    policies::auto_wrap(model, policy, {}, {}, {}, wrap_fn);
    auto t1 = std::chrono::steady_clock::now();
    double us = std::chrono::duration<double, std::micro>(t1 - t0).count() / static_cast<double>(n);
    if (us < best.us_per_module) best = {us, n, wrapped};
  }
  return best;
}

// PyTorch's _recursive_wrap on the same models (bench_torch_autowrap.py): microseconds per module
// per case, and "torch_version"/"python" in `info`.
std::map<std::string, double> run_torch(const std::string& json_out, nlohmann::json& info) {
  std::map<std::string, double> out;
  const auto found = bench::find_torch_python(bench::default_torch_pythons());
  bench::warn_unless_preferred(found, bench::default_torch_pythons().front());
  if (found.python.empty()) return out;
  std::string cmd = found.python + " " FSDP_BENCH_DIR "/bench_torch_autowrap.py --json " +
                    json_out + " >/dev/null";
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
  const std::string json_path = argc > 1 ? argv[1] : "bench_autowrap.json";
  const bool skip_torch = std::getenv("FSDP_BENCH_NO_TORCH") != nullptr;
  std::map<std::string, Result> ours;
  ours["blocks_size_based"] =
      time_case([] { return blocks_model(4000); }, policies::size_based_auto_wrap_policy(20000),
                kBlockRepeats);
  ours["blocks_transformer"] =
      time_case([] { return blocks_model(4000); },
                policies::transformer_auto_wrap_policy(nn::ClassSet{"Block"}), kBlockRepeats);
  for (std::int64_t depth : {400, 800, 1600, 100000})
    ours["chain_" + std::to_string(depth)] = time_case(
        [depth] { return chain(depth); }, policies::size_based_auto_wrap_policy(1'000'000'000), 3);

  std::map<std::string, double> torch;
  nlohmann::json torch_info;
  if (!skip_torch) torch = run_torch(json_path + ".torch.json", torch_info);
  if (!torch.empty())
    std::printf("PyTorch baseline: torch %s (%s)\n",
                torch_info["version"].get<std::string>().c_str(),
                torch_info["python"].get<std::string>().c_str());

  std::printf("%-22s %9s %8s %14s %14s %10s\n", "case", "modules", "wrapped", "ours us/module",
              "torch us/mod", "speedup");
  nlohmann::json j;
  for (const auto& [name, r] : ours) {
    auto it = torch.find(name);
    double t = it == torch.end() ? 0.0 : it->second;
    if (t > 0)
      std::printf("%-22s %9zu %8d %14.4f %14.3f %9.0fx\n", name.c_str(), r.modules, r.wrapped,
                  r.us_per_module, t, t / r.us_per_module);
    else
      std::printf("%-22s %9zu %8d %14.4f %14s %10s\n", name.c_str(), r.modules, r.wrapped,
                  r.us_per_module, "-", "-");
    j[name] = {{"modules", r.modules}, {"wrapped", r.wrapped}, {"us_per_module", r.us_per_module}};
    if (t > 0) j[name]["torch_us_per_module"] = t, j[name]["speedup"] = t / r.us_per_module;
  }
  // Linear vs quadratic: per-module cost stays flat while the tree fits in the cache; the
  // 100 000-deep chain (200 000 modules, about 200 MB of objects) adds main-memory latency.
  std::printf("depth 1600 vs 400, us/module ratio: %.2f (1.0 = linear, 4.0 = quadratic)\n",
              ours["chain_1600"].us_per_module / ours["chain_400"].us_per_module);
  std::printf("depth 100000 vs 1600, us/module ratio: %.2f (out of cache)\n",
              ours["chain_100000"].us_per_module / ours["chain_1600"].us_per_module);
  if (torch.count("chain_1600") && torch.count("chain_400"))
    std::printf("torch depth 1600 vs 400, us/module ratio: %.2f (4.0 = quadratic)\n",
                torch["chain_1600"] / torch["chain_400"]);
  if (!torch.empty()) j["torch"] = torch_info;
  std::ofstream(json_path) << j.dump(2) << "\n";
  return 0;
}
