#include "examples/train_lm_options.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>

namespace fsdp::examples {

namespace {

// An integer option's range, said in one line ("--batch: expected an integer from 1 to 65536,
// got '0'"); CLI11 prefixes the option's name.
CLI::Validator int_range(std::int64_t lo, std::int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        std::int64_t v = 0;
        const char* end = s.data() + s.size();
        auto [p, ec] = std::from_chars(s.data(), end, v);
        if (ec == std::errc() && p == end && v >= lo && v <= hi) return "";
        return fmt::format("expected an integer from {} to {}, got '{}'", lo, hi, s);
      },
      fmt::format("INT in [{}, {}]", lo, hi));
}

// A learning rate: a finite number above 0.
CLI::Validator positive_finite() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        double v = 0;
        std::size_t used = 0;
        try {
          v = std::stod(s, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == s.size() && std::isfinite(v) && v > 0) return "";
        return fmt::format("expected a finite number above 0, got '{}'", s);
      },
      "FLOAT > 0");
}

}  // namespace

TrainLmOptions parse_train_lm_options(int argc, const char* const* argv) {
  CLI::App app{"Train a byte-level transformer language model on CPU (fsdp-cpp demo)"};
  TrainLmOptions o;
  TinyLMConfig& cfg = o.model;
  // Every size has a range (a negative or zero size is refused with the option's name, never
  // passed on to the model), and the model's shape is checked as a whole below.
  app.add_option("--steps", o.steps, "optimizer steps")
      ->capture_default_str()
      ->check(int_range(1, 100000000));
  app.add_option("--batch", o.batch, "sequences per step")
      ->capture_default_str()
      ->check(int_range(1, 65536));
  app.add_option("--context", cfg.context, "bytes per sequence")
      ->capture_default_str()
      ->check(int_range(1, 65536));
  app.add_option("--d-model", cfg.d_model, "model width")
      ->capture_default_str()
      ->check(int_range(1, 65536));
  app.add_option("--heads", cfg.heads, "attention heads")
      ->capture_default_str()
      ->check(int_range(1, 65536));
  app.add_option("--layers", cfg.layers, "transformer blocks")
      ->capture_default_str()
      ->check(int_range(1, 1024));
  app.add_option("--lr", o.lr, "AdamW learning rate")
      ->capture_default_str()
      ->check(positive_finite());
  app.add_option("--seed", o.seed, "random seed")->capture_default_str();
  app.add_option("--log-every", o.log_every, "print every N steps")
      ->capture_default_str()
      ->check(int_range(1, 100000000));
  app.add_option("--text", o.texts,
                 "text files to train on (default: /usr/share/common-licenses/*)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    o.help = app.help();
    return o;
  } catch (const CLI::ParseError& e) {
    throw UsageError(fmt::format("{} (see train_lm --help)", e.what()));
  }
  if (cfg.d_model % cfg.heads != 0)
    throw UsageError(
        fmt::format("--d-model {} is not a multiple of --heads {} (each head gets d_model / "
                    "heads dimensions)",
                    cfg.d_model, cfg.heads));
  return o;
}

}  // namespace fsdp::examples
