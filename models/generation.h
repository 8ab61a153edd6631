// transformers' GenerationMixin for decoder-only models: greedy search and sampling with the
// logits warpers in transformers' order (temperature, top-k, top-p), a KV cache (prefill the
// prompt, then one token per step), and EOS handling (finished rows padded, stop when all are).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"
#include "models/causal_lm.h"

namespace fsdp::models {

struct GenerationOptions {
  std::int64_t max_new_tokens = 20;
  // transformers' max_length: where set, the whole sequence's length (prompt included) caps the
  // generation instead of max_new_tokens (a caller that sets max_new_tokens leaves it unset).
  std::optional<std::int64_t> max_length;
  bool do_sample = false;  // false: greedy (argmax, first index on ties), no warpers
  // transformers' RepetitionPenaltyLogitsProcessor, before the warpers and in greedy search too:
  // the score of each token already in the row divided by it (multiplied where negative); 1: off.
  double repetition_penalty = 1.0;
  double temperature = 1.0;
  std::int64_t top_k = 50;  // 0: off
  double top_p = 1.0;       // 1: off
  // nullopt: the model config's eos_token_id (none if null); an empty list: never stop early.
  std::optional<std::vector<std::int64_t>> eos_token_ids;
  // For finished rows; default: the config's pad_token_id, else the first EOS id.
  std::optional<std::int64_t> pad_token_id;
};

// transformers' GenerationConfig defaults with the model's generation_config.json (as
// from_pretrained read and checked it) over them: temperature, top_k, top_p, repetition_penalty,
// max_new_tokens and (without max_new_tokens) max_length where the file sets them. do_sample stays
// false: greedy unless the caller asks, as transformers' generate(do_sample=False).
GenerationOptions generation_defaults(const CausalLM& model);

// prompt [B, P] int64 -> [B, P + n] int64, n <= max_new_tokens; the total length is capped at
// the model's position_limit() + 1 (GPT-2's n_positions: the last token is never fed back), as
// far as transformers' generate gets; Llama runs past max_position_embeddings, as transformers'
// generate with max_new_tokens does. Sampling draws from `generator` (else this
// thread's default one). The model runs in no-grad mode; put it in eval() first for dropout-free
// generation.
Tensor generate(CausalLM& model, const Tensor& prompt, const GenerationOptions& options = {},
                Generator* generator = nullptr);

// The warpers on one row of float32 scores (filtered entries become -inf), each as transformers'
// TemperatureLogitsWarper, TopKLogitsWarper (keeps scores >= the k-th largest: ties survive)
// and TopPLogitsWarper (drops the ascending-sorted entries whose cumulative probability is
// <= 1 - top_p, always keeping the largest).
void apply_temperature(std::vector<float>& scores, double temperature);
void apply_top_k(std::vector<float>& scores, std::int64_t top_k);
void apply_top_p(std::vector<float>& scores, double top_p);
// RepetitionPenaltyLogitsProcessor on one row: each token of `seen` (the row so far) scored
// s / penalty, or s * penalty where s < 0 (in float32).
void apply_repetition_penalty(std::vector<float>& scores, const std::vector<std::int64_t>& seen,
                              double penalty);
// temperature, top-k, top-p in transformers' order, each only when active (!= 1, > 0, < 1).
void warp_scores(std::vector<float>& scores, const GenerationOptions& options);
// softmax of a row in float32.
std::vector<float> softmax_probs(const std::vector<float>& scores);
// One index drawn with probability probs[i] / sum(probs) (torch.multinomial, one sample).
std::int64_t sample_index(const std::vector<float>& probs, Generator& generator);

}  // namespace fsdp::models
