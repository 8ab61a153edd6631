#include "models/tokenizer/llama_tokenizer_class.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "models/tokenizer/json_place.h"

namespace fsdp::models {

using nlohmann::json;

namespace {

// A bool field of the config that may be absent or null (then `absent`).
bool optional_bool(const json& config, const char* key, bool absent, const JsonPlace& place) {
  if (!config.contains(key) || config[key].is_null()) return absent;
  return (place / key).as_bool(config[key]);
}

// The config's added_tokens_decoder ({"ID": {"content": ...}}) as tokenizer.json's added_tokens,
// by id: transformers adds these, not the file's, when the config has them.
json added_tokens_of(const json& decoder, const JsonPlace& place) {
  if (!decoder.is_object()) place.malformed("expected an object of token ids");
  json tokens = json::array();
  for (const auto& [key, value] : decoder.items()) {
    const JsonPlace at = place / key;
    std::size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(key, &used);
    } catch (const std::exception&) {
    }
    if (used != key.size() || !is_id(json(id))) at.malformed("the key is not a token id");
    at.check_keys(
        value, {"__type", "content", "lstrip", "rstrip", "normalized", "special", "single_word"});
    json token = value;
    token.erase("__type");
    token["id"] = id;
    tokens.push_back(std::move(token));
  }
  std::sort(tokens.begin(), tokens.end(),
            [](const json& a, const json& b) { return a["id"] < b["id"]; });
  return tokens;
}

// The text of a named special token in the config ("<s>" or {"content": "<s>", ...}).
std::string special_token_text(const json& value, const JsonPlace& place) {
  if (value.is_object()) return (place / "content").as_string(place.at(value, "content"));
  return place.as_string(value);
}

}  // namespace

bool names_llama_tokenizer_class(const json& config) {
  const auto it = config.find("tokenizer_class");
  return it != config.end() && it->is_string() &&
         (*it == "LlamaTokenizer" || *it == "LlamaTokenizerFast");
}

json as_llama_tokenizer_class(json tok, const json& config, const JsonPlace& place) {
  if (!config.is_object()) place.malformed("expected an object");
  if (optional_bool(config, "split_special_tokens", false, place))
    (place / "split_special_tokens").unsupported(config["split_special_tokens"], "false only");
  const bool legacy = optional_bool(config, "legacy", false, place);
  const bool add_prefix_space = optional_bool(config, "add_prefix_space", true, place);

  json& model = tok["model"];
  if (!model.is_object() || model.value("type", json()) != "BPE")
    (place / "tokenizer_class")
        .unsupported(config["tokenizer_class"],
                     "LlamaTokenizer over a tokenizer.json whose model is BPE only");
  model = {{"type", "BPE"},
           {"dropout", nullptr},
           {"unk_token", nullptr},
           {"continuing_subword_prefix", nullptr},
           {"end_of_word_suffix", nullptr},
           {"fuse_unk", true},
           {"byte_fallback", true},
           {"ignore_merges", false},
           {"vocab", model.value("vocab", json())},
           {"merges", model.value("merges", json())}};
  tok["normalizer"] = nullptr;
  tok["pre_tokenizer"] = {
      {"type", "Metaspace"},
      {"replacement", "▁"},
      {"prepend_scheme", add_prefix_space ? (legacy ? "always" : "first") : "never"},
      {"split", false}};
  json steps = json::array({{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
                            {{"type", "ByteFallback"}},
                            {{"type", "Fuse"}}});
  if (add_prefix_space)
    steps.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  tok["decoder"] = {{"type", "Sequence"}, {"decoders", std::move(steps)}};
  if (config.contains("added_tokens_decoder"))
    tok["added_tokens"] =
        added_tokens_of(config["added_tokens_decoder"], place / "added_tokens_decoder");

  // transformers adds a named special token that is no added token yet (the class's defaults
  // "<unk>", "<s>", "</s>" too): as a special one with its vocabulary id; one outside the
  // vocabulary would get a new id that the model has no embedding for.
  json& added = tok["added_tokens"];
  if (!added.is_array()) added = json::array();
  for (const auto& [key, fallback] :
       {std::pair{"unk_token", "<unk>"}, std::pair{"bos_token", "<s>"},
        std::pair{"eos_token", "</s>"}, std::pair{"pad_token", ""}}) {
    std::string text = fallback;
    if (config.contains(key))
      text = config[key].is_null() ? "" : special_token_text(config[key], place / key);
    if (text.empty()) continue;
    const bool known = std::any_of(added.begin(), added.end(), [&](const json& a) {
      return a.is_object() && a.value("content", json()) == text;
    });
    if (known) continue;
    const json& vocab = model["vocab"];
    if (!vocab.is_object() || !vocab.contains(text) || !is_id(vocab[text]))
      (place / key)
          .malformed(fmt::format("{} is neither an added token nor in the vocabulary "
                                 "(transformers would give it a new id)",
                                 short_json(text)));
    added.push_back({{"id", vocab[text]},
                     {"content", text},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  return tok;
}

}  // namespace fsdp::models
