#include "examples/train_lm_options.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "examples/cli_checks.h"

namespace fsdp::examples {

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
      ->check(finite_number());
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
