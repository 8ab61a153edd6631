// models/tokenizer/tokenizer.h on SentencePiece-style tokenizer.json files (Llama 2, TinyLlama,
// Mistral 7B, Gemma) against Hugging Face tokenizers, on the fixtures of
// tools/torch_reference/make_tokenizer_fixtures.py: llama2_style (normalizer Prepend("▁") +
// Replace(" " -> "▁"), no pre-tokenizer), metaspace_style (Metaspace, prepend_scheme first) and
// gemma_style (Replace(" " -> "▁"), Split(" ", MergedWithPrevious), no Strip),
// both with byte_fallback, <unk> and the Replace/ByteFallback/Fuse/Strip decoder; the same files
// with fields changed (expected.json's variants, lstrip/rstrip among them); HF's behaviours
// written out; every refused
// field by its message.
#define BOOST_TEST_MODULE models_tokenizer_sentencepiece
#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "models/tokenizer/tokenizer.h"
#include "tests/models/tokenizer_fixture.h"

using fsdp::InputError;
using fsdp::models::Tokenizer;
using fsdp::test::check_against_hf;
using fsdp::test::error_message;
using fsdp::test::Ids;
using fsdp::test::ids_of;
using fsdp::test::read_json;
using fsdp::test::tokenizer_fixture;
using nlohmann::json;

namespace {

json style_json(const std::string& style) {
  return read_json(tokenizer_fixture(style + "/tokenizer.json"));
}

// The file with a variant's fields set and removed (JSON pointers), as the fixture script does.
json edited(json j, const json& variant) {
  if (variant.contains("set"))
    for (const auto& [pointer, value] : variant["set"].items())
      j[json::json_pointer(pointer)] = value;
  if (variant.contains("remove"))
    for (const json& pointer : variant["remove"]) {
      const json::json_pointer p(pointer.get<std::string>());
      j[p.parent_pointer()].erase(p.back());
    }
  return j;
}

// The tokens of text's ids, joined by "|" (as HF's Encoding.tokens, for model tokens).
std::string tokens_of(const Tokenizer& tok, const std::string& text) {
  std::string out;
  for (std::uint32_t id : tok.encode(text, {.add_special_tokens = false}))
    out += (out.empty() ? "" : "|") + *tok.id_to_token(id);
  return out;
}

Ids ids_of_tokens(const Tokenizer& tok, const std::vector<std::string>& tokens) {
  Ids ids;
  for (const std::string& t : tokens) ids.push_back(*tok.token_to_id(t));
  return ids;
}

}  // namespace

BOOST_AUTO_TEST_CASE(llama2_style_equals_hf) {
  check_against_hf("llama2_style");
}

BOOST_AUTO_TEST_CASE(metaspace_style_equals_hf) {
  check_against_hf("metaspace_style");
}

// Gemma's form: Replace(" " -> "▁") without Prepend, Split(" ", MergedWithPrevious) (its
// pre-tokens of raw texts checked), no Strip in the decoder, "<bos> $A"; and the directory with
// its tokenizer_config.json naming GemmaTokenizer, which transformers 5's AutoTokenizer reads as
// the file (make_tokenizer_fixtures.py checks that): the file's ids.
BOOST_AUTO_TEST_CASE(gemma_style_equals_hf) {
  check_against_hf("gemma_style");
  const Tokenizer dir = Tokenizer::from_pretrained(tokenizer_fixture("gemma_style"));
  const json expected = read_json(tokenizer_fixture("gemma_style/expected.json"));
  for (const json& c : expected["cases"]) {
    const std::string text = c["text"];
    BOOST_TEST(dir.encode(text) == ids_of(c["ids"]), text);
  }
}

