// generate: continues a prompt with a save_pretrained GPT-2 or Llama directory, as transformers'
// generate does (greedy by default; --do-sample with temperature, top-k and top-p), with a KV
// cache; prints the prompt and generated token ids.
//   generate --model-dir DIR --prompt-ids 1,2,3 [--max-new-tokens N] [--do-sample
//            --temperature T --top-k K --top-p P --seed S]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/input_error.h"
#include "examples/cli_checks.h"
#include "models/auto_model.h"
#include "models/generation.h"
#include "models/load_weights.h"

using namespace fsdp;

namespace {

constexpr const char* kProgram = "generate";

// "1,2,3" -> {1, 2, 3}; an empty string or a non-integer is an error naming the item.
std::vector<std::int64_t> parse_ids(const std::string& text) {
  std::vector<std::int64_t> ids;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    std::int64_t v = 0;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || p != item.data() + item.size() || v < 0)
      throw CLI::ValidationError("--prompt-ids",
                                 fmt::format("expected non-negative integers separated by "
                                             "commas, got '{}' in '{}'",
                                             item, text));
    ids.push_back(v);
    start = comma + 1;
  }
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Continues a prompt with a Hugging Face GPT-2 or Llama directory", kProgram};
  std::string model_dir, prompt_ids, prompt_text;
  models::GenerationOptions o;
  std::uint64_t seed = 0;
  app.add_option("--model-dir", model_dir, "save_pretrained directory (config.json, weights)")
      ->required();
  auto* ids_opt = app.add_option("--prompt-ids", prompt_ids, "prompt token ids: 1,2,3");
  auto* text_opt = app.add_option("--prompt", prompt_text, "prompt text (needs a tokenizer)");
  ids_opt->excludes(text_opt);
  app.add_option("--max-new-tokens", o.max_new_tokens, "tokens to generate (default 20)")
      ->check(examples::int_range(0, 1 << 20));
  auto* sample_opt = app.add_flag("--do-sample", o.do_sample, "sample instead of greedy decoding");
  app.add_option("--temperature", o.temperature, "divides the scores (default 1)")
      ->check(examples::finite_number())
      ->needs(sample_opt);
  app.add_option("--top-k", o.top_k, "keep the k highest scores, 0: off (default 50)")
      ->check(examples::int_range(0, std::int64_t{1} << 40))
      ->needs(sample_opt);
  app.add_option("--top-p", o.top_p, "keep the smallest set of probability >= p (default 1)")
      ->check(CLI::Range(0.0, 1.0))
      ->needs(sample_opt);
  app.add_option("--seed", seed, "sampling seed (default 0)")
      ->check(examples::uint64_any())
      ->needs(sample_opt);
  if (auto status = examples::parse_command_line(app, argc, argv, kProgram)) return *status;
  std::vector<std::int64_t> ids;
  try {
    if (!text_opt->empty())
      return examples::usage_error(kProgram,
                                   "--prompt needs a tokenizer, which this build does not "
                                   "include; pass token ids with --prompt-ids");
    if (ids_opt->empty()) return examples::usage_error(kProgram, "--prompt-ids is required");
    ids = parse_ids(prompt_ids);
  } catch (const CLI::ValidationError& e) {
    return examples::usage_error(kProgram, e.what());
  }
  try {
    auto model = models::make_causal_lm(models::load_config(model_dir));
    const std::string weights = (std::filesystem::path(model_dir) / "model.safetensors").string();
    if (!std::filesystem::exists(weights))
      throw InputError(
          fmt::format("{}: no model.safetensors (sharded checkpoints are read by "
                      "from_pretrained)",
                      model_dir));
    models::load_safetensors_weights(*model, weights);
    model->eval();
    for (std::int64_t id : ids)
      if (id >= model->vocab_size())
        throw InputError(fmt::format("--prompt-ids: token {} is outside the vocabulary [0, {})", id,
                                     model->vocab_size()));
    Generator generator(seed);
    const Tensor prompt = from_vector(ids, {1, std::int64_t(ids.size())});
    const Tensor out = models::generate(*model, prompt, o, &generator);
    std::string line;
    for (std::int64_t id : out.to_int_vector())
      line += (line.empty() ? "" : ",") + std::to_string(id);
    fmt::print("{}\n", line);
  } catch (const Error& e) {
    fmt::print(stderr, "{}: error: {}\n", kProgram, e.what());
    return 1;
  }
  return 0;
}
