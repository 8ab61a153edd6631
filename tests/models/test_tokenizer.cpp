// models/tokenizer/tokenizer.h against Hugging Face tokenizers on the fixtures of
// tools/torch_reference/make_tokenizer_fixtures.py (a GPT-2-style and a Llama-3-style tokenizer):
// encode with and without special tokens and with special tokens split, decode with and without
// skip_special_tokens, lossy decoding, pre-tokens, ignore_merges; hf-models.md's split cases;
// every refused field of a tokenizer.json by its exact message.
#define BOOST_TEST_MODULE models_tokenizer
#include <boost/test/unit_test.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "core/input_error.h"
#include "models/tokenizer/tokenizer.h"
#include "models/tokenizer/unicode_classes.h"
#include "tests/models/tokenizer_fixture.h"

using fsdp::InputError;
using fsdp::models::EncodeOptions;
using fsdp::models::Tokenizer;
using nlohmann::json;
using Ids = std::vector<std::uint32_t>;

namespace {

using fsdp::test::check_against_hf;
using fsdp::test::error_message;
using fsdp::test::ids_of;
using fsdp::test::read_json;

std::string fixture(const std::string& name) {
  return fsdp::test::tokenizer_fixture(name);
}

Tokenizer gpt2() {
  return Tokenizer::from_file(fixture("gpt2_style/tokenizer.json"));
}
Tokenizer llama3() {
  return Tokenizer::from_file(fixture("llama3_style/tokenizer.json"));
}

}  // namespace

BOOST_AUTO_TEST_CASE(gpt2_style_equals_hf) {
  check_against_hf("gpt2_style");
}

BOOST_AUTO_TEST_CASE(llama3_style_equals_hf) {
  check_against_hf("llama3_style");
}

// The fixture's vocabulary has "zqxj", which no merge reaches: whole with ignore_merges (the
// file's setting), in pieces without; both as HF tokenizers gives them.
BOOST_AUTO_TEST_CASE(ignore_merges_changes_the_result_as_in_hf) {
  json j = read_json(fixture("llama3_style/tokenizer.json"));
  const json expected = read_json(fixture("llama3_style/expected.json"));
  const Tokenizer with = Tokenizer::from_json(j, "with");
  j["model"]["ignore_merges"] = false;
  const Tokenizer without = Tokenizer::from_json(j, "without");
  const std::uint32_t zqxj = *with.token_to_id("zqxj");
  BOOST_TEST(with.encode("zqxj", {.add_special_tokens = false}) == Ids{zqxj});
  BOOST_TEST(without.encode("zqxj", {.add_special_tokens = false}).size() > 1u);
  int differ = 0;
  for (const json& c : expected["cases"]) {
    const std::string text = c["text"];
    const Ids ids = without.encode(text, {.add_special_tokens = false});
    BOOST_TEST(ids == ids_of(expected["ids_without_ignore_merges"][text]),
               boost::test_tools::per_element());
    differ += ids != ids_of(c["ids_no_special"]);
  }
  BOOST_TEST(differ > 0);  // the flag matters on these texts (zqxj among them)
}