// Each variant of expected.json: the file with fields changed, and HF's encode and decodes.
BOOST_AUTO_TEST_CASE(changed_fields_equal_hf) {
  int variants = 0;
  for (const std::string style : {"llama2_style", "metaspace_style"}) {
    const json base = style_json(style);
    const json expected = read_json(tokenizer_fixture(style + "/expected.json"));
    for (const json& variant : expected["variants"]) {
      const std::string name = variant["name"];
      const Tokenizer tok = Tokenizer::from_json(edited(base, variant), name);
      ++variants;
      for (const auto& [text, r] : variant["results"].items()) {
        BOOST_TEST_CONTEXT(style << " " << name << " text '" << text << "'") {
          BOOST_TEST(tok.encode(text) == ids_of(r["ids"]), boost::test_tools::per_element());
          BOOST_TEST(tok.decode(ids_of(r["ids"])) == r["decode"].get<std::string>());
          BOOST_TEST(tok.decode(ids_of(r["ids"]), true) ==
                     r["decode_skip_special"].get<std::string>());
        }
      }
    }
  }
  BOOST_TEST(variants == 9);
}

// Llama 2's normalizer puts "▁" before every stretch of text between added tokens and before a
// text that already starts with a space or "▁"; Metaspace's "first" only before the text's own
// start, and not where it starts with "▁" (or a space) already.
BOOST_AUTO_TEST_CASE(prepend_per_stretch_or_first) {
  const Tokenizer l = Tokenizer::from_file(tokenizer_fixture("llama2_style/tokenizer.json"));
  const Tokenizer m = Tokenizer::from_file(tokenizer_fixture("metaspace_style/tokenizer.json"));
  BOOST_TEST(tokens_of(l, "Hello<s>world") == "▁|H|el|lo|<s>|▁w|or|l|d");
  BOOST_TEST(tokens_of(m, "Hello<s>world") == "▁|H|el|lo|<s>|w|or|l|d");
  BOOST_TEST(tokens_of(l, " <s> a") == "▁|▁|<s>|▁|▁a");
  BOOST_TEST(tokens_of(m, " <s> a") == "▁|<s>|▁a");
  BOOST_TEST(tokens_of(l, "▁x") == "▁|▁|x");
  BOOST_TEST(tokens_of(m, "▁x") == "▁|x");
  BOOST_TEST(l.encode("").size() == 1u);  // <s> alone: nothing to prepend to
  BOOST_TEST(l.encode("", {.add_special_tokens = false}).empty());
  // A normalized added token is found as its normalized content ("▁<custom>" in Llama 2's
  // form, so not after a letter) and decoded from it.
  const std::uint32_t custom = *l.token_to_id("<custom>");
  BOOST_TEST(l.encode("<custom>", {.add_special_tokens = false}) == Ids{custom});
  BOOST_TEST(tokens_of(l, "x<custom>") == "▁|x|<0x3C>|c|ust|o|m|>");
  BOOST_TEST(tokens_of(m, "x<custom>") == "▁|x|<custom>");
  BOOST_TEST(l.decode(Ids{*l.token_to_id("▁a"), custom}) == "a <custom>");
  BOOST_TEST(m.decode(Ids{*m.token_to_id("▁a"), custom}) == "a<custom>");
}

// A character outside the vocabulary: its bytes' "<0xXX>" tokens; without them, <unk> (a run
// fused into one with fuse_unk), and a pending <unk> comes after the bytes of the characters
// that follow it until a vocabulary character, as tokenizers' merge_word does.
BOOST_AUTO_TEST_CASE(byte_fallback_and_unk) {
  const json base = style_json("llama2_style");
  const Tokenizer tok = Tokenizer::from_json(base, "base");
  BOOST_TEST(tokens_of(tok, "日") == "▁|<0xE6>|<0x97>|<0xA5>");
  json missing = base;
  missing["model"]["vocab"]["<F0>"] = missing["model"]["vocab"]["<0xF0>"];  // keep the ids
  missing["model"]["vocab"].erase("<0xF0>");
  const Tokenizer m = Tokenizer::from_json(missing, "missing");
  BOOST_TEST(tokens_of(m, "😀日x") == "▁|<0xE6>|<0x97>|<0xA5>|<unk>|x");
  BOOST_TEST(tokens_of(m, "a😀😀") == "▁a|<unk>");
  json no_bytes = base;
  no_bytes["model"]["byte_fallback"] = false;
  const Tokenizer fused = Tokenizer::from_json(no_bytes, "fused");
  BOOST_TEST(tokens_of(fused, "😀日x") == "▁|<unk>|x");
  no_bytes["model"]["fuse_unk"] = false;
  const Tokenizer unfused = Tokenizer::from_json(no_bytes, "unfused");
  BOOST_TEST(tokens_of(unfused, "😀日x") == "▁|<unk>|<unk>|x");
  const Ids unk_x = unfused.encode("😀日x");
  BOOST_TEST(unfused.decode(unk_x) == "<s> <unk><unk>x");
  BOOST_TEST(unfused.decode(unk_x, /*skip_special_tokens=*/true) == "x");
}

