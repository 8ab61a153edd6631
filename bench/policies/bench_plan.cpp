// fsdp-plan end to end (a process: read the model file, auto-wrap, cost, format) against
// PyTorch's `_recursive_wrap` alone on the same model, measured in the same run:
//  (a) the 4000-block model of bench_models.h (48 004 modules), exported to a model file, with
//      transformer({Block}) and size_based(min_num_params=20000); the median wall time of
//      several fsdp-plan runs, and their best and median CPU time, against the best of three of
//      PyTorch's (bench_torch_autowrap.py, with /opt/torch2's current PyTorch when present, else
//      Debian's 1.13); the ratios are against our best wall time and our CPU time;
//  (b) a model of 1 001 103 modules (tests/tools/bench_plan_1m.py's: 100 stages of 715 blocks,
//      87 MB of JSON) under four policies, JSON output, world size 64.
// Usage: bench_plan [--plan FSDP_PLAN] [--iters N] [--blocks N] [--json OUT] [--no-torch]
//                   [--no-1m]
// Prints a table (--json FILE: also as JSON).
#include <fcntl.h>
#include <fmt/format.h>
#include <malloc.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/common/cli.h"
#include "bench/common/report.h"
#include "bench/common/timing.h"
#include "bench/common/torch_python.h"
#include "bench/policies/bench_models.h"
#include "tools/plan/model_export.h"

#ifndef FSDP_BENCH_DIR
#define FSDP_BENCH_DIR "."
#endif
#ifndef FSDP_PLAN_EXE
#define FSDP_PLAN_EXE "fsdp-plan"
#endif

namespace {

struct ProcessTiming {
  double wall = 0;  // seconds
  double cpu = 0;   // user + system seconds
  long max_rss_kb = 0;
};

// Runs argv with stdout and stderr to /dev/null; its wall and CPU time. posix_spawn, not fork:
// a forked child would count this process's pages in its peak RSS until it execs.
ProcessTiming run_process(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  const double t0 = fsdp::bench::wall_now_ms();
  pid_t pid = 0;
  const int err = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) throw std::runtime_error(fmt::format("cannot run {}: {}", args[0], strerror(err)));
  int status = 0;
  rusage ru{};
  wait4(pid, &status, 0, &ru);
  ProcessTiming t;
  t.wall = (fsdp::bench::wall_now_ms() - t0) * 1e-3;
  t.cpu = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
          1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  t.max_rss_kb = ru.ru_maxrss;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error(fmt::format("{} failed (status {})", args[0], status));
  return t;
}

using fsdp::bench::median;

struct Summary {
  double wall_median, wall_min, cpu_median;
  long max_rss_kb;
};

Summary time_plan(const std::vector<std::string>& args, int runs) {
  std::vector<double> wall, cpu;
  long rss = 0;
  for (int r = 0; r < runs; ++r) {
    ProcessTiming t = run_process(args);
    wall.push_back(t.wall);
    cpu.push_back(t.cpu);
    rss = std::max(rss, t.max_rss_kb);
  }
  return {median(wall), *std::min_element(wall.begin(), wall.end()), median(cpu), rss};
}

// PyTorch's _recursive_wrap on the 4000-block model: seconds per case, and the version.
nlohmann::json run_torch(const std::string& json_out, int blocks) {
  const auto found = fsdp::bench::find_torch_python(fsdp::bench::default_torch_pythons());
  fsdp::bench::warn_unless_preferred(found, fsdp::bench::default_torch_pythons().front());
  if (found.python.empty()) return nullptr;
  std::string cmd = fmt::format("{} " FSDP_BENCH_DIR
                                "/bench_torch_autowrap.py --blocks {} --chains '' --iters 3 "
                                "--json {} >/dev/null 2>&1",
                                found.python, blocks, json_out);
  if (std::system(cmd.c_str()) != 0) return nullptr;
  std::ifstream in(json_out);
  nlohmann::json j;
  in >> j;
  j["python"] = found.python;
  return j;
}