// hf-models.md section 6's pre-tokenizer cases, written out.
BOOST_AUTO_TEST_CASE(pre_tokenizer_split_cases) {
  using V = std::vector<std::string>;
  const Tokenizer g = gpt2(), l = llama3();
  // "\s+(?!\S)" leaves the last space of a run to the next word.
  BOOST_TEST(g.pre_tokenize("a   b") == (V{"a", "ĠĠ", "Ġb"}), boost::test_tools::per_element());
  BOOST_TEST(l.pre_tokenize("a   b") == (V{"a", "ĠĠ", "Ġb"}), boost::test_tools::per_element());
  // GPT-2's contractions are case-sensitive, Llama 3's are not.
  BOOST_TEST(g.pre_tokenize("IT'S") == (V{"IT", "'", "S"}), boost::test_tools::per_element());
  BOOST_TEST(l.pre_tokenize("IT'S") == (V{"IT", "'S"}), boost::test_tools::per_element());
  BOOST_TEST(g.pre_tokenize("it's") == (V{"it", "'s"}), boost::test_tools::per_element());
  // Llama 3: digits in runs of 1-3, with no space before them.
  BOOST_TEST(g.pre_tokenize(" 12345") == (V{"Ġ12345"}), boost::test_tools::per_element());
  BOOST_TEST(l.pre_tokenize(" 12345") == (V{"Ġ", "123", "45"}), boost::test_tools::per_element());
  // CRLF: GPT-2 splits \r from \n before a word; Llama 3 keeps line breaks together.
  BOOST_TEST(g.pre_tokenize("Line one\r\nLine two\r\n\r\n") ==
                 (V{"Line", "Ġone", "č", "Ċ", "Line", "Ġtwo", "čĊčĊ"}),
             boost::test_tools::per_element());
  BOOST_TEST(l.pre_tokenize("Line one\r\nLine two\r\n\r\n") ==
                 (V{"Line", "Ġone", "čĊ", "Line", "Ġtwo", "čĊčĊ"}),
             boost::test_tools::per_element());
  // Llama 3: one non-letter, non-digit, non-newline character may lead a word.
  BOOST_TEST(l.pre_tokenize("\ttabs") == (V{"ĉtabs"}), boost::test_tools::per_element());
}

// Special tokens: leftmost-longest ("<|eot_id|>!" over "<|eot_id|>"), the template's BOS only
// with add_special_tokens, and literal specials as text with split_special_tokens.
// PCRE2 10.42's Unicode 14 tables against tokenizers' Oniguruma (Unicode 16): \p{L}, \p{N} gain
// the letters and digits PCRE2 lacks, \s and \S become Oniguruma's White_Space list (no U+180E);
// the fixtures' last CASES check the splits against HF.
BOOST_AUTO_TEST_CASE(regex_classes_are_written_as_oniguruma_reads_them) {
  using fsdp::models::with_oniguruma_classes;
  const std::string ws =
      R"(\x{9}-\x{D}\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}-\x{2029}\x{202F}\x{205F})"
      R"(\x{3000})";
  BOOST_TEST(with_oniguruma_classes(R"(\s+(?!\S))") == "[" + ws + "]+(?![^" + ws + "])");
  BOOST_TEST(with_oniguruma_classes(R"([^\s\p{N}])") ==
             "[^" + ws + R"(\p{N}\x{10D40}-\x{10D49}\x{116D0}-\x{116E3}\x{11BF0}-\x{11BF9})" +
                 R"(\x{11F50}-\x{11F59}\x{16130}-\x{16139}\x{16D70}-\x{16D79}\x{1CCF0}-\x{1CCF9})" +
                 R"(\x{1D2C0}-\x{1D2D3}\x{1E4F0}-\x{1E4F9}\x{1E5F1}-\x{1E5FA}])");
  const std::string letters = with_oniguruma_classes(R"( ?\p{L}+)");
  BOOST_TEST(letters.starts_with(R"( ?[\p{L}\x{1C89}-\x{1C8A}\x{A7CB}-\x{A7CD})"));
  BOOST_TEST(letters.ends_with(R"(\x{2EBF0}-\x{2EE5D}\x{31350}-\x{323AF}]+)"));
  BOOST_TEST(with_oniguruma_classes(R"(\P{L})").starts_with(R"([^\p{L}\x{1C89})"));
  // Escaped backslashes, quoted text, POSIX classes, a leading ']' and other escapes stay.
  for (const std::string same : {R"(\\s)", R"(\Q\s\p{L}\E)", R"([[:alpha:]x])", R"(\x{41}\p{Lu})",
                                 R"([\S])", R"((?i:'s|'t))"})
    BOOST_TEST(with_oniguruma_classes(same) == same);
  BOOST_TEST(with_oniguruma_classes(R"([]\s])") == "[]" + ws + "]");
}

