// The fields Llama's and Gemma's configs (LlamaConfig, GemmaConfig) share, read, checked and
// written back alike: the sizes and heads, the numbers, the token fields, the sliding window and
// layer_types. Each config reads its own fields between these, in transformers' order.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace fsdp::models {

class ConfigFields;

// vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads and
// num_key_value_heads into `c`; hidden_size divisible by num_attention_heads, which
// num_key_value_heads divides.
template <class Config>
void read_decoder_sizes(const ConfigFields& f, Config& c);

// With c.head_dim read: head_dim even (RoPE), max_position_embeddings, the activation (the field
// `activation_key` into `activation`: Llama's hidden_act, Gemma's hidden_activation) supported,
// rms_norm_eps, initializer_range, attention_dropout in [0, 1].
template <class Config>
void read_decoder_numbers(const ConfigFields& f, Config& c, const std::string& activation_key,
                          std::string Config::*activation);

// tie_word_embeddings, eos_token_id checked (generation reads it), pad_token_id null or in the
// vocabulary (after vocab_size).
template <class Config>
void read_decoder_tokens(const ConfigFields& f, Config& c);

// sliding_window: null or positive.
std::optional<std::int64_t> read_sliding_window(const ConfigFields& f);

// `types` (the config's layer_types, derived or given): num_hidden_layers entries, each
// full_attention or sliding_attention.
std::vector<std::string> read_layer_types(const ConfigFields& f, const nlohmann::json& types,
                                          std::int64_t num_hidden_layers);

// The fields read above into `j` (as save_pretrained writes them), head_dim and sliding_window
// left to the config (their conditions differ); layer_types when there are any.
template <class Config>
void write_decoder_fields(nlohmann::json& j, const Config& c, const std::string& activation_key,
                          std::string Config::*activation);

}  // namespace fsdp::models
