// generate: continues a prompt with a save_pretrained GPT-2 or Llama directory, as transformers'
// generate does (greedy by default; --do-sample with temperature, top-k and top-p), with a KV
// cache. --prompt TEXT is encoded as transformers' tokenizer(TEXT) (special tokens added) with
// DIR/tokenizer.json or --tokenizer, and the whole sequence printed as tokenizer.decode gives it
// (--print-ids: its ids first, on a line of their own); --prompt-ids prints the ids only.
//   generate --model-dir DIR (--prompt TEXT | --prompt-ids 1,2,3) [--max-new-tokens N]
//            [--do-sample --temperature T --top-k K --top-p P --seed S]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/input_error.h"
#include "examples/cli_checks.h"
#include "models/generation.h"
#include "models/pretrained.h"
#include "models/tokenizer/tokenizer.h"

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

std::string join_ids(const std::vector<std::int64_t>& ids) {
  std::string line;
  for (std::int64_t id : ids) line += (line.empty() ? "" : ",") + std::to_string(id);
  return line;
}

// --tokenizer (a directory or a tokenizer.json), else the model directory, as transformers'
// AutoTokenizer loads it (InputError when it has no tokenizer.json).
models::Tokenizer load_tokenizer(const std::string& model_dir, const std::string& path) {
  if (!path.empty()) return models::Tokenizer::from_pretrained(path);
  if (!std::filesystem::exists(std::filesystem::path(model_dir) / "tokenizer.json"))
    throw InputError(fmt::format(
        "--prompt: {} has no tokenizer.json; pass the tokenizer with --tokenizer PATH, or "
        "token ids with --prompt-ids",
        model_dir));
  return models::Tokenizer::from_pretrained(model_dir);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Continues a prompt with a Hugging Face GPT-2 or Llama directory", kProgram};
  std::string model_dir, prompt_ids, prompt_text, tokenizer_path;
  bool print_ids = false, skip_special_tokens = false;
  models::GenerationOptions o;
  std::uint64_t seed = 0;
  std::string device_name = "cpu", dtype_name = "auto";
  app.add_option("--model-dir", model_dir, "save_pretrained directory (config.json, weights)")
      ->required();
  auto* ids_opt = app.add_option("--prompt-ids", prompt_ids, "prompt token ids: 1,2,3");
  auto* text_opt = app.add_option("--prompt", prompt_text,
                                  "prompt text, encoded as tokenizer(TEXT) with special tokens");
  ids_opt->excludes(text_opt);
  app.add_option("--tokenizer", tokenizer_path,
                 "a tokenizer directory or tokenizer.json (default: DIR, as AutoTokenizer)")
      ->needs(text_opt);
  app.add_flag("--print-ids", print_ids, "print the token ids on a line before the text")
      ->needs(text_opt);
  app.add_flag("--skip-special-tokens", skip_special_tokens,
               "leave special tokens out of the text (decode's skip_special_tokens)")
      ->needs(text_opt);
  // Unset, these take the model's generation_config.json values, else transformers' defaults
  // (models::generation_defaults).
  auto* max_opt =
      app.add_option("--max-new-tokens", o.max_new_tokens,
                     "tokens to generate (default: generation_config.json's max_new_tokens, else "
                     "up to its max_length tokens in all, else 20)")
          ->check(examples::int_range(0, 1 << 20));
  auto* penalty_opt =
      app.add_option("--repetition-penalty", o.repetition_penalty,
                     "divides the scores of tokens already in the sequence, greedy or sampled; "
                     "1: off (default: generation_config.json's, else 1)")
          ->check(examples::finite_number());
  auto* sample_opt = app.add_flag("--do-sample", o.do_sample, "sample instead of greedy decoding");
  auto* temperature_opt =
      app.add_option("--temperature", o.temperature,
                     "divides the scores (default: generation_config.json's, else 1)")
          ->check(examples::finite_number())
          ->needs(sample_opt);
  auto* top_k_opt =
      app.add_option(
             "--top-k", o.top_k,
             "keep the k highest scores, 0: off (default: generation_config.json's, else 50)")
          ->check(examples::int_range(0, std::int64_t{1} << 40))
          ->needs(sample_opt);
  auto* top_p_opt = app.add_option("--top-p", o.top_p,
                                   "keep the smallest set of probability >= p (default: "
                                   "generation_config.json's, else 1)")
                        ->check(CLI::Range(0.0, 1.0))
                        ->needs(sample_opt);
  app.add_option("--device", device_name,
                 "where the model runs: cpu (default), cuda[:N] or fake_cuda[:N]; sampling "
                 "reads each step's scores on the host");
  app.add_option("--dtype", dtype_name,
                 "the model's dtype: auto (default: the checkpoint's, as transformers' "
                 "from_pretrained), float32, bfloat16 or float16")
      ->check(CLI::IsMember({"auto", "float32", "bfloat16", "float16"}));
  app.add_option("--seed", seed, "sampling seed (default 0)")
      ->check(examples::uint64_any())
      ->needs(sample_opt);
  if (auto status = examples::parse_command_line(app, argc, argv, kProgram)) return *status;
  std::vector<std::int64_t> ids;
  try {
    if (ids_opt->empty() && text_opt->empty())
      return examples::usage_error(kProgram, "give the prompt: --prompt TEXT or --prompt-ids");
    if (!ids_opt->empty()) ids = parse_ids(prompt_ids);
  } catch (const CLI::ValidationError& e) {
    return examples::usage_error(kProgram, e.what());
  }
  try {
    std::optional<models::Tokenizer> tokenizer;
    const char* prompt_flag = "--prompt-ids";
    if (!text_opt->empty()) {  // before the model: a missing tokenizer costs no loading
      tokenizer = load_tokenizer(model_dir, tokenizer_path);
      try {
        for (std::uint32_t id : tokenizer->encode(prompt_text)) ids.push_back(id);
      } catch (const InputError& e) {  // invalid UTF-8
        throw InputError(fmt::format("--prompt: {}", e.what()));
      }
      if (ids.empty())
        throw InputError(fmt::format(
            "--prompt: the text '{}' encodes to no tokens ({} adds none of its own); give some "
            "text",
            prompt_text, tokenizer->source()));
      prompt_flag = "--prompt";
    }
    Device device;
    try {
      device = Device::parse(device_name);
    } catch (const ValueError&) {
      throw InputError(fmt::format(
          "--device {}: unknown device (expected cpu, cuda, cuda:N, fake_cuda or fake_cuda:N)",
          device_name));
    }
    if (device.is_meta())
      throw InputError("--device meta: meta tensors have no values to generate from");
    auto model = models::from_pretrained(
        model_dir,
        dtype_name == "auto" ? std::nullopt : std::optional<DType>(dtype_from_name(dtype_name)));
    model->eval();
    const models::GenerationOptions defaults = models::generation_defaults(*model);
    if (max_opt->count() == 0) {
      o.max_new_tokens = defaults.max_new_tokens;
      o.max_length = defaults.max_length;
    }
    if (penalty_opt->count() == 0) o.repetition_penalty = defaults.repetition_penalty;
    if (temperature_opt->count() == 0) o.temperature = defaults.temperature;
    if (top_k_opt->count() == 0) o.top_k = defaults.top_k;
    if (top_p_opt->count() == 0) o.top_p = defaults.top_p;
    if (!device.is_cpu()) model->to(device);
    for (std::int64_t id : ids)
      if (id >= model->vocab_size())
        throw InputError(fmt::format("{}: token {} is outside the vocabulary [0, {})", prompt_flag,
                                     id, model->vocab_size()));
    Generator generator(seed);
    const Tensor prompt =
        from_vector(ids, {1, std::int64_t(ids.size())}, TensorOptions(DType::Int64, device));
    const std::vector<std::int64_t> out =
        models::generate(*model, prompt, o, &generator).to_int_vector();
    if (!tokenizer || print_ids) fmt::print("{}\n", join_ids(out));
    if (tokenizer) {
      // A model's vocabulary may be padded past the tokenizer's (GPT-2's 50257 -> 50304): ids
      // of no token are left out, as tokenizers' decode does.
      std::vector<std::uint32_t> tokens;
      for (std::int64_t id : out)
        if (id < std::int64_t{1} << 32 && tokenizer->id_to_token(std::uint32_t(id)))
          tokens.push_back(std::uint32_t(id));
      fmt::print("{}\n", tokenizer->decode(tokens, skip_special_tokens));
    }
  } catch (const Error& e) {
    fmt::print(stderr, "{}: error: {}\n", kProgram, e.what());
    return 1;
  }
  return 0;
}
