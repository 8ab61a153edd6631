// models/tokenizer's NFC normalizer (utf8proc) on Qwen2's form against Hugging Face tokenizers:
// tests/fixtures/tokenizers/qwen2_style (NFC, Split(Qwen2's regex) + ByteLevel, BPE without byte
// fallback, ByteLevel post-processor and decoder; texts that NFC changes among its cases) and its
// NFD variant; where tokenizers' older Unicode tables differ, refused by message.
#define BOOST_TEST_MODULE models_tokenizer_nfc
#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "models/tokenizer/tokenizer.h"
#include "tests/models/tokenizer_fixture.h"

using fsdp::models::Tokenizer;
using fsdp::test::check_against_hf;
using fsdp::test::error_message;
using fsdp::test::Ids;
using fsdp::test::ids_of;
using fsdp::test::read_json;
using fsdp::test::tokenizer_fixture;
using nlohmann::json;

namespace {

json qwen2_json() {
  return read_json(tokenizer_fixture("qwen2_style/tokenizer.json"));
}

json with_normalizer(json j, const json& normalizer) {
  j["normalizer"] = normalizer;
  return j;
}

}  // namespace

BOOST_AUTO_TEST_CASE(qwen2_style_equals_hf) {
  check_against_hf("qwen2_style");
}

BOOST_AUTO_TEST_CASE(nfd_variant_equals_hf) {
  const json expected = read_json(tokenizer_fixture("qwen2_style/expected.json"));
  BOOST_TEST(expected["variants"].size() == 1u);
  for (const json& variant : expected["variants"]) {
    json j = qwen2_json();
    for (const auto& [pointer, value] : variant["set"].items())
      j[json::json_pointer(pointer)] = value;
    const Tokenizer tok = Tokenizer::from_json(j, variant["name"]);
    BOOST_TEST(variant["results"].size() >= 40u);
    for (const auto& [text, r] : variant["results"].items()) {
      BOOST_TEST_CONTEXT(variant["name"] << " text '" << text << "'") {
        BOOST_TEST(tok.encode(text) == ids_of(r["ids"]), boost::test_tools::per_element());
        BOOST_TEST(tok.decode(ids_of(r["ids"])) == r["decode"].get<std::string>());
      }
    }
  }
}

// NFC written out: a composed and a decomposed text are one text; what decode gives is NFC's.
BOOST_AUTO_TEST_CASE(composed_and_decomposed_encode_alike) {
  const Tokenizer tok = Tokenizer::from_json(qwen2_json(), "qwen2");
  const Tokenizer none = Tokenizer::from_json(with_normalizer(qwen2_json(), nullptr), "none");
  const std::string composed = "caf\u00e9 \u00c5 \uac01";
  for (const std::string decomposed :
       {"cafe\u0301 A\u030a \u1100\u1161\u11a8", "cafe\u0301 \u212b \u1100\u1161\u11a8"}) {
    BOOST_TEST(tok.encode(decomposed) == tok.encode(composed), boost::test_tools::per_element());
    BOOST_TEST(none.encode(decomposed) != none.encode(composed));
    BOOST_TEST(tok.decode(tok.encode(decomposed)) == composed);
  }
}

// tokenizers' tables are older than Unicode 12.1: Dives Akuru's U+11938 (Unicode 13) is
// refused, not normalized otherwise; NFKC and NFKD (134 characters differ) are refused when
// loading.
BOOST_AUTO_TEST_CASE(where_tables_differ_refused) {
  const Tokenizer nfc = Tokenizer::from_json(qwen2_json(), "qwen2");
  const Tokenizer nfd = Tokenizer::from_json(with_normalizer(qwen2_json(), {{"type", "NFD"}}), "d");
  const std::string why =
      " (tables before Unicode 12.1) leaves as it is and Unicode 13 and later change: refused "
      "rather than encoded otherwise";
  BOOST_TEST(error_message([&] { nfc.encode("a\U00011935\U00011930"); }) ==
             "the text has U+11935 U+11930 (Dives Akuru), which Hugging Face tokenizers' NFC" +
                 why);
  BOOST_TEST(error_message([&] { nfd.encode("\U00011938"); }) ==
             "the text has U+11938 (Dives Akuru), which Hugging Face tokenizers' NFD" + why);
  // Each alone, or apart: the same in both.
  BOOST_TEST(nfc.encode("\U00011938 \U00011935\u0301\U00011930").size() > 0u);
  BOOST_TEST(nfd.encode("\U00011935\U00011930").size() > 0u);
  BOOST_TEST(error_message([&] {
               Tokenizer::from_json(with_normalizer(qwen2_json(), {{"type", "NFKC"}}), "q.json");
             }) ==
             "q.json: normalizer is {\"type\":\"NFKC\"}: not supported (null, Prepend, "
             "Replace, NFC, NFD, or a Sequence of them)");
  BOOST_TEST(error_message([&] {
               Tokenizer::from_json(with_normalizer(qwen2_json(), {{"type", "NFC"}, {"extra", 1}}),
                                    "q.json");
             }) ==
             "q.json: normalizer.extra is 1: not supported (a field this tokenizer does not "
             "know)");
}
