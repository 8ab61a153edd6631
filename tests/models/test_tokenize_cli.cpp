// examples/tokenize end to end: the token file it writes holds the Tokenizer's ids (HF's encode,
// or llm.c's convention with --eot-delimiter), --decode gives the text back, and a bad command
// line or input is one line on stderr with exit status 2 (command line) or 1 (input).
#define BOOST_TEST_MODULE models_tokenize_cli
#include <sys/wait.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/tokenizer/token_file.h"
#include "models/tokenizer/tokenizer.h"

using namespace fsdp::models;
using Ids = std::vector<std::uint32_t>;
using nlohmann::literals::operator""_json_pointer;
namespace fs = std::filesystem;

namespace {

std::string fixture(const std::string& name) {
  return std::string(FSDP_TOKENIZER_FIXTURES) + "/" + name;
}

struct Result {
  int status;
  std::string output;  // stdout and stderr together
};

// Runs tokenize with `args` (each quoted for the shell).
Result tokenize(const std::vector<std::string>& args) {
  std::string command = FSDP_TOKENIZE_EXE;
  for (const std::string& a : args) command += " '" + a + "'";
  command += " 2>&1";
  std::FILE* pipe = ::popen(command.c_str(), "r");
  BOOST_TEST_REQUIRE(pipe != nullptr);
  std::string output;
  char buffer[4096];
  while (std::size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("fsdp_tokenize_cli_" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

Ids concat(std::initializer_list<Ids> parts) {
  Ids out;
  for (const Ids& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

const std::string kGpt2 = fixture("gpt2_style/tokenizer.json");
const std::string kLlama3 = fixture("llama3_style/tokenizer.json");
const std::string kLlama2 = fixture("llama2_style/tokenizer.json");
const std::string kGemma = fixture("gemma_style/tokenizer.json");
const std::string kMetaspace = fixture("metaspace_style/tokenizer.json");

}  // namespace

// One document, HF's default encode; the small vocabulary gives the gpt2 (uint16) format.
BOOST_AUTO_TEST_CASE(encode_writes_the_tokenizers_ids_and_decode_gives_the_text_back) {
  TempDir dir;
  const std::string corpus = read_text(fixture("corpus.txt"));
  for (const std::string& json : {kGpt2, kLlama3}) {
    const Tokenizer tok = Tokenizer::from_file(json);
    const Ids expected = tok.encode(corpus);
    const Result r = tokenize(
        {"--tokenizer", json, "--input", fixture("corpus.txt"), "--output", dir / "c.bin"});
    BOOST_TEST(r.status == 0, r.output);
    BOOST_TEST(r.output == "tokenize: 1 document(s), " + std::to_string(expected.size()) +
                               " tokens, format gpt2 -> " + dir / "c.bin" + "\n");
    const TokenFile file = read_token_file(dir / "c.bin", tok.vocab_size());
    BOOST_TEST((file.format == TokenFormat::gpt2));
    BOOST_TEST(file.tokens == expected, boost::test_tools::per_element());

    const Result d = tokenize(
        {"--decode", "--tokenizer", json, "--input", dir / "c.bin", "--output", dir / "c.txt"});
    BOOST_TEST(d.status == 0, d.output);
    BOOST_TEST(read_text(dir / "c.txt") == tok.decode(expected));
    const Result s = tokenize({"--decode", "--skip-special-tokens", "--tokenizer", json, "--input",
                               dir / "c.bin", "--output", dir / "s.txt"});
    BOOST_TEST(s.status == 0, s.output);
    BOOST_TEST(read_text(dir / "s.txt") == corpus);  // the only special token is Llama 3's BOS
  }
}

// SentencePiece-style files (Llama 2's form, the newer Metaspace form): the token file holds HF
// tokenizers' ids of the corpus (expected.json's corpus_ids), and --decode --skip-special-tokens
// gives HF's decode of them.
BOOST_AUTO_TEST_CASE(sentencepiece_style_token_file_holds_hfs_ids) {
  TempDir dir;
  for (const std::string style : {"llama2_style", "metaspace_style"}) {
    const std::string json = fixture(style + "/tokenizer.json");
    std::ifstream in(fixture(style + "/expected.json"));
    const nlohmann::json expected = nlohmann::json::parse(in);
    const Ids hf = expected["corpus_ids"].get<Ids>();
    const Result r = tokenize(
        {"--tokenizer", json, "--input", fixture("corpus.txt"), "--output", dir / "c.bin"});
    BOOST_TEST(r.status == 0, r.output);
    BOOST_TEST(r.output == "tokenize: 1 document(s), " + std::to_string(hf.size()) +
                               " tokens, format gpt2 -> " + dir / "c.bin" + "\n");
    BOOST_TEST(read_token_file(dir / "c.bin").tokens == hf, boost::test_tools::per_element());
    const Result s = tokenize({"--decode", "--skip-special-tokens", "--tokenizer", json, "--input",
                               dir / "c.bin", "--output", dir / "s.txt"});
    BOOST_TEST(s.status == 0, s.output);
    BOOST_TEST(read_text(dir / "s.txt") ==
               expected["corpus_decode_skip_special"].get<std::string>());
  }
}

// --tokenizer DIR whose tokenizer_config.json names LlamaTokenizer: the token file holds
// transformers 5's AutoTokenizer ids of the text (expected_pretrained.json), not the file's.
BOOST_AUTO_TEST_CASE(directory_tokenizer_encodes_as_autotokenizer) {
  TempDir dir;
  const std::string text = " <s> a </s> ";
  auto ids_in = [&](const std::string& expected, const nlohmann::json::json_pointer& cases) {
    std::ifstream in(fixture("llama2_style/" + expected));
    const nlohmann::json all = nlohmann::json::parse(in);
    for (const nlohmann::json& c : all[cases])
      if (c["text"] == text) return c["ids"].get<Ids>();
    BOOST_FAIL("no case " << text);
    return Ids{};
  };
  const Ids hf = ids_in("expected_pretrained.json", "/configs/0/cases"_json_pointer);
  BOOST_TEST(ids_in("expected.json", "/cases"_json_pointer) != hf);
  std::ofstream(dir / "t.txt", std::ios::binary) << text;
  for (const std::string tokenizer : {"llama2_style", "llama2_style/tokenizer.json"}) {
    const Result r = tokenize(
        {"--tokenizer", fixture(tokenizer), "--input", dir / "t.txt", "--output", dir / "t.bin"});
    BOOST_TEST(r.status == 0, r.output);
    const Ids want =
        tokenizer == "llama2_style" ? hf : ids_in("expected.json", "/cases"_json_pointer);
    BOOST_TEST(read_token_file(dir / "t.bin").tokens == want, boost::test_tools::per_element());
  }
}

// llm.c's convention: each file a document, the delimiter first, special tokens in the text as
// text, nothing else added. GPT-2 style: <|endoftext|>; Llama 3 style: <|begin_of_text|>;
// Llama 2 style: <s>; Gemma style: <bos>.
BOOST_AUTO_TEST_CASE(eot_delimiter_prefixes_every_document) {
  TempDir dir;
  const std::string doc1 = "First document.\n", doc2 = "Second <|endoftext|> <|eot_id|> one\n";
  write_text(dir / "1.txt", doc1);
  write_text(dir / "2.txt", doc2);
  const EncodeOptions llmc{.add_special_tokens = false, .split_special_tokens = true};
  // Llama 2's form decodes each document with the "▁" its normalizer put before it, as a space.
  for (const auto& [json, delimiter, format, space] :
       {std::tuple{kGpt2, "<|endoftext|>", "gpt2", ""},
        std::tuple{kLlama3, "<|begin_of_text|>", "llama3", ""},
        std::tuple{kLlama2, "<s>", "gpt2", " "}, std::tuple{kGemma, "<bos>", "gpt2", ""}}) {
    const Tokenizer tok = Tokenizer::from_file(json);
    const std::uint32_t eot = *tok.token_to_id(delimiter);
    const Ids expected = concat({{eot}, tok.encode(doc1, llmc), {eot}, tok.encode(doc2, llmc)});
    const Result r =
        tokenize({"--tokenizer", json, "--input", dir / "1.txt", "--input", dir / "2.txt",
                  "--output", dir / "d.bin", "--eot-delimiter", "--format", format});
    BOOST_TEST(r.status == 0, r.output);
    BOOST_TEST(r.output == "tokenize: 2 document(s), " + std::to_string(expected.size()) +
                               " tokens, format " + format + " -> " + dir / "d.bin" + "\n");
    const TokenFile file = read_token_file(dir / "d.bin");
    BOOST_TEST(token_format_name(file.format) == format);
    BOOST_TEST(file.tokens == expected, boost::test_tools::per_element());
    const Result d = tokenize(
        {"--decode", "--tokenizer", json, "--input", dir / "d.bin", "--output", dir / "d.txt"});
    BOOST_TEST(read_text(dir / "d.txt") ==
               std::string(delimiter) + space + doc1 + delimiter + space + doc2);
  }
}

BOOST_AUTO_TEST_CASE(a_bad_command_line_is_one_line_and_status_2) {
  const std::vector<std::string> ok{"--tokenizer",         kGpt2,      "--input",
                                    fixture("corpus.txt"), "--output", "/tmp/unused.bin"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = ok;
    args.insert(args.end(), extra.begin(), extra.end());
    return tokenize(args);
  };
  const std::vector<std::pair<Result, std::string>> cases{
      {tokenize({}), "--tokenizer is required"},
      {tokenize({"--tokenizer", kGpt2, "--output", "x"}), "--input is required"},
      {with({"--format", "gpt3"}), "--format: gpt3 not in {gpt2,llama3}"},
      {with({"--bogus"}), "The following argument was not expected: --bogus"},
      {with({"--decode", "--eot-delimiter"}),
       "--decode takes no --format or --eot-delimiter (the token file has its format)"},
      {with({"--decode", "--input", "second.bin"}),
       "--decode reads one token file: give one --input"},
      {with({"--skip-special-tokens"}), "--skip-special-tokens needs --decode"},
  };
  for (const auto& [r, what] : cases) {
    BOOST_TEST(r.status == 2, what);
    BOOST_TEST(r.output == "tokenize: error: " + what + " (see tokenize --help)\n");
  }
  BOOST_TEST(!fs::exists("/tmp/unused.bin"));
}

BOOST_AUTO_TEST_CASE(a_bad_input_is_one_line_and_status_1) {
  TempDir dir;
  write_text(dir / "bad.txt", std::string("ab\xFF") + "c");
  auto run = [&](std::vector<std::string> args) { return tokenize(args); };
  const std::vector<std::pair<Result, std::string>> cases{
      {run({"--tokenizer", dir / "none.json", "--input", fixture("corpus.txt"), "--output",
            dir / "o.bin"}),
       dir / "none.json" + ": cannot open: No such file or directory"},
      {run({"--tokenizer", kGpt2, "--input", dir / "bad.txt", "--output", dir / "o.bin"}),
       "--input '" + dir / "bad.txt" + "': the text is not valid UTF-8: byte 0xFF at offset 2"},
      {run({"--tokenizer", kGpt2, "--input", dir.path.string(), "--output", dir / "o.bin"}),
       "--input: '" + dir.path.string() + "' is a directory"},
      {run({"--tokenizer", kGpt2, "--input", fixture("corpus.txt"), "--output",
            dir / "no/such/o.bin"}),
       "--output: cannot write '" + dir / "no/such/o.bin" + "': No such file or directory"},
      {run({"--decode", "--tokenizer", kGpt2, "--input", dir / "bad.txt", "--output",
            dir / "o.txt"}),
       dir / "bad.txt" + ": 4 bytes, shorter than the 1024-byte header of an llm.c token file"},
  };
  for (const auto& [r, what] : cases) {
    BOOST_TEST(r.status == 1, what);
    BOOST_TEST(r.output == "tokenize: error: " + what + "\n");
  }
}

// A vocabulary wider than 16 bits: llama3 by default, and --format gpt2 refused before any work.
BOOST_AUTO_TEST_CASE(a_wide_vocabulary_needs_the_llama3_format) {
  TempDir dir;
  std::ifstream in(kGpt2);
  nlohmann::json j = nlohmann::json::parse(in);
  j["model"]["vocab"]["zz"] = 70000;
  write_text(dir / "wide.json", j.dump());
  const Result r = tokenize({"--tokenizer", dir / "wide.json", "--input", fixture("corpus.txt"),
                             "--output", dir / "w.bin"});
  BOOST_TEST(r.status == 0, r.output);
  BOOST_TEST((read_token_file(dir / "w.bin").format == TokenFormat::llama3));
  const Result g = tokenize({"--tokenizer", dir / "wide.json", "--input", fixture("corpus.txt"),
                             "--output", dir / "g.bin", "--format", "gpt2"});
  BOOST_TEST(g.status == 1);
  BOOST_TEST(g.output == "tokenize: error: --format gpt2 stores uint16 tokens, but " +
                             dir / "wide.json" + " has ids up to 70000: use --format llama3\n");
}

// A token file of another vocabulary: a token at or above this tokenizer's size is refused.
BOOST_AUTO_TEST_CASE(decode_refuses_tokens_outside_the_vocabulary) {
  TempDir dir;
  const std::uint32_t v = Tokenizer::from_file(kGpt2).vocab_size();
  write_token_file(dir / "t.bin", Ids{1, v}, TokenFormat::gpt2);
  const Result r = tokenize(
      {"--decode", "--tokenizer", kGpt2, "--input", dir / "t.bin", "--output", dir / "o.txt"});
  BOOST_TEST(r.status == 1);
  BOOST_TEST(r.output == "tokenize: error: " + dir / "t.bin" + ": token " + std::to_string(v) +
                             " at index 1 is not below the vocabulary size " + std::to_string(v) +
                             "\n");
}