BOOST_AUTO_TEST_CASE(added_tokens_leftmost_longest_and_template) {
  const Tokenizer l = llama3();
  const std::uint32_t bos = *l.token_to_id("<|begin_of_text|>");
  const std::uint32_t eot = *l.token_to_id("<|eot_id|>");
  const std::uint32_t eot_bang = *l.token_to_id("<|eot_id|>!");
  BOOST_TEST(l.is_special(bos));
  BOOST_TEST(!l.is_special(*l.token_to_id("<custom>")));
  BOOST_TEST(l.encode("<|eot_id|>!<|eot_id|>", {.add_special_tokens = false}) ==
             (Ids{eot_bang, eot}));
  BOOST_TEST(l.encode("") == Ids{bos});
  BOOST_TEST(l.encode("", {.add_special_tokens = false}).empty());
  const Ids split =
      l.encode("<|eot_id|>", {.add_special_tokens = false, .split_special_tokens = true});
  BOOST_TEST(split.size() > 1u);
  BOOST_TEST(l.decode(split) == "<|eot_id|>");
  BOOST_TEST(l.decode(Ids{bos, eot}, /*skip_special_tokens=*/true) == "");
}

// Round trips on text the fixtures do not have: a long run of spaces (one pre-token of a
// million characters, through PCRE2's JIT), every byte value's character, mixed scripts.
BOOST_AUTO_TEST_CASE(decode_of_encode_is_the_text) {
  const std::string spaces(1 << 20, ' ');
  std::string all_chars;
  for (char32_t c = 1; c < 0x800; ++c) {
    if (c >= 0x80) {
      all_chars += char(0xC0 | (c >> 6));
      all_chars += char(0x80 | (c & 0x3F));
    } else {
      all_chars += char(c);
    }
  }
  for (const Tokenizer& tok : {gpt2(), llama3()}) {
    for (const std::string& text : {spaces, spaces + "x", all_chars,
                                    std::string("Mixed: Ωmega 日本 🦀 \r\n\t\v\f end")}) {
      const Ids ids = tok.encode(text, {.add_special_tokens = false});
      BOOST_TEST((tok.decode(ids) == text), tok.source() << " " << text.size() << " bytes");
    }
  }
}

// The word cache is shared: threads encoding at once get what one thread gets.
BOOST_AUTO_TEST_CASE(encode_from_threads_equals_serial) {
  const Tokenizer tok = gpt2();
  std::string text;
  for (int i = 0; i < 200; ++i) text += "word" + std::to_string(i % 37) + " and more words, ";
  const Ids serial = tok.encode(text);
  std::vector<Ids> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back([&, t] { got[t] = tok.encode(text); });
  for (auto& t : threads) t.join();
  for (const Ids& g : got) BOOST_TEST(g == serial);
}

BOOST_AUTO_TEST_CASE(invalid_utf8_names_the_byte_offset) {
  const Tokenizer tok = gpt2();
  BOOST_TEST(error_message([&] {
               tok.encode(
                   "abc\xFF"
                   "def");
             }) == "the text is not valid UTF-8: byte 0xFF at offset 3");
  // A truncated sequence, an overlong form, a surrogate.
  BOOST_TEST(error_message([&] { tok.encode("ok \xE6\x97"); }) ==
             "the text is not valid UTF-8: byte 0xE6 at offset 3");
  BOOST_TEST(error_message([&] { tok.encode("\xC0\xAF"); }) ==
             "the text is not valid UTF-8: byte 0xC0 at offset 0");
  BOOST_TEST(error_message([&] { tok.encode("12\xED\xA0\x80"); }) ==
             "the text is not valid UTF-8: byte 0xED at offset 2");
}

BOOST_AUTO_TEST_CASE(decode_refuses_an_id_of_no_token) {
  const Tokenizer tok = gpt2();
  const std::uint32_t v = tok.vocab_size();
  BOOST_TEST(error_message([&] {
               tok.decode(Ids{1, 2, v});
             }) == fixture("gpt2_style/tokenizer.json") + ": token id " + std::to_string(v) +
                       " (at index 2) is not in the vocabulary");
}

