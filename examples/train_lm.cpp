// train_lm: trains TinyLM in one process on real text (Debian's license texts, present on every
// Debian machine, unless --text is given), printing step, loss and tokens/s.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "core/autograd.h"
#include "core/error.h"
#include "core/optim/optim.h"
#include "examples/tiny_lm.h"
#include "examples/train_lm_options.h"

using namespace fsdp;
using examples::ByteCorpus;
using examples::TinyLM;

namespace {

std::vector<std::string> default_texts() {
  std::vector<std::string> paths;
  const std::filesystem::path dir = "/usr/share/common-licenses";
  if (std::filesystem::is_directory(dir))
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.is_regular_file()) paths.push_back(e.path().string());
  std::sort(paths.begin(), paths.end());
  return paths;
}

double mean_loss(TinyLM& model, const ByteCorpus& corpus, std::int64_t batch, std::size_t begin,
                 std::size_t end, int batches) {
  autograd::NoGradGuard no_grad;
  Generator gen(1234);  // the same held-out windows every time
  double total = 0;
  for (int i = 0; i < batches; ++i)
    total += examples::lm_loss(model, corpus.sample(batch, model.config.context, begin, end, gen))
                 .item();
  return total / batches;
}

std::string sample_text(TinyLM& model, const std::string& prompt, int length, Generator& gen) {
  autograd::NoGradGuard no_grad;
  model.eval();
  std::vector<std::int64_t> ids(prompt.begin(), prompt.end());
  for (int i = 0; i < length; ++i) {
    std::size_t start = ids.size() > static_cast<std::size_t>(model.config.context)
                            ? ids.size() - static_cast<std::size_t>(model.config.context)
                            : 0;
    std::vector<std::int64_t> window(ids.begin() + static_cast<std::ptrdiff_t>(start), ids.end());
    Tensor x = from_vector(window, {1, static_cast<std::int64_t>(window.size())});
    Tensor logits = model.forward(x).select(1, static_cast<std::int64_t>(window.size()) - 1);
    std::vector<double> p = softmax(mul(logits, 1.0 / 0.8), -1).to_vector();  // temperature 0.8
    double u = gen.uniform(), acc = 0;
    std::int64_t next = 255;
    for (std::size_t k = 0; k < p.size(); ++k) {
      acc += p[k];
      if (u < acc) {
        next = static_cast<std::int64_t>(k);
        break;
      }
    }
    ids.push_back(next);
  }
  model.train();
  std::string out;
  for (auto c : ids) out += (c >= 32 && c < 127) || c == '\n' ? static_cast<char>(c) : '?';
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  examples::TrainLmOptions options;
  try {
    options = examples::parse_train_lm_options(argc, argv);
  } catch (const UsageError& e) {
    fmt::print(stderr, "train_lm: error: {}\n", e.what());
    return e.exit_code();
  }
  if (!options.help.empty()) {
    fmt::print("{}", options.help);
    return 0;
  }
  const examples::TinyLMConfig& cfg = options.model;
  const int steps = options.steps, log_every = options.log_every;
  const std::int64_t batch = options.batch;
  const double lr = options.lr;
  const std::uint64_t seed = options.seed;
  std::vector<std::string>& texts = options.texts;

  try {
    if (texts.empty()) texts = default_texts();
    ByteCorpus corpus = ByteCorpus::from_files(texts);
    const std::size_t split = corpus.size() * 9 / 10;
    // Training windows come from the first 90%, held-out ones from the rest: each part must hold
    // one window of context + 1 bytes.
    const auto window = static_cast<std::size_t>(cfg.context) + 1;
    if (split < window || corpus.size() - split < window)
      throw ValueError(fmt::format(
          "the text ({} bytes) is too short for --context {}: its training part ({} bytes) and "
          "held-out part ({} bytes) must each hold {} bytes",
          corpus.size(), cfg.context, split, corpus.size() - split, window));
    fmt::print("corpus: {} bytes from {} file(s); train {} / held-out {}\n", corpus.size(),
               texts.size(), split, corpus.size() - split);

    manual_seed(seed);
    TinyLM model(cfg);
    fmt::print("model: TinyLM d_model={} heads={} layers={} context={}: {} parameters\n",
               cfg.d_model, cfg.heads, cfg.layers, cfg.context, model.num_parameters());
    optim::AdamWOptions opt_options;
    opt_options.lr = lr;
    optim::AdamW opt(model.parameters(), opt_options);
    Generator gen(seed + 1);

    const double first_val = mean_loss(model, corpus, batch, split, corpus.size(), 4);
    fmt::print("held-out loss before training: {:.4f} (uniform over 256 bytes: {:.4f})\n",
               first_val, std::log(256.0));
    double window_loss = 0;
    int window_steps = 0;
    auto t_window = std::chrono::steady_clock::now();
    const auto t_start = t_window;
    for (int step = 1; step <= steps; ++step) {
      Tensor batch_windows = corpus.sample(batch, cfg.context, 0, split, gen);
      Tensor loss = examples::lm_loss(model, batch_windows);
      opt.zero_grad();
      loss.backward();
      opt.step();
      window_loss += loss.item();
      ++window_steps;
      if (step % log_every == 0 || step == steps) {
        auto now = std::chrono::steady_clock::now();
        double secs = std::chrono::duration<double>(now - t_window).count();
        double tokens = static_cast<double>(window_steps * batch * cfg.context);
        fmt::print("step {:5d}  loss {:.4f}  tokens/s {:8.0f}\n", step, window_loss / window_steps,
                   tokens / secs);
        std::fflush(stdout);
        window_loss = 0;
        window_steps = 0;
        t_window = now;
      }
    }
    const double total =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    const double last_val = mean_loss(model, corpus, batch, split, corpus.size(), 4);
    fmt::print(
        "held-out loss after {} steps: {:.4f} (was {:.4f}); {:.1f} s, {:.0f} tokens/s overall\n",
        steps, last_val, first_val, total,
        static_cast<double>(static_cast<std::int64_t>(steps) * batch * cfg.context) / total);
    Generator sample_gen(seed + 2);
    fmt::print("sample: {}\n", sample_text(model, "This License", 120, sample_gen));
    if (!(last_val < first_val)) {
      fmt::print(stderr,
                 "train_lm: error: the held-out loss did not fall ({:.4f} after {} steps, {:.4f} "
                 "before)\n",
                 last_val, steps, first_val);
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "train_lm: error: {}\n", e.what());
    return 1;
  }
}
