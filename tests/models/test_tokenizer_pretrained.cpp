// models::Tokenizer::from_pretrained against transformers 5's AutoTokenizer: llama2_style's
// tokenizer.json in a directory with each tokenizer_config.json of expected_pretrained.json
// (tools/torch_reference/make_tokenizer_fixtures.py: TinyLlama's fields, legacy true,
// add_prefix_space false with fewer added tokens, the class alone), where LlamaTokenizer
// rebuilds the pipeline; the file as it is for other classes and bare paths; the config's
// errors by their messages.
#define BOOST_TEST_MODULE models_tokenizer_pretrained
#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "models/tokenizer/tokenizer.h"
#include "tests/models/tokenizer_fixture.h"
#include "tests/support/temp_dir.h"

using fsdp::models::Tokenizer;
using fsdp::test::error_message;
using fsdp::test::ids_of;
using fsdp::test::read_json;
using fsdp::test::tokenizer_fixture;
using fsdp::testing::TempDir;
using nlohmann::json;

namespace {

const std::string kDir = tokenizer_fixture("llama2_style");
const std::string kFile = tokenizer_fixture("llama2_style/tokenizer.json");

// A directory holding llama2_style's tokenizer.json and `config` as tokenizer_config.json.
void write_directory(const TempDir& dir, const json& config) {
  std::filesystem::copy_file(kFile, dir.path("tokenizer.json"));
  std::ofstream(dir.path("tokenizer_config.json")) << config.dump();
}

// tokenizer(text)'s ids and both decodes of each case, as transformers gave them.
void check_cases(const Tokenizer& tok, const json& expected, const std::string& name) {
  BOOST_TEST(tok.vocab_size() == expected["vocab_size"].get<std::uint32_t>());
  for (const json& c : expected["cases"]) {
    const std::string text = c["text"];
    BOOST_TEST_CONTEXT(name << " text '" << text << "'") {
      BOOST_TEST(tok.encode(text) == ids_of(c["ids"]), boost::test_tools::per_element());
      BOOST_TEST(tok.decode(ids_of(c["ids"])) == c["decode"].get<std::string>());
      BOOST_TEST(tok.decode(ids_of(c["ids"]), true) == c["decode_skip_special"].get<std::string>());
    }
  }
}

const json& expected_config(const std::string& name) {
  static const json expected =
      read_json(tokenizer_fixture("llama2_style/expected_pretrained.json"));
  for (const json& c : expected["configs"])
    if (c["name"] == name) return c;
  BOOST_FAIL("no config " << name << " in expected_pretrained.json");
  throw;
}

std::string load_error(const json& config) {
  const TempDir dir;
  write_directory(dir, config);
  return error_message([&] { Tokenizer::from_pretrained(dir.dir.string()); });
}

}  // namespace

// The fixture directory with its own tokenizer_config.json (TinyLlama's fields).
BOOST_AUTO_TEST_CASE(directory_equals_autotokenizer) {
  const json& expected = expected_config("tinyllama");
  BOOST_TEST(read_json(kDir + "/tokenizer_config.json") == expected["config"]);
  check_cases(Tokenizer::from_pretrained(kDir), expected, "tinyllama");
}

BOOST_AUTO_TEST_CASE(each_config_equals_autotokenizer) {
  const json expected = read_json(tokenizer_fixture("llama2_style/expected_pretrained.json"));
  BOOST_TEST(expected["configs"].size() == 4u);
  for (const json& c : expected["configs"]) {
    BOOST_TEST(c["tokenizer_class"] == "LlamaTokenizer");
    const TempDir dir;
    write_directory(dir, c["config"]);
    check_cases(Tokenizer::from_pretrained(dir.dir.string()), c, c["name"]);
  }
}

// Where the class and the file differ, written out (HF's tokens of the fixture; its small
// vocabulary has no "▁x").
BOOST_AUTO_TEST_CASE(class_differs_from_file) {
  const Tokenizer file = Tokenizer::from_file(kFile);
  const Tokenizer dir = Tokenizer::from_pretrained(kDir);
  auto tokens = [](const Tokenizer& tok, const std::string& text) {
    std::string out;
    for (std::uint32_t id : tok.encode(text, {.add_special_tokens = false}))
      out += (out.empty() ? "" : "|") + *tok.id_to_token(id);
    return out;
  };
  // Metaspace's "first": no "▁" after an added token, nor before a leading one.
  BOOST_TEST(tokens(file, "a<s>b") == "▁a|<s>|▁b");
  BOOST_TEST(tokens(dir, "a<s>b") == "▁a|<s>|b");
  BOOST_TEST(tokens(file, " x") == "▁|▁|x");
  BOOST_TEST(tokens(dir, " x") == "▁|x");
  // No normalizer: "<custom>" (normalized) is matched as written, after a letter too.
  BOOST_TEST(tokens(file, "x<custom>") == "▁|x|<0x3C>|c|ust|o|m|>");
  BOOST_TEST(tokens(dir, "x<custom>") == "▁|x|<custom>");
  BOOST_TEST(dir.decode(dir.encode("x<custom>")) == "<s> x<custom>");
}