// A field of tokenizer.json this tokenizer does not implement is refused, naming the file, the
// field and its value; never ignored.
BOOST_AUTO_TEST_CASE(unsupported_fields_are_refused_by_name) {
  const json base = read_json(fixture("llama3_style/tokenizer.json"));
  auto load_with = [&](auto&& edit) {
    json j = base;
    edit(j);
    return error_message([&] { Tokenizer::from_json(j, "t.json"); });
  };
  BOOST_TEST(load_with([](json& j) {
               j["normalizer"] = {{"type", "NFKC"}};
             }) ==
             "t.json: normalizer is {\"type\":\"NFKC\"}: not supported (null, Prepend, Replace, "
             "NFC, NFD, or a Sequence of them)");
  BOOST_TEST(load_with([](json& j) {
               j["truncation"] = {{"max_length", 8}};
             }) == "t.json: truncation is {\"max_length\":8}: not supported (null only)");
  BOOST_TEST(load_with([](json& j) { j["model"]["type"] = "WordPiece"; }) ==
             "t.json: model.type is \"WordPiece\": not supported (BPE only)");
  BOOST_TEST(load_with([](json& j) { j["model"]["unk_token"] = "<unk>"; }) ==
             "t.json: model.unk_token: \"<unk>\" is not in the vocabulary");
  BOOST_TEST(load_with([](json& j) { j["model"]["dropout"] = 0.1; }) ==
             "t.json: model.dropout is 0.1: not supported (null only)");
  BOOST_TEST(load_with([](json& j) { j["model"]["continuing_subword_prefix"] = "##"; }) ==
             "t.json: model.continuing_subword_prefix is \"##\": not supported (null or \"\" "
             "only)");
  BOOST_TEST(load_with([](json& j) { j["model"]["shiny"] = 1; }) ==
             "t.json: model.shiny is 1: not supported (a field this tokenizer does not know)");
  BOOST_TEST(load_with([](json& j) {
               j["pre_tokenizer"] = {{"type", "Whitespace"}};
             }) ==
             "t.json: pre_tokenizer.type is \"Whitespace\": not supported (null, ByteLevel, "
             "Metaspace, Split with a Regex and behavior Isolated, Split with a String and "
             "behavior Isolated or MergedWithPrevious, or a Sequence of them)");
  BOOST_TEST(
      load_with([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; }) ==
      "t.json: pre_tokenizer.pretokenizers[0].behavior is \"Removed\": not "
      "supported (Isolated only)");
  BOOST_TEST(load_with([](json& j) {
               j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Literal", " "}};
             }) ==
             "t.json: pre_tokenizer.pretokenizers[0].pattern is {\"Literal\":\" \"}: not "
             "supported (a {\"Regex\": ...} or {\"String\": ...} pattern)");
  BOOST_TEST(load_with([](json& j) {
               j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", ""}};
             }) ==
             "t.json: pre_tokenizer.pretokenizers[0].pattern.String is \"\": not supported (a "
             "non-empty string)");
  BOOST_TEST(load_with([](json& j) {
               j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", " "}};
               j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "MergedWithNext";
             }) ==
             "t.json: pre_tokenizer.pretokenizers[0].behavior is \"MergedWithNext\": not "
             "supported (Isolated or MergedWithPrevious)");
  BOOST_TEST(load_with([](json& j) {
               j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a";
             }) ==
             "t.json: pre_tokenizer.pretokenizers[0].pattern.Regex: PCRE2 cannot compile "
             "the regex at offset 2: missing closing parenthesis");
  BOOST_TEST(load_with([](json& j) {
               j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true;
             }) ==
             "t.json: pre_tokenizer.pretokenizers[1].add_prefix_space is true: not "
             "supported (false only)");
  // Split alone: no byte-level step (keys print sorted).
  BOOST_TEST(
      load_with([](json& j) { j["pre_tokenizer"] = j["pre_tokenizer"]["pretokenizers"][0]; }) ==
      "t.json: pre_tokenizer is {\"behavior\":\"Isolated\",\"invert\":false,\"pattern\":"
      "{\"Regex\":...: not supported (without a ByteLevel step, the model needs byte_fallback "
      "with the 256 <0xXX> tokens, or an unk_token)");
  BOOST_TEST(load_with([](json& j) { j["added_tokens"][0]["single_word"] = true; }) ==
             "t.json: added_tokens[0].single_word is true: not supported (false only)");
  BOOST_TEST(load_with([](json& j) {
               j["decoder"] = {{"type", "WordPiece"}};
             }) ==
             "t.json: decoder is {\"type\":\"WordPiece\"}: not supported (ByteLevel, "
             "Replace, ByteFallback, Fuse, Strip, Metaspace, or a Sequence of them)");
  BOOST_TEST(load_with([](json& j) { j["decoder"] = nullptr; }) ==
             "t.json: decoder is null: not supported (ByteLevel, Replace, ByteFallback, Fuse, "
             "Strip, Metaspace, or a Sequence of them)");
  BOOST_TEST(load_with([](json& j) {
               j["post_processor"] = {{"type", "BertProcessing"}};
             }) ==
             "t.json: post_processor.type is \"BertProcessing\": not supported (null, ByteLevel, "
             "TemplateProcessing, or a Sequence of them)");
  BOOST_TEST(load_with([](json& j) {
               j["model"]["merges"][0] = {"Ġ", "nope"};
             }) == "t.json: model.merges[0]: \"nope\" is not in the vocabulary");
  BOOST_TEST(load_with([](json& j) { j["model"]["merges"][0] = "Ġ"; }) ==
             "t.json: model.merges[0]: expected \"left right\", got \"Ġ\"");
  BOOST_TEST(load_with([](json& j) { j["model"]["vocab"]["a"] = -1; }) ==
             "t.json: model.vocab.a: expected a token id (an integer from 0 to 2^31-1), got -1");
  BOOST_TEST(load_with([](json& j) { j["model"]["vocab"]["a"] = 2147483648u; }) ==
             "t.json: model.vocab.a: expected a token id (an integer from 0 to 2^31-1), got "
             "2147483648");
  BOOST_TEST(load_with([](json& j) {
               j["model"]["vocab"]["a"] = 7;
             }).starts_with("t.json: model.vocab: id 7 is given to both "));
  BOOST_TEST(load_with([](json& j) { j.erase("model"); }) == "t.json: model: missing");
  BOOST_TEST(load_with([](json& j) { j["version"] = "2.0"; }) ==
             "t.json: version is \"2.0\": not supported (\"1.0\" only)");
  BOOST_TEST(
      load_with([](json& j) {
        j["post_processor"]["processors"][1]["special_tokens"]["<|begin_of_text|>"]["ids"] = {
            99999};
      }) ==
      "t.json: post_processor: the template's token id 99999 is not in the "
      "vocabulary");
  BOOST_TEST(load_with([](json& j) {
               j["post_processor"]["processors"][1]["single"][1] = {{"Sequence", {{"id", "B"}}}};
             }) ==
             "t.json: post_processor.processors[1].single[1].Sequence.id is \"B\": not "
             "supported (\"A\" once)");
}

