// transformers 5's LlamaTokenizer (and its alias LlamaTokenizerFast) over a tokenizer.json, as
// AutoTokenizer loads a directory whose tokenizer_config.json names that class (TinyLlama, Llama
// 2, Mistral 7B, CodeLlama): it keeps the file's vocabulary, merges and post-processor but
// rebuilds the rest (transformers/models/llama/tokenization_llama.py). Checked against
// transformers 5.24 on tests/fixtures/tokenizers/llama2_style/expected_pretrained.json.
#pragma once

#include <nlohmann/json_fwd.hpp>

namespace fsdp::models {

class JsonPlace;

// Whether tokenizer_config.json's "tokenizer_class" is LlamaTokenizer or LlamaTokenizerFast.
bool names_llama_tokenizer_class(const nlohmann::json& config);

// `tokenizer` (a tokenizer.json) rewritten as that class builds it from the file and `config`
// (tokenizer_config.json at `config_place`): normalizer none; Metaspace("▁", split false) with
// prepend_scheme "always" when `legacy`, else "first", and "never" when add_prefix_space is
// false; BPE with fuse_unk and byte_fallback, no unk_token; decoder Replace("▁", " "),
// ByteFallback, Fuse and, with add_prefix_space, Strip(" ", 1, 0); the added tokens of the
// config's added_tokens_decoder where it has one. A config field this cannot follow is an
// InputError naming it.
nlohmann::json as_llama_tokenizer_class(nlohmann::json tokenizer, const nlohmann::json& config,
                                        const JsonPlace& config_place);

}  // namespace fsdp::models
