// Generation: our greedy output equals transformers' greedy generate (with its cache) on every
// fixture model; EOS stops a row and pads it; the warpers' masks and probabilities exactly, in
// transformers' order; sampling by its frequencies and reproducible from a seed.
#define BOOST_TEST_MODULE models_generation
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/ops.h"
#include "models/auto_model.h"
#include "models/generation.h"
#include "models/load_weights.h"
#include "tests/models/hf_fixture.h"
#include "tests/support/error_message.h"

using namespace fsdp;
using namespace fsdp::models;
namespace bdata = boost::unit_test::data;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> logs(const std::vector<float>& probs) {
  std::vector<float> out;
  for (float p : probs) out.push_back(std::log(p));
  return out;
}

}  // namespace

BOOST_DATA_TEST_CASE(greedy_output_equals_transformers_generate,
                     bdata::make(testing::hf_fixture_models()), name) {
  auto model = testing::load_hf_fixture(name);
  const auto expected = testing::hf_expected(name);
  const Tensor& want = expected.at("greedy_ids");
  const Tensor prompt = expected.at("prompt_ids");
  GenerationOptions o;
  o.max_new_tokens = want.size(1) - prompt.size(1);
  const Tensor got = generate(*model, prompt, o);
  BOOST_TEST(got.to_int_vector() == want.to_int_vector(), boost::test_tools::per_element());
}