// A character missing from the vocabulary (no unk_token) is an error, not dropped text.
BOOST_AUTO_TEST_CASE(a_character_outside_the_vocabulary_is_an_error) {
  json j = read_json(fixture("gpt2_style/tokenizer.json"));
  auto& vocab = j["model"]["vocab"];
  const json merges = j["model"]["merges"];
  j["model"]["merges"] = json::array();
  for (const json& m : merges) {  // keep the merges that do not involve "~"
    const std::string s = m;
    if (s.find('~') == std::string::npos) j["model"]["merges"].push_back(m);
  }
  for (auto it = vocab.begin(); it != vocab.end();) {
    if (it.key().find('~') != std::string::npos)
      it = vocab.erase(it);
    else
      ++it;
  }
  const Tokenizer tok = Tokenizer::from_json(j, "t.json");
  BOOST_TEST(error_message([&] { tok.encode("a~b"); }) ==
             "the character \"~\" of the pre-token \"~\" is not in the tokenizer's vocabulary "
             "(and it has no unk_token)");
}

BOOST_AUTO_TEST_CASE(file_errors_name_the_file) {
  BOOST_TEST(error_message([] { Tokenizer::from_file(FSDP_TOKENIZER_FIXTURES); }) ==
             std::string(FSDP_TOKENIZER_FIXTURES) + ": not a regular file");
  BOOST_TEST(error_message([] { Tokenizer::from_file("/nonexistent/tokenizer.json"); }) ==
             "/nonexistent/tokenizer.json: cannot open: No such file or directory");
  const std::string bad = fixture("corpus.txt");  // text, not JSON
  BOOST_TEST(error_message([&] {
               Tokenizer::from_file(bad);
             }).starts_with(bad + ": not valid JSON (at byte "));
}