// tests/tools/bench_plan_1m.py's model, written without Python: 3 + stages * (1 + 14 * blocks)
// modules.
void write_1m_model(const std::string& path, int stages, int per_stage) {
  const int d = 32;
  auto linear = [](int i, int o) {
    return fmt::format(R"({{"type":"Linear","params":[{{"name":"weight","shape":[{},{}]}},)"
                       R"({{"name":"bias","shape":[{}]}}]}})",
                       o, i, o);
  };
  const std::string norm =
      fmt::format(R"({{"type":"LayerNorm","params":[{{"name":"weight","shape":[{}]}},)"
                  R"({{"name":"bias","shape":[{}]}}]}})",
                  d, d);
  auto child = [](const std::string& name, const std::string& m) {
    return fmt::format(R"({{"name":"{}","module":{}}})", name, m);
  };
  const std::string drop = R"({"type":"Dropout"})";
  std::string attn = R"({"type":"Attention","children":[)";
  for (const char* n : {"q", "k", "v", "o"}) attn += child(n, linear(d, d)) + ",";
  attn += child("drop", drop) + "]}";
  const std::string mlp = R"({"type":"MLP","children":[)" + child("fc1", linear(d, 4 * d)) + "," +
                          child("act", R"({"type":"GELU"})") + "," +
                          child("fc2", linear(4 * d, d)) + "," + child("drop", drop) + "]}";
  const std::string block = R"({"type":"Block","children":[)" + child("ln1", norm) + "," +
                            child("attn", attn) + "," + child("ln2", norm) + "," +
                            child("mlp", mlp) + "]}";
  std::ofstream f(path);
  f << R"({"format":"fsdp-model/1","module":{"type":"Model","children":[)"
    << R"({"name":"embed","module":{"type":"Embedding","params":[{"name":"weight","shape":[50000,)"
    << d << "]}]}},"
    << R"({"name":"layers","module":{"type":"ModuleList","children":[)";
  for (int s = 0; s < stages; ++s) {
    if (s) f << ',';
    f << R"({"name":")" << s << R"(","module":{"type":"ModuleList","children":[)";
    for (int b = 0; b < per_stage; ++b) {
      if (b) f << ',';
      f << child(std::to_string(b), block);
    }
    f << "]}}";
  }
  f << "]}}]}}\n";
}

}  // namespace

