// Times forward + backward + AdamW step of (a) one transformer block (d_model 256, 4 heads,
// seq 128, batch 8) and (b) the demo model, and compares with PyTorch eager on the same shapes
// and thread count, measured in the same run by bench_training_step_torch.py when
// /usr/bin/python3 has torch. Prints a table and writes JSON (--json PATH).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/autograd.h"
#include "core/nn/nn.h"
#include "core/optim/optim.h"
#include "examples/tiny_lm.h"

using namespace fsdp;

namespace {

// Median milliseconds per call of fn over `iters` calls after `warmup` calls.
template <typename Fn>
double median_ms(Fn&& fn, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

double bench_block(int warmup, int iters) {
  manual_seed(0);
  nn::TransformerEncoderLayerOptions o;
  o.dim_feedforward = 1024;
  o.dropout = 0.0;
  o.batch_first = true;
  nn::TransformerEncoderLayer block(256, 4, o);
  optim::AdamW opt(block.parameters(), optim::AdamWOptions{});
  Tensor x = randn({8, 128, 256});
  return median_ms(
      [&] {
        opt.zero_grad();
        Tensor y = block.forward(x);
        sum(y).backward();
        opt.step();
      },
      warmup, iters);
}

double bench_demo_model(int warmup, int iters) {
  manual_seed(0);
  examples::TinyLMConfig cfg;  // the demo's defaults
  examples::TinyLM model(cfg);
  optim::AdamW opt(model.parameters(), optim::AdamWOptions{});
  Tensor window = randint(0, 256, {16, cfg.context + 1});
  return median_ms(
      [&] {
        opt.zero_grad();
        examples::lm_loss(model, window).backward();
        opt.step();
      },
      warmup, iters);
}

nlohmann::json run_torch(const std::string& script, int threads, int warmup, int iters) {
  std::string cmd = fmt::format("/usr/bin/python3 {} --threads {} --warmup {} --iters {} 2>/dev/null",
                                script, threads, warmup, iters);
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  if (!pipe) return nullptr;
  std::string out;
  std::array<char, 4096> buf;
  while (std::fgets(buf.data(), buf.size(), pipe.get())) out += buf.data();
  try {
    return nlohmann::json::parse(out);
  } catch (...) {
    return nullptr;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fsdp-cpp training-step benchmark vs PyTorch eager"};
  int warmup = 3, iters = 20, threads = 2;
  std::string json_path, torch_script = FSDP_BENCH_DIR "/bench_training_step_torch.py";
  bool no_torch = false;
  app.add_option("--warmup", warmup)->capture_default_str();
  app.add_option("--iters", iters)->capture_default_str();
  app.add_option("--threads", threads, "BLAS threads here and torch.set_num_threads there")->capture_default_str();
  app.add_option("--json", json_path, "write results as JSON");
  app.add_flag("--no-torch", no_torch, "skip the PyTorch baseline");
  CLI11_PARSE(app, argc, argv);
  setenv("OPENBLAS_NUM_THREADS", std::to_string(threads).c_str(), 0);

  nlohmann::json result;
  result["threads"] = threads;
  result["ours_ms"] = {{"block", bench_block(warmup, iters)}, {"demo_model", bench_demo_model(warmup, iters)}};
  nlohmann::json torch = no_torch ? nlohmann::json(nullptr) : run_torch(torch_script, threads, warmup, iters);
  result["torch"] = torch;

  fmt::print("{:<44} {:>12} {:>12} {:>10}\n", "fwd+bwd+AdamW step (median)", "fsdp-cpp ms", "torch ms",
             "ours/torch");
  for (const char* name : {"block", "demo_model"}) {
    double ours = result["ours_ms"][name];
    std::string label = std::string(name) == "block" ? "transformer block d256 h4 seq128 batch8"
                                                      : "demo TinyLM (d128 h4 L2 ctx64 batch16)";
    if (torch.is_object() && torch.contains(name)) {
      double t = torch[name];
      result["ratio"][name] = ours / t;
      fmt::print("{:<44} {:>12.2f} {:>12.2f} {:>10.2f}\n", label, ours, t, ours / t);
    } else {
      fmt::print("{:<44} {:>12.2f} {:>12} {:>10}\n", label, ours, "n/a", "n/a");
    }
  }
  if (torch.is_object()) fmt::print("(torch {} with {} threads)\n", torch.value("version", "?"), threads);
  else fmt::print("(PyTorch baseline unavailable: /usr/bin/python3 with torch not found)\n");
  if (!json_path.empty()) std::ofstream(json_path) << result.dump(2) << "\n";
  return 0;
}
