// tokenize: text -> an llm.c token file through a Hugging Face tokenizer.json (byte-level or
// SentencePiece-style BPE, models/tokenizer), or a token file back to text with --decode. One line
// on stderr for any error: a bad command line exits 2, a file that cannot be read or used exits 1.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/input_error.h"
#include "examples/cli_checks.h"
#include "examples/job_files.h"
#include "models/tokenizer/token_file.h"
#include "models/tokenizer/tokenizer.h"

using namespace fsdp;
using models::TokenFormat;

namespace {

constexpr const char* kProgram = "tokenize";

struct Options {
  std::string tokenizer, output, format;
  std::vector<std::string> inputs;
  bool eot_delimiter = false, decode = false, skip_special_tokens = false;
};

// llm.c's delimiter: <|begin_of_text|> for a Llama-3-style vocabulary, <|endoftext|> for GPT-2's;
// for a SentencePiece-style one, its BOS (Llama 2's <s>, Gemma's <bos>), as llm.c takes Llama 3's
// BOS.
std::uint32_t eot_delimiter(const models::Tokenizer& tokenizer) {
  for (const char* name : {"<|begin_of_text|>", "<|endoftext|>", "<s>", "<bos>"})
    if (auto id = tokenizer.token_to_id(name)) return *id;
  throw InputError(
      fmt::format("--eot-delimiter: {} has none of <|begin_of_text|>, <|endoftext|>, <s> and <bos>",
                  tokenizer.source()));
}

void encode(const Options& o, const models::Tokenizer& tokenizer) {
  TokenFormat format = models::token_format_for_vocab(tokenizer.vocab_size());
  if (!o.format.empty()) format = *models::token_format_from_name(o.format);
  if (format == TokenFormat::gpt2 && tokenizer.vocab_size() > 65536)  // before any work
    throw InputError(fmt::format(
        "--format gpt2 stores uint16 tokens, but {} has ids up to {}: use --format llama3",
        tokenizer.source(), tokenizer.vocab_size() - 1));
  std::vector<std::uint32_t> tokens;
  for (const std::string& path : o.inputs) {
    const std::string text = examples::read_data_file("--input", path);
    std::vector<std::uint32_t> ids;
    try {
      if (o.eot_delimiter) {
        tokens.push_back(eot_delimiter(tokenizer));
        ids = tokenizer.encode(text, {.add_special_tokens = false, .split_special_tokens = true});
      } else {
        ids = tokenizer.encode(text);
      }
    } catch (const InputError& e) {  // invalid UTF-8: name the file
      throw InputError(fmt::format("--input '{}': {}", path, e.what()));
    }
    tokens.insert(tokens.end(), ids.begin(), ids.end());
  }
  models::write_token_file(o.output, tokens, format);
  fmt::print("{}: {} document(s), {} tokens, format {} -> {}\n", kProgram, o.inputs.size(),
             tokens.size(), models::token_format_name(format), o.output);
}

void decode(const Options& o, const models::Tokenizer& tokenizer) {
  const models::TokenFile file = models::read_token_file(o.inputs[0], tokenizer.vocab_size());
  const std::string text = tokenizer.decode(file.tokens, o.skip_special_tokens);
  std::FILE* f = std::fopen(o.output.c_str(), "wb");
  if (!f) throw InputError(fmt::format("--output: cannot write '{}'", o.output));
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok)
    throw InputError(fmt::format("--output: cannot write '{}'", o.output));
  fmt::print("{}: {} tokens ({}) -> {} bytes of text -> {}\n", kProgram, file.tokens.size(),
             models::token_format_name(file.format), text.size(), o.output);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app(
      "tokenize: text files -> one llm.c token file, through a Hugging Face tokenizer.json\n"
      "(byte-level BPE as GPT-2's or Llama 3's, or SentencePiece-style BPE as Llama 2's,\n"
      "TinyLlama's, Mistral's or Gemma's); --decode turns a token file back into text.\n"
      "Every --input file is one document. Without --eot-delimiter each is encoded as HF's\n"
      "encode(text) does (the post-processor's special tokens, such as Llama 3's\n"
      "<|begin_of_text|>, added; special tokens written in the text recognised). With\n"
      "--eot-delimiter, as llm.c's data scripts do: each document is prefixed with the\n"
      "delimiter (<|begin_of_text|> where the vocabulary has it, else <|endoftext|>, else <s>,\n"
      "else <bos>)\n"
      "and encoded with no added special tokens, special tokens in the text read as plain text.\n",
      kProgram);
  app.add_option("--tokenizer", o.tokenizer,
                 "a tokenizer.json, or a directory as AutoTokenizer loads it")
      ->required();
  app.add_option("--input", o.inputs,
                 "a text file, one document (repeatable); with --decode, the token file")
      ->required();
  app.add_option("--output", o.output, "the token file to write (with --decode: the text file)")
      ->required();
  app.add_option("--format", o.format,
                 "gpt2 (uint16) or llama3 (uint32); default: gpt2 when every id fits 16 bits")
      ->check(CLI::IsMember({"gpt2", "llama3"}));
  app.add_flag("--eot-delimiter", o.eot_delimiter,
               "prefix every document with the delimiter (llm.c's convention)");
  app.add_flag("--decode", o.decode, "turn the token file --input into text");
  app.add_flag("--skip-special-tokens", o.skip_special_tokens,
               "with --decode: leave special tokens out of the text");
  if (auto status = examples::parse_command_line(app, argc, argv, kProgram)) return *status;
  if (o.decode) {
    if (o.inputs.size() != 1)
      return examples::usage_error(kProgram, "--decode reads one token file: give one --input");
    if (o.eot_delimiter || !o.format.empty())
      return examples::usage_error(
          kProgram,
          "--decode takes no --format or --eot-delimiter (the token file has its format)");
  } else if (o.skip_special_tokens) {
    return examples::usage_error(kProgram, "--skip-special-tokens needs --decode");
  }
  try {
    examples::check_writable_file("--output", o.output);  // before the work, not after
    const models::Tokenizer tokenizer = models::Tokenizer::from_pretrained(o.tokenizer);
    if (o.decode)
      decode(o, tokenizer);
    else
      encode(o, tokenizer);
    return 0;
  } catch (const std::exception& e) {  // InputError, ValueError: one line naming the file
    fmt::print(stderr, "{}: error: {}\n", kProgram, e.what());
    return 1;
  }
}