// Finished rows are padded with the config's pad_token_id (transformers' generation config takes
// it from config.json), the EOS where that is null; the other row runs on.
BOOST_DATA_TEST_CASE(finished_rows_are_padded_as_transformers_pads_them,
                     bdata::make(testing::hf_fixture_models()), name) {
  auto model = testing::load_hf_fixture(name);
  const auto expected = testing::hf_expected(name);
  GenerationOptions o;
  o.max_new_tokens = 10;
  o.eos_token_ids = std::vector<std::int64_t>{expected.at("greedy_ids").to_int_vector()[6]};
  BOOST_TEST(generate(*model, expected.at("eos_prompt_ids"), o).to_int_vector() ==
                 expected.at("eos_greedy_ids").to_int_vector(),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(eos_stops_a_row_and_pads_it_until_every_row_has_finished) {
  auto model = testing::load_hf_fixture("llama_gqa");
  const Tensor greedy = testing::hf_expected("llama_gqa").at("greedy_ids");  // prompt of 4
  const std::vector<std::int64_t> ids = greedy.to_int_vector();
  GenerationOptions o;
  o.max_new_tokens = 10;
  o.eos_token_ids = std::vector<std::int64_t>{ids[6]};  // its third new token
  // One row: generation stops right after the EOS.
  const Tensor one = generate(*model, narrow(greedy, 1, 0, 4), o);
  BOOST_TEST(one.to_int_vector() == std::vector<std::int64_t>(ids.begin(), ids.begin() + 7),
             boost::test_tools::per_element());
  // Two rows: the first finishes at the EOS and is padded (with pad_token_id) while the other,
  // whose greedy path never meets that id, runs to max_new_tokens.
  const Tensor other = from_vector(std::vector<std::int64_t>{5, 6, 7, 8}, {1, 4});
  GenerationOptions free = o;
  free.eos_token_ids = std::vector<std::int64_t>{};
  const auto other_ids = generate(*model, other, free).to_int_vector();
  BOOST_REQUIRE(std::find(other_ids.begin() + 4, other_ids.end(), ids[6]) == other_ids.end());
  o.pad_token_id = 0;
  const Tensor both = generate(*model, cat({narrow(greedy, 1, 0, 4), other}, 0), o);
  BOOST_TEST(both.shape() == (Shape{2, 14}));
  std::vector<std::int64_t> row0(ids.begin(), ids.begin() + 7);
  row0.resize(14, 0);
  const auto b = both.to_int_vector();
  BOOST_TEST(std::vector<std::int64_t>(b.begin(), b.begin() + 14) == row0,
             boost::test_tools::per_element());
  BOOST_TEST(std::vector<std::int64_t>(b.begin() + 14, b.end()) == other_ids,
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(the_length_is_capped_at_the_model_positions) {
  auto model = testing::load_hf_fixture("gpt2_tied");  // n_positions 32
  GenerationOptions o;
  o.max_new_tokens = 100;
  o.eos_token_ids = std::vector<std::int64_t>{};
  const Tensor prompt = from_vector(std::vector<std::int64_t>(30, 1), {1, 30});
  BOOST_TEST(generate(*model, prompt, o).size(1) == 33);  // the 33rd token is never fed back
  const Tensor long_prompt = from_vector(std::vector<std::int64_t>(33, 1), {1, 33});
  BOOST_TEST(testing::error_message<ValueError>([&] { generate(*model, long_prompt, o); }) ==
             "generate: the prompt's 33 tokens exceed the model's 32 positions");
}

// Past the config's positions as transformers' generate(max_new_tokens=10): Llama and Mistral
// have no position table and run on; GPT-2 stops at n_positions + 1 tokens (the last one is never
// fed back), where transformers' would next fail on its table. The fixtures' long prompts end 3
// positions before the maximum.
BOOST_DATA_TEST_CASE(generation_past_the_config_positions_equals_transformers,
                     bdata::make(testing::hf_fixture_models()), name) {
  auto model = testing::load_hf_fixture(name);
  const auto expected = testing::hf_expected(name);
  const Tensor& want = expected.at("long_greedy_ids");
  BOOST_REQUIRE(want.size(1) > model->max_positions());
  GenerationOptions o;
  o.max_new_tokens = 10;
  BOOST_TEST(
      generate(*model, expected.at("long_prompt_ids"), o).to_int_vector() == want.to_int_vector(),
      boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(top_k_keeps_scores_at_least_the_kth_largest_ties_included) {
  std::vector<float> s = {1, 3, 3, 2, 0};
  apply_top_k(s, 2);
  BOOST_TEST(s == (std::vector<float>{-kInf, 3, 3, -kInf, -kInf}),
             boost::test_tools::per_element());
  s = {1, 3, 3, 2, 0};
  apply_top_k(s, 3);
  BOOST_TEST(s == (std::vector<float>{-kInf, 3, 3, 2, -kInf}), boost::test_tools::per_element());
  s = {1, 2};
  apply_top_k(s, 50);  // k above the vocabulary keeps everything
  BOOST_TEST(s == (std::vector<float>{1, 2}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(top_p_drops_the_low_tail_and_keeps_the_largest) {
  std::vector<float> s = logs({0.15f, 0.5f, 0.05f, 0.3f});
  apply_top_p(s, 0.75);  // ascending 0.05, 0.15, 0.3, 0.5: cumulative 0.05, 0.2 <= 0.25 drop
  BOOST_TEST(std::isinf(s[0]));
  BOOST_TEST(std::isinf(s[2]));
  BOOST_TEST(!std::isinf(s[1]));
  BOOST_TEST(!std::isinf(s[3]));
  const std::vector<float> p = softmax_probs(s);
  BOOST_TEST(p[1] == 0.5f / 0.8f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(p[3] == 0.3f / 0.8f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(p[0] == 0.0f);
  s = logs({0.2f, 0.5f, 0.3f});
  apply_top_p(s, 0.0);  // everything but the largest
  BOOST_TEST(std::isinf(s[0]));
  BOOST_TEST(!std::isinf(s[1]));
  BOOST_TEST(std::isinf(s[2]));
}

BOOST_AUTO_TEST_CASE(warpers_run_temperature_then_top_k_then_top_p) {
  // top-k 2 first leaves 0.4 and 0.3 (renormalised 0.571, 0.429), then top-p 0.5 drops 0.429:
  // only index 0 remains. top-p first would have kept indices 0 and 1.
  GenerationOptions o;
  o.top_k = 2;
  o.top_p = 0.5;
  std::vector<float> s = logs({0.4f, 0.3f, 0.2f, 0.1f});
  warp_scores(s, o);
  BOOST_TEST(!std::isinf(s[0]));
  BOOST_TEST(std::isinf(s[1]));
  BOOST_TEST(std::isinf(s[2]));
  BOOST_TEST(std::isinf(s[3]));
  // Temperature divides the scores before top-p sees them: at 0.5 the probabilities square
  // (0.16, 0.09, 0.04, 0.01)/0.3, so top-p 0.6 (drop cumulative <= 0.4) keeps two entries.
  o.top_k = 0;
  o.top_p = 0.6;
  o.temperature = 0.5;
  s = logs({0.4f, 0.3f, 0.2f, 0.1f});
  warp_scores(s, o);
  BOOST_TEST(s[0] == 2 * std::log(0.4f), boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(s[1] == 2 * std::log(0.3f), boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(std::isinf(s[2]));
  BOOST_TEST(std::isinf(s[3]));
}

BOOST_AUTO_TEST_CASE(sampling_follows_the_probabilities_and_a_seed_repeats_it) {
  const std::vector<float> probs = {0.1f, 0.0f, 0.6f, 0.3f};
  Generator g(123);
  std::vector<int> counts(4);
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++counts[std::size_t(sample_index(probs, g))];
  BOOST_TEST(counts[1] == 0);
  for (std::size_t i : {0u, 2u, 3u})  // 5 standard deviations
    BOOST_TEST(std::abs(counts[i] / double(n) - probs[i]) <=
               5 * std::sqrt(probs[i] * (1 - probs[i]) / n));
  auto model = testing::load_hf_fixture("llama_gqa");
  GenerationOptions o;
  o.do_sample = true;
  o.temperature = 0.8;
  o.top_k = 20;
  o.top_p = 0.9;
  const Tensor prompt = from_vector(std::vector<std::int64_t>{5, 6, 7}, {1, 3});
  Generator a(9), b(9), c(10);
  const auto first = generate(*model, prompt, o, &a).to_int_vector();
  BOOST_TEST(first == generate(*model, prompt, o, &b).to_int_vector(),
             boost::test_tools::per_element());
  BOOST_TEST(first != generate(*model, prompt, o, &c).to_int_vector());
}

// A generation config's repetition_penalty (in greedy search too, before the warpers) and
// max_length (the whole sequence's length; max_new_tokens over it), as transformers' generate
// gives them on fixture models (tests/fixtures/generation_config_cases.json, from
// tools/torch_reference/make_generation_config_cases.py): generation_defaults reads them.
BOOST_AUTO_TEST_CASE(repetition_penalty_and_max_length_as_transformers_generate) {
  std::ifstream in(testing::fixture_path("generation_config_cases.json"));
  const auto cases = nlohmann::json::parse(in);
  BOOST_TEST_REQUIRE(cases.size() >= 18u);
  for (const auto& c : cases) {
    BOOST_TEST_CONTEXT(c["model"].get<std::string>()
                       << " " << c["generation_config"].dump() << " " << c["generate"].dump()) {
      auto model = testing::load_hf_fixture(c["model"]);
      model->generation_config = c["generation_config"];
      GenerationOptions o = generation_defaults(*model);
      o.do_sample = false;
      o.pad_token_id = c["pad_token_id"].get<std::int64_t>();
      if (c["generate"].contains("max_new_tokens")) {
        o.max_new_tokens = c["generate"]["max_new_tokens"];
        o.max_length.reset();
      }
      std::vector<std::int64_t> prompt, want;
      for (const auto& row : c["prompt"]) prompt.insert(prompt.end(), row.begin(), row.end());
      for (const auto& row : c["output"]) want.insert(want.end(), row.begin(), row.end());
      const std::int64_t B = std::int64_t(c["prompt"].size());
      const Tensor got =
          generate(*model, from_vector(prompt, {B, std::int64_t(prompt.size()) / B}), o);
      BOOST_TEST(got.to_int_vector() == want, boost::test_tools::per_element());
    }
  }
  auto model = testing::load_hf_fixture("llama_gqa");
  GenerationOptions o;
  o.max_length = 4;
  const Tensor four = from_vector(std::vector<std::int64_t>{5, 6, 7, 8}, {1, 4});
  BOOST_TEST(testing::error_message<ValueError>([&] { generate(*model, four, o); }) ==
             "generate: the prompt's 4 tokens reach max_length 4; raise it or set max_new_tokens");
  o.max_length.reset();
  o.repetition_penalty = 0;
  BOOST_TEST(testing::error_message<ValueError>([&] { generate(*model, four, o); }) ==
             "generate: repetition_penalty must be > 0, got 0");
}
