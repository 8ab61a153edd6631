// The fixtures of tools/torch_reference/make_tokenizer_fixtures.py for the tokenizer tests: a
// style's tokenizer.json and expected.json (HF tokenizers' results), and the comparison of every
// case of it with models::Tokenizer.
#pragma once

#include <boost/test/unit_test.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/input_error.h"
#include "models/tokenizer/tokenizer.h"
#include "tests/support/error_message.h"

namespace fsdp::test {

using Ids = std::vector<std::uint32_t>;

inline std::string tokenizer_fixture(const std::string& name) {
  return std::string(FSDP_TOKENIZER_FIXTURES) + "/" + name;
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  BOOST_TEST_REQUIRE(in.good(), path);
  return nlohmann::json::parse(in);
}

inline Ids ids_of(const nlohmann::json& j) {
  return j.get<Ids>();
}

// The message of the InputError fn throws, or "no error".
template <typename F>
std::string error_message(F&& fn) {
  return testing::error_message<InputError>(std::forward<F>(fn));
}

// Every case of a style's expected.json, encoded three ways and decoded two ways, its
// pre-tokens (where the file has a pre-tokenizer) and its lossy decodes.
inline void check_against_hf(const std::string& style) {
  using models::Tokenizer;
  const Tokenizer tok = Tokenizer::from_file(tokenizer_fixture(style + "/tokenizer.json"));
  const nlohmann::json expected = read_json(tokenizer_fixture(style + "/expected.json"));
  BOOST_TEST(tok.vocab_size() == expected["vocab_size"].get<std::uint32_t>());
  for (const nlohmann::json& c : expected["cases"]) {
    const std::string text = c["text"];
    BOOST_TEST_CONTEXT(style << " text '" << text << "'") {
      BOOST_TEST(tok.encode(text) == ids_of(c["ids"]), boost::test_tools::per_element());
      BOOST_TEST(tok.encode(text, {.add_special_tokens = false}) == ids_of(c["ids_no_special"]),
                 boost::test_tools::per_element());
      BOOST_TEST(tok.encode(text, {.add_special_tokens = false, .split_special_tokens = true}) ==
                     ids_of(c["ids_split_special"]),
                 boost::test_tools::per_element());
      BOOST_TEST(tok.decode(ids_of(c["ids"])) == c["decode"].get<std::string>());
      BOOST_TEST(tok.decode(ids_of(c["ids"]), true) == c["decode_skip_special"].get<std::string>());
      if (!expected["pre_tokens"].is_null())
        BOOST_TEST(
            tok.pre_tokenize(text) == expected["pre_tokens"][text].get<std::vector<std::string>>(),
            boost::test_tools::per_element());
    }
  }
  for (const nlohmann::json& c : expected["lossy"]) {
    BOOST_TEST_CONTEXT(style << " lossy decode of " << c["ids"].dump()) {
      BOOST_TEST(tok.decode(ids_of(c["ids"])) == c["decode"].get<std::string>());
    }
  }
}

}  // namespace fsdp::test
