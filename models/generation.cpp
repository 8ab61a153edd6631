#include "models/generation.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <type_traits>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops.h"

namespace fsdp::models {

namespace {

constexpr float kFiltered = -std::numeric_limits<float>::infinity();

std::int64_t argmax_row(const std::vector<float>& scores) {
  return std::max_element(scores.begin(), scores.end()) - scores.begin();  // first on ties
}

}  // namespace

void apply_temperature(std::vector<float>& scores, double temperature) {
  FSDP_CHECK(temperature > 0, ValueError, "generate: temperature must be > 0, got {}", temperature);
  const float t = static_cast<float>(temperature);
  for (float& s : scores) s /= t;
}

void apply_top_k(std::vector<float>& scores, std::int64_t top_k) {
  const auto k = static_cast<std::size_t>(std::min<std::int64_t>(top_k, std::ssize(scores)));
  if (k == 0) return;
  std::vector<float> sorted = scores;
  std::nth_element(sorted.begin(), sorted.begin() + std::ptrdiff_t(k - 1), sorted.end(),
                   std::greater<float>());
  const float kth = sorted[k - 1];
  for (float& s : scores)
    if (s < kth) s = kFiltered;
}

void apply_top_p(std::vector<float>& scores, double top_p) {
  FSDP_CHECK(top_p >= 0 && top_p <= 1, ValueError, "generate: top_p must be in [0, 1], got {}",
             top_p);
  std::vector<std::size_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return scores[a] < scores[b]; });
  std::vector<float> sorted(scores.size());
  for (std::size_t i = 0; i < order.size(); ++i) sorted[i] = scores[order[i]];
  const std::vector<float> probs = softmax_probs(sorted);
  const float threshold = static_cast<float>(1.0 - top_p);
  float cumulative = 0;
  for (std::size_t i = 0; i + 1 < order.size(); ++i) {  // the largest always stays
    cumulative += probs[i];
    if (cumulative <= threshold) scores[order[i]] = kFiltered;
  }
}

void apply_repetition_penalty(std::vector<float>& scores, const std::vector<std::int64_t>& seen,
                              double penalty) {
  FSDP_CHECK(penalty > 0, ValueError, "generate: repetition_penalty must be > 0, got {}", penalty);
  const float p = static_cast<float>(penalty);
  std::vector<bool> done(scores.size(), false);  // a repeated token is penalised once
  for (std::int64_t id : seen) {
    const auto i = static_cast<std::size_t>(id);
    if (id < 0 || i >= scores.size() || done[i]) continue;
    done[i] = true;
    scores[i] = scores[i] < 0 ? scores[i] * p : scores[i] / p;
  }
}

void warp_scores(std::vector<float>& scores, const GenerationOptions& o) {
  if (o.temperature != 1.0) apply_temperature(scores, o.temperature);
  if (o.top_k > 0) apply_top_k(scores, o.top_k);
  if (o.top_p < 1.0) apply_top_p(scores, o.top_p);
}

std::vector<float> softmax_probs(const std::vector<float>& scores) {
  const float m = *std::max_element(scores.begin(), scores.end());
  std::vector<float> p(scores.size());
  float total = 0;
  for (std::size_t i = 0; i < scores.size(); ++i) total += p[i] = std::exp(scores[i] - m);
  for (float& v : p) v /= total;
  return p;
}

std::int64_t sample_index(const std::vector<float>& probs, Generator& generator) {
  double total = 0;
  for (float p : probs) total += p;
  const double u = generator.uniform() * total;
  double cumulative = 0;
  std::int64_t last = 0;
  for (std::size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0) continue;
    cumulative += probs[i];
    last = std::int64_t(i);
    if (u < cumulative) return last;
  }
  return last;  // u rounded up to the total
}

GenerationOptions generation_defaults(const CausalLM& model) {
  GenerationOptions o;
  const nlohmann::json& g = model.generation_config;
  const auto set = [&](const char* key, auto& field) {
    if (g.contains(key) && !g[key].is_null()) field = g[key].get<std::decay_t<decltype(field)>>();
  };
  set("temperature", o.temperature);
  set("top_k", o.top_k);
  set("top_p", o.top_p);
  set("repetition_penalty", o.repetition_penalty);
  set("max_new_tokens", o.max_new_tokens);
  if (!g.contains("max_new_tokens") || g["max_new_tokens"].is_null()) {
    std::int64_t max_length = 0;
    set("max_length", max_length);
    if (max_length > 0) o.max_length = max_length;
  }
  return o;
}