// The legacy "a b" merges (the GPT-2 fixture's form) and the pair form give the same tokenizer.
BOOST_AUTO_TEST_CASE(legacy_and_pair_merges_agree) {
  json j = read_json(fixture("gpt2_style/tokenizer.json"));
  BOOST_TEST_REQUIRE(j["model"]["merges"][0].is_string());
  const Tokenizer legacy = Tokenizer::from_json(j, "legacy");
  for (json& m : j["model"]["merges"]) {
    const std::string s = m;
    m = json::array({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
  }
  const Tokenizer pairs = Tokenizer::from_json(j, "pairs");
  const std::string text = "The quick brown fox's 12345 Café 日本語 code(x) {y}\r\n";
  BOOST_TEST(legacy.encode(text) == pairs.encode(text));
}

// tokenizers numbers added tokens itself on loading (a model token's id, else the next after
// the model's vocabulary); a file whose ids disagree would load differently there: refused.
BOOST_AUTO_TEST_CASE(added_token_ids_that_hf_would_renumber_are_refused) {
  json j = read_json(fixture("llama3_style/tokenizer.json"));
  std::size_t n = 0;
  while (j["added_tokens"][n]["content"] != "<custom>") ++n;
  json& custom = j["added_tokens"][n];
  const std::uint32_t model_size = std::uint32_t(j["model"]["vocab"].size());
  BOOST_TEST(custom["id"] == model_size);
  custom["id"] = model_size + 5;
  BOOST_TEST(error_message([&] { Tokenizer::from_json(j, "t.json"); }) ==
             "t.json: added_tokens[" + std::to_string(n) + "].id is " +
                 std::to_string(model_size + 5) +
                 ", but Hugging Face tokenizers gives \"<custom>\" the id " +
                 std::to_string(model_size) + " (a model token's id, or the next one after the " +
                 "model's " + std::to_string(model_size) + " tokens)");
  j = read_json(fixture("llama3_style/tokenizer.json"));
  j["added_tokens"][0]["id"] = 7;  // <|begin_of_text|> is the model's token 0
  BOOST_TEST(error_message([&] { Tokenizer::from_json(j, "t.json"); })
                 .starts_with("t.json: added_tokens[0].id is 7, but Hugging Face tokenizers gives "
                              "\"<|begin_of_text|>\" "
                              "the id 0"));
}

// Ids may have holes: the largest allowed id costs no memory by its size.
BOOST_AUTO_TEST_CASE(a_sparse_vocabulary_up_to_the_largest_id) {
  json j = read_json(fixture("gpt2_style/tokenizer.json"));
  j["model"]["vocab"]["zz"] = 2147483647u;
  const Tokenizer tok = Tokenizer::from_json(j, "t.json");
  BOOST_TEST(tok.vocab_size() == 2147483648u);
  BOOST_TEST(tok.decode(Ids{2147483647u}) == "zz");
  BOOST_TEST(!tok.id_to_token(2147483646u).has_value());
}

// Random bytes (a fixed seed): invalid UTF-8 is refused naming its first bad byte, valid text
// comes back from decode(encode(text)) unchanged; nothing else happens.
BOOST_AUTO_TEST_CASE(random_bytes_are_refused_or_round_trip) {
  const Tokenizer tok = llama3();
  std::mt19937 rng(26);
  const std::string pool = std::string("ab '1\r\n\t<|>") + "\xC3\xA9\xE6\x97\xA5\xF0\x9F\x98\x80" +
                           "\x80\xBF\xC0\xC1\xED\xA0\xF4\x90\xF5\xFF";
  int refused = 0, round_trips = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string text(rng() % 24, ' ');
    for (char& c : text) c = pool[rng() % pool.size()];
    try {
      const Ids ids = tok.encode(text, {.add_special_tokens = false});
      BOOST_TEST(tok.decode(ids) == text);
      ++round_trips;
    } catch (const InputError& e) {
      BOOST_TEST(std::string(e.what()).starts_with("the text is not valid UTF-8: byte 0x"));
      ++refused;
    }
  }
  BOOST_TEST(refused > 100);
  BOOST_TEST(round_trips > 100);
}