// A bare tokenizer.json, a directory without tokenizer_config.json and one naming another
// class: the file as it is (tokenizers.Tokenizer.from_file; AutoTokenizer's TokenizersBackend).
BOOST_AUTO_TEST_CASE(file_as_it_is_otherwise) {
  const json cases = read_json(tokenizer_fixture("llama2_style/expected.json"))["cases"];
  const TempDir bare, other;
  std::filesystem::copy_file(kFile, bare.path("tokenizer.json"));
  write_directory(other, {{"tokenizer_class", "PreTrainedTokenizerFast"}, {"legacy", true}});
  for (const std::string& path : {kFile, bare.dir.string(), other.dir.string()}) {
    const Tokenizer tok = Tokenizer::from_pretrained(path);
    for (const json& c : cases)
      BOOST_TEST(tok.encode(c["text"].get<std::string>()) == ids_of(c["ids"]),
                 boost::test_tools::per_element());
  }
}

// A named special token in the vocabulary but not added: transformers adds it as special
// (values from transformers 5.24 on pad_token "▁the").
BOOST_AUTO_TEST_CASE(named_special_token_from_the_vocabulary) {
  const TempDir dir;
  write_directory(dir, {{"tokenizer_class", "LlamaTokenizer"}, {"pad_token", "▁the"}});
  const Tokenizer tok = Tokenizer::from_pretrained(dir.dir.string());
  const std::vector<std::uint32_t> ids = tok.encode("x the▁the y");
  BOOST_TEST(ids == (std::vector<std::uint32_t>{1, 328, 323, 350, 350, 398}),
             boost::test_tools::per_element());
  BOOST_TEST(tok.is_special(350));
  BOOST_TEST(tok.decode(ids) == "<s> x the the y");
  BOOST_TEST(tok.decode(ids, true) == "x y");
}

// Llama 2's config writes its special tokens as AddedToken objects: read by their content (the
// same ids as transformers 5.24 gives with this config, checked once: the defaults' ids).
BOOST_AUTO_TEST_CASE(special_tokens_as_objects) {
  const TempDir dir;
  const json token = {{"__type", "AddedToken"}, {"content", "<s>"}, {"lstrip", false},
                      {"normalized", false},    {"rstrip", false},  {"single_word", false}};
  write_directory(dir, {{"tokenizer_class", "LlamaTokenizer"}, {"bos_token", token}});
  const Tokenizer tok = Tokenizer::from_pretrained(dir.dir.string());
  for (const json& c : expected_config("defaults")["cases"])
    BOOST_TEST(tok.encode(c["text"].get<std::string>()) == ids_of(c["ids"]),
               boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(config_errors) {
  const TempDir dir;
  const std::string config = dir.path("tokenizer_config.json");
  BOOST_TEST(error_message([&] { Tokenizer::from_pretrained(dir.dir.string()); }) ==
             dir.dir.string() + ": no tokenizer.json in this directory");
  std::filesystem::copy_file(kFile, dir.path("tokenizer.json"));
  std::ofstream(config) << "{\"tokenizer_class\": ";
  BOOST_TEST(error_message([&] { Tokenizer::from_pretrained(dir.dir.string()); }) ==
             config + ": not valid JSON (at byte 21)");

  const json llama = {{"tokenizer_class", "LlamaTokenizer"}};
  auto with = [&](const std::string& key, const json& value) {
    json c = llama;
    c[key] = value;
    return c;
  };
  auto message = [](const std::string& what) { return "tokenizer_config.json: " + what; };
  auto tail = [](const std::string& s) { return s.substr(s.find("tokenizer_config.json: ")); };
  BOOST_TEST(tail(load_error(with("legacy", "yes"))) ==
             message("legacy: expected true or false, got \"yes\""));
  BOOST_TEST(tail(load_error(with("split_special_tokens", true))) ==
             message("split_special_tokens is true: not supported (false only)"));
  BOOST_TEST(tail(load_error(with("bos_token", "<bos>"))) ==
             message("bos_token: \"<bos>\" is neither an added token nor in the vocabulary "
                     "(transformers would give it a new id)"));
  BOOST_TEST(tail(load_error(with("added_tokens_decoder", {{"x", {{"content", "<s>"}}}}))) ==
             message("added_tokens_decoder.x: the key is not a token id"));
  BOOST_TEST(tail(load_error(
                 with("added_tokens_decoder", {{"1", {{"content", "<s>"}, {"colour", "red"}}}}))) ==
             message("added_tokens_decoder.1.colour is \"red\": not supported (a field this "
                     "tokenizer does not know)"));
}