Tensor generate(CausalLM& model, const Tensor& prompt, const GenerationOptions& o,
                Generator* generator) {
  FSDP_CHECK(prompt.dim() == 2 && prompt.dtype() == DType::Int64 && prompt.size(1) >= 1, ValueError,
             "generate: expected int64 prompt ids [batch, length >= 1], got {} {}",
             dtype_name(prompt.dtype()), shape_str(prompt.shape()));
  FSDP_CHECK(o.max_new_tokens >= 0, ValueError, "generate: max_new_tokens must be >= 0, got {}",
             o.max_new_tokens);
  const std::int64_t B = prompt.size(0), P = prompt.size(1);
  const std::optional<std::int64_t> limit = model.position_limit();
  FSDP_CHECK(!limit || P <= *limit, ValueError,
             "generate: the prompt's {} tokens exceed the model's {} positions", P, *limit);
  const std::vector<std::int64_t> eos = o.eos_token_ids ? *o.eos_token_ids : model.eos_token_ids();
  // transformers' generation config takes pad_token_id from config.json; unset, the first EOS.
  const std::optional<std::int64_t> pad_id = o.pad_token_id ? o.pad_token_id : model.pad_token_id();
  const std::int64_t pad = pad_id ? *pad_id : (eos.empty() ? 0 : eos.front());
  Generator& gen = generator != nullptr ? *generator : default_generator();
  autograd::NoGradGuard no_grad;
  std::vector<std::vector<std::int64_t>> rows(static_cast<std::size_t>(B));
  const std::vector<std::int64_t> flat = prompt.to_int_vector();
  for (std::int64_t b = 0; b < B; ++b)
    rows[std::size_t(b)].assign(flat.begin() + b * P, flat.begin() + (b + 1) * P);
  std::vector<bool> finished(static_cast<std::size_t>(B), false);
  FSDP_CHECK(!o.max_length || P < *o.max_length, ValueError,
             "generate: the prompt's {} tokens reach max_length {}; raise it or set "
             "max_new_tokens",
             P, o.max_length.value_or(0));
  const std::int64_t wanted = o.max_length ? *o.max_length - P : o.max_new_tokens;
  // The last token is never fed back: a table of `limit` positions allows limit + 1 tokens.
  const std::int64_t steps = limit ? std::min(wanted, *limit + 1 - P) : wanted;
  KVCache cache;
  Tensor input = prompt;
  for (std::int64_t step = 0; step < steps; ++step) {
    const Tensor logits = model.forward(input, &cache);
    const Tensor last = to_dtype(select(logits, 1, logits.size(1) - 1), DType::Float32);
    const std::vector<double> values = last.to_vector();
    const std::int64_t V = last.size(1);
    std::vector<std::int64_t> next(static_cast<std::size_t>(B));
    for (std::int64_t b = 0; b < B; ++b) {
      std::vector<float> scores(values.begin() + b * V, values.begin() + (b + 1) * V);
      std::int64_t token;
      if (o.repetition_penalty != 1.0)
        apply_repetition_penalty(scores, rows[std::size_t(b)], o.repetition_penalty);
      if (o.do_sample) {
        warp_scores(scores, o);
        token = sample_index(softmax_probs(scores), gen);
      } else {
        token = argmax_row(scores);
      }
      if (finished[std::size_t(b)]) token = pad;
      if (std::find(eos.begin(), eos.end(), token) != eos.end()) finished[std::size_t(b)] = true;
      next[std::size_t(b)] = token;
      rows[std::size_t(b)].push_back(token);
    }
    if (std::all_of(finished.begin(), finished.end(), [](bool f) { return f; })) break;
    input = from_vector(next, {B, 1}, TensorOptions(DType::Int64, prompt.device()));
  }
  std::vector<std::int64_t> out;
  for (const auto& r : rows) out.insert(out.end(), r.begin(), r.end());
  return from_vector(out, {B, std::int64_t(rows.front().size())},
                     TensorOptions(DType::Int64, prompt.device()));
}

}  // namespace fsdp::models
