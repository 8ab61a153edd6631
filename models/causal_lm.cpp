#include "models/causal_lm.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/ops.h"
#include "core/traversal/wrapper_marker.h"

namespace fsdp::models {

const nn::ModuleClass& CausalLM::static_class() {
  static const nn::ModuleClass& cls = nn::ModuleClass::from_names("PreTrainedModel", {"Module"});
  return cls;
}

Tensor CausalLM::forward(const Tensor& ids, KVCache* cache) {
  nn::Value past;
  if (cache != nullptr && cache->length() > 0) {
    std::vector<nn::Value> layers;
    for (std::size_t i = 0; i < cache->keys.size(); ++i) layers.push_back(layer_past(cache, i));
    past = nn::Value(std::move(layers));
  }
  const nn::Value out = (*child(body_))(
      nn::Args({ids}, {{"past_key_values", past}, {"use_cache", cache != nullptr}}));
  if (cache == nullptr) return final_logits(call_child("lm_head", out.tensor()));
  for (std::size_t i = 0; i < out[1].tuple().size(); ++i) store_layer_past(*cache, i, out[1][i]);
  return final_logits(call_child("lm_head", out[0].tensor()));
}

namespace {

// The field from generation_config where it has it, else from config.json (both checked when
// read: ConfigFields::token_ids, optional_integer).
nlohmann::json generation_field(const CausalLM& model, const char* key) {
  if (model.generation_config.contains(key)) return model.generation_config[key];
  const nlohmann::json config = model.config_json();
  const auto it = config.find(key);
  return it == config.end() ? nlohmann::json() : *it;
}

}  // namespace

std::vector<std::int64_t> CausalLM::eos_token_ids() const {
  const nlohmann::json ids = generation_field(*this, "eos_token_id");
  if (ids.is_null()) return {};
  if (!ids.is_array()) return {ids.get<std::int64_t>()};
  return ids.get<std::vector<std::int64_t>>();
}

std::optional<std::int64_t> CausalLM::pad_token_id() const {
  const nlohmann::json id = generation_field(*this, "pad_token_id");
  if (id.is_null()) return std::nullopt;
  return id.get<std::int64_t>();
}

const nn::ModuleClass& hf_class(const std::string& name, std::vector<std::string> bases) {
  bases.push_back("Module");
  return nn::ModuleClass::from_names(name, bases);
}

Tensor causal_lm_loss(const Tensor& logits, const Tensor& targets) {
  FSDP_CHECK(logits.dim() == 3 && targets.dim() == 2 && logits.size(0) == targets.size(0) &&
                 logits.size(1) == targets.size(1),
             ValueError,
             "causal_lm_loss: expected logits [B, S, V] and targets [B, S], got {} and {}",
             shape_str(logits.shape()), shape_str(targets.shape()));
  // float32 at least (transformers' logits.float()); float64 stays float64.
  const bool low = logits.dtype() == DType::Float16 || logits.dtype() == DType::BFloat16;
  const Tensor flat =
      reshape(low ? to_dtype(logits, DType::Float32) : logits, {-1, logits.size(2)});
  return cross_entropy(flat, reshape(targets, {-1}));
}

nn::Value run_blocks(const nn::Module& blocks, Tensor h, const nn::Value& past_key_values,
                     bool use_cache,
                     const std::function<nn::Args(const Tensor&, const nn::Value&)>& block_args) {
  std::vector<nn::Value> presents;
  std::size_t i = 0;
  for (const auto& [name, block] : traversal::unwrapped(blocks).child_slots()) {
    const nn::Value past = past_key_values.is_none() ? nn::Value() : past_key_values[i++];
    const nn::Value out = (*block)(block_args(h, past));
    if (!use_cache) {
      h = out.tensor();
      continue;
    }
    h = out[0].tensor();
    presents.push_back(out[1]);
  }
  if (!use_cache) return h;
  return nn::Value(std::vector<nn::Value>{h, nn::Value(std::move(presents))});
}

nn::Value layer_past(const KVCache* cache, std::size_t layer) {
  if (cache == nullptr || layer >= cache->keys.size()) return nn::Value();
  return nn::Value(std::vector<nn::Value>{cache->keys[layer], cache->values[layer]});
}

void store_layer_past(KVCache& cache, std::size_t layer, const nn::Value& present) {
  if (cache.keys.size() <= layer) {
    cache.keys.resize(layer + 1);
    cache.values.resize(layer + 1);
  }
  cache.keys[layer] = present[0].tensor();
  cache.values[layer] = present[1].tensor();
}

}  // namespace fsdp::models