// lstrip/rstrip: the whitespace around a match (Unicode White_Space, not "▁") is the token's.
BOOST_AUTO_TEST_CASE(lstrip_and_rstrip_take_the_whitespace_around) {
  json j = style_json("metaspace_style");
  BOOST_TEST_REQUIRE(j["added_tokens"][4]["content"] == "<pad>");
  j["added_tokens"][4]["lstrip"] = true;
  j["added_tokens"][4]["rstrip"] = true;
  const Tokenizer tok = Tokenizer::from_json(j, "t.json");
  BOOST_TEST(tokens_of(tok, "a \t<pad>\n\u3000b") == "▁a|<pad>|b");
  BOOST_TEST(tokens_of(tok, "a <pad> <pad> b") == "▁a|<pad>|<pad>|b");
}

// ByteFallback: a run of byte tokens that is valid UTF-8 becomes its text, any other run one
// U+FFFD per byte; Strip takes one leading space of the whole text; Metaspace's decoder drops
// "▁" in the first token only.
BOOST_AUTO_TEST_CASE(decoders_as_hf) {
  const Tokenizer tok = Tokenizer::from_file(tokenizer_fixture("llama2_style/tokenizer.json"));
  BOOST_TEST(tok.decode(ids_of_tokens(tok, {"<0xE6>", "<0x97>"})) == "\uFFFD\uFFFD");
  BOOST_TEST(tok.decode(ids_of_tokens(tok, {"▁", "<0xE6>", "<0x97>", "<0xA5>"})) == "日");
  BOOST_TEST(tok.decode(ids_of_tokens(tok, {"<0xE6>", "▁", "<0x97>"})) == "\uFFFD \uFFFD");
  BOOST_TEST(tok.decode(ids_of_tokens(tok, {"▁", "▁a"})) == " a");
  json j = style_json("metaspace_style");
  j["decoder"] = {
      {"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", false}};
  const Tokenizer m = Tokenizer::from_json(j, "t.json");
  BOOST_TEST(m.decode(ids_of_tokens(m, {"▁", "▁a"})) == " a");
  BOOST_TEST(m.decode(ids_of_tokens(m, {"▁a", "▁a"})) == "a a");
  BOOST_TEST(m.decode(ids_of_tokens(m, {"<0xE6>", "<0x97>", "<0xA5>"})) == "<0xE6><0x97><0xA5>");
}

// Llama 2's form gives back any text without added tokens or "▁": decode(encode(text)) == text.
BOOST_AUTO_TEST_CASE(llama2_style_round_trips_random_text) {
  const Tokenizer tok = Tokenizer::from_file(tokenizer_fixture("llama2_style/tokenizer.json"));
  std::mt19937 rng(26);
  const std::vector<std::string> pool{"a", "b", " ",  "  ", "\n",   "\t",   "\r", "e",   "<",
                                      ">", "é", "日", "😀",  "\x01", "\x7f", "th", "ing", "1"};
  for (int i = 0; i < 2000; ++i) {
    std::string text;
    for (int k = int(rng() % 24); k > 0; --k) text += pool[rng() % pool.size()];
    BOOST_TEST(tok.decode(tok.encode(text), /*skip_special_tokens=*/true) == text);
  }
}