int main(int argc, char** argv) {
  fsdp::bench::Cli cli("bench_plan", "fsdp-plan end to end against PyTorch's _recursive_wrap");
  CLI::App& app = cli.app();
  std::string plan = FSDP_PLAN_EXE;
  int runs = 7, blocks = 4000;
  bool no_torch = false, no_big = false;
  app.add_option("--plan", plan, "the fsdp-plan executable")->capture_default_str();
  cli.add_iters(runs, "fsdp-plan runs per case on the block model (median)");
  app.add_option("--blocks", blocks, "blocks of the block model")
      ->check(fsdp::bench::at_least(1))
      ->capture_default_str();
  app.add_flag("--no-torch", no_torch, "skip the PyTorch baseline");
  app.add_flag("--no-1m", no_big, "skip the million-module model");
  if (const int rc = cli.parse(argc, argv); rc >= 0) return rc;
  const bool torch = !no_torch, big = !no_big;
  return fsdp::bench::run_main(cli.program(), [&] {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / fmt::format("bench_plan.{}", getpid());
    fs::create_directories(dir);
    fsdp::bench::Report out(cli);

    // (a) the block model.
    const std::string blocks_file = (dir / fmt::format("blocks{}.json", blocks)).string();
    {
      auto model = fsdp::bench::blocks_model(blocks);
      fsdp::plan::write_model_file(*model, blocks_file);
      out["blocks_model"] = {{"modules", model->modules().size()},
                             {"file_bytes", fs::file_size(blocks_file)}};
    }
    // A child's peak RSS counts this process's resident pages until it execs: give the model's
    // freed memory back first.
    malloc_trim(0);
    nlohmann::json theirs = torch ? run_torch((dir / "torch.json").string(), blocks) : nullptr;
    const double torch_modules =
        theirs.is_object() ? theirs["modules_per_block_model"].get<double>() : 0;
    std::printf(
        "fsdp-plan end to end (median of %d runs) vs PyTorch _recursive_wrap alone%s\n", runs,
        theirs.is_object()
            ? fmt::format(" (torch {}, best of 3)", theirs["torch_version"].get<std::string>())
                  .c_str()
            : " (PyTorch not found)");
    std::printf("%-38s %8s %8s %8s %7s %8s %8s %8s\n", "case", "wall s", "min s", "cpu s", "RSS MB",
                "torch s", "vs min", "vs cpu");
    struct Case {
      const char* name;
      const char* policy;
      const char* torch_key;
    };
    for (const Case& c :
         {Case{"transformer([Block])", "transformer([Block])", "blocks_transformer"},
          Case{"size(min_num_params=20000)", "size(min_num_params=20000)", "blocks_size_based"}}) {
      const std::string name = fmt::format("blocks{} {}", blocks, c.name);
      Summary s = time_plan({plan, blocks_file, "--policy", c.policy, "--world-size", "8"}, runs);
      double t = theirs.is_object() && theirs.contains(c.torch_key)
                     ? theirs[c.torch_key].get<double>() * torch_modules * 1e-6
                     : 0;
      auto ratio = [&](double ours) {
        return t > 0 ? fmt::format("{:.1f}x", t / ours) : std::string("-");
      };
      std::printf("%-38s %8.3f %8.3f %8.3f %7.0f %8s %8s %8s\n", name.c_str(), s.wall_median,
                  s.wall_min, s.cpu_median, s.max_rss_kb / 1024.0,
                  t > 0 ? fmt::format("{:.3f}", t).c_str() : "-", ratio(s.wall_min).c_str(),
                  ratio(s.cpu_median).c_str());
      nlohmann::ordered_json j = {{"case", name},
                                  {"wall_median_s", s.wall_median},
                                  {"wall_min_s", s.wall_min},
                                  {"cpu_median_s", s.cpu_median},
                                  {"max_rss_kb", s.max_rss_kb}};
      if (t > 0) {
        j["torch_recursive_wrap_s"] = t;
        out.ratio(name + " speedup_vs_min_wall", t / s.wall_min);  // best of runs on both sides
        out.ratio(name + " speedup_vs_cpu", t / s.cpu_median);
      }
      out.row(j);
    }
    if (theirs.is_object())
      out["torch"] = {{"version", theirs["torch_version"]}, {"python", theirs["python"]}};

    // (b) a million modules.
    if (big) {
      const std::string big_file = (dir / "model_1m.json").string();
      write_1m_model(big_file, 100, 715);
      out["model_1m"] = {{"modules", 3 + 100 * (1 + 14 * 715)},
                         {"file_bytes", fs::file_size(big_file)}};
      std::printf("\n%d modules, %.0f MB of JSON, --format json --world-size 64 (one run each)\n",
                  3 + 100 * (1 + 14 * 715), static_cast<double>(fs::file_size(big_file)) / 1e6);
      for (const char* policy :
           {"none", "transformer([Block])", "size(min_num_params=100000)", "always"}) {
        std::vector<std::string> args{plan, big_file, "--format", "json", "--world-size", "64"};
        if (std::strcmp(policy, "none") != 0) args.insert(args.end(), {"--policy", policy});
        Summary s = time_plan(args, 1);
        std::printf("%-38s %8.2f %8s %8.2f %7.0f\n", policy, s.wall_median, "", s.cpu_median,
                    s.max_rss_kb / 1024.0);
        out.row({{"case", std::string("1m ") + policy},
                 {"wall_s", s.wall_median},
                 {"cpu_s", s.cpu_median},
                 {"max_rss_kb", s.max_rss_kb}});
      }
    }
    fs::remove_all(dir);
    out.write();
    return 0;
  });
}