// Fields of SentencePiece-style files this does not implement are refused by name.
BOOST_AUTO_TEST_CASE(unsupported_fields_are_refused_by_name) {
  auto load_with = [](const std::string& style, auto&& edit) {
    json j = style_json(style);
    edit(j);
    return error_message([&] { Tokenizer::from_json(j, "t.json"); });
  };
  const std::string l = "llama2_style", m = "metaspace_style";
  BOOST_TEST(load_with(l,
                       [](json& j) {
                         j["normalizer"]["normalizers"][1]["pattern"] = {{"Regex", "\\s"}};
                       }) ==
             "t.json: normalizer.normalizers[1].pattern is {\"Regex\":\"\\\\s\"}: not "
             "supported (a {\"String\": ...} pattern)");
  BOOST_TEST(load_with(l,
                       [](json& j) {
                         j["normalizer"]["normalizers"][0] = {{"type", "NFKC"}};
                       }) ==
             "t.json: normalizer.normalizers[0] is {\"type\":\"NFKC\"}: not supported "
             "(null, Prepend, Replace, NFC, NFD, or a Sequence of them)");
  BOOST_TEST(
      load_with(l, [](json& j) { j["normalizer"]["normalizers"][1]["pattern"]["String"] = ""; }) ==
      "t.json: normalizer.normalizers[1].pattern.String is \"\": not supported (a "
      "non-empty string)");
  BOOST_TEST(load_with(l, [](json& j) { j["model"]["unk_token"] = "<nope>"; }) ==
             "t.json: model.unk_token: \"<nope>\" is not in the vocabulary");
  BOOST_TEST(load_with(l,
                       [](json& j) {
                         j["model"]["byte_fallback"] = false;
                         j["model"]["unk_token"] = nullptr;
                       }) ==
             "t.json: pre_tokenizer is null: not supported (without a ByteLevel step, the "
             "model needs byte_fallback with the 256 <0xXX> tokens, or an unk_token)");
  BOOST_TEST(load_with(m, [](json& j) { j["pre_tokenizer"]["prepend_scheme"] = "sometimes"; }) ==
             "t.json: pre_tokenizer.prepend_scheme is \"sometimes\": not supported "
             "(\"always\", \"first\" or \"never\")");
  BOOST_TEST(load_with(m, [](json& j) { j["pre_tokenizer"]["replacement"] = "▁▁"; }) ==
             "t.json: pre_tokenizer.replacement: expected one character, got \"▁▁\"");
  BOOST_TEST(load_with(m, [](json& j) { j["pre_tokenizer"]["add_prefix_space"] = false; }) ==
             "t.json: pre_tokenizer.add_prefix_space: false does not match prepend_scheme (it "
             "needs \"never\")");
  BOOST_TEST(load_with(m, [](json& j) { j["pre_tokenizer"]["dropout"] = 0.5; }) ==
             "t.json: pre_tokenizer.dropout is 0.5: not supported (a field this tokenizer does "
             "not know)");
  BOOST_TEST(load_with(l, [](json& j) { j["decoder"]["decoders"][3]["content"] = "ab"; }) ==
             "t.json: decoder.decoders[3].content: expected one character, got \"ab\"");
  BOOST_TEST(load_with(l, [](json& j) { j["decoder"]["decoders"][3]["start"] = -1; }) ==
             "t.json: decoder.decoders[3].start: expected a count of characters, got -1");
  BOOST_TEST(load_with(l, [](json& j) { j["decoder"]["decoders"][1]["x"] = 1; }) ==
             "t.json: decoder.decoders[1].x is 1: not supported (a field this tokenizer does not "
             "know)");
  BOOST_TEST(load_with(l,
                       [](json& j) {
                         j["decoder"]["decoders"][0]["pattern"] = {{"Regex", "▁"}};
                       }) ==
             "t.json: decoder.decoders[0].pattern is {\"Regex\":\"▁\"}: not supported (a "
             "{\"String\": ...} pattern)");
  BOOST_TEST(load_with(l, [](json& j) { j["added_tokens"][1]["single_word"] = true; }) ==
             "t.json: added_tokens[1].single_word is true: not supported (false only)");
}
