// What GPT2LMHeadModel, LlamaForCausalLM and GemmaForCausalLM share: forward from token ids (with a
// KV cache) to logits, their config as save_pretrained writes it, transformers' _init_weights, and
// the causal-LM loss.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/module.h"
#include "core/random.h"
#include "models/kv_cache.h"

namespace fsdp::models {

// The base of the *ForCausalLM classes; its module class is transformers' PreTrainedModel.
class CausalLM : public nn::Module {
 public:
  static const nn::ModuleClass& static_class();

  // ids [B, S] int64 -> logits [B, S, V]. With a cache, the ids continue the cached positions
  // (positions cache->length() ..) and the cache grows by S. The body (child `body`) and
  // lm_head run through their slots, so wrappers put in their place run.
  Tensor forward(const Tensor& ids, KVCache* cache);
  Tensor forward(const Tensor& ids) { return forward(ids, nullptr); }
  nn::Value forward(const nn::Args& args) override { return forward(args.tensor(0), nullptr); }

  // config.json as save_pretrained writes it, with `dtype` ("float32", "bfloat16", ...).
  virtual nlohmann::json config_json(const std::string& dtype = "float32") const = 0;
  // transformers' _init_weights for the parameters and buffers of `module` and its children
  // (any subtree of this model, so it also serves as FSDP's param_init_fn); draws from
  // `generator`, else this thread's default one, in named_parameters() order.
  virtual void init_weights(nn::Module& module, Generator* generator = nullptr) const = 0;

  virtual std::int64_t vocab_size() const = 0;
  // The config's positions (GPT-2's n_positions, Llama's max_position_embeddings).
  virtual std::int64_t max_positions() const = 0;
  // The most positions a sequence can have, generation's cap: GPT-2's n_positions (its learned
  // table); none for rotary models, which run past max_position_embeddings as transformers' do.
  virtual std::optional<std::int64_t> position_limit() const = 0;
  // The end-of-sequence ids (a number or a list; none if null): generation_config's
  // eos_token_id where it has one, else config.json's.
  std::vector<std::int64_t> eos_token_ids() const;
  // pad_token_id the same way (none if null).
  std::optional<std::int64_t> pad_token_id() const;

  // generation_config.json as from_pretrained read it (checked), whose eos and pad ids
  // transformers' generate uses over config.json's; save_pretrained writes it back. Empty:
  // derived from config.json.
  nlohmann::json generation_config = nlohmann::json::object();

 protected:
  // `body`: the child that maps ids to hidden states ("transformer", "model").
  CausalLM(const nn::ModuleClass& cls, std::string body) : Module(cls), body_(std::move(body)) {}
  // The logits from lm_head's output (Gemma's final softcap); as they are by default.
  virtual Tensor final_logits(const Tensor& logits) const { return logits; }

 private:
  std::string body_;
};

// A rotary *ForCausalLM (Llama's and Gemma's families): the overrides that read its config
// (vocab_size, max_position_embeddings, to_json), and no position limit.
template <class Config>
class RotaryCausalLM : public CausalLM {
 public:
  using CausalLM::forward;
  nlohmann::json config_json(const std::string& dtype = "float32") const override {
    return config.to_json(dtype);
  }
  std::int64_t vocab_size() const override { return config.vocab_size; }
  std::int64_t max_positions() const override { return config.max_position_embeddings; }
  std::optional<std::int64_t> position_limit() const override { return std::nullopt; }

  const Config config;

 protected:
  RotaryCausalLM(const nn::ModuleClass& cls, const Config& c) : CausalLM(cls, "model"), config(c) {}
};

// A transformers class by name: its ancestry is `name`, `bases` (nearest first), "Module".
const nn::ModuleClass& hf_class(const std::string& name, std::vector<std::string> bases = {});

// Mean cross-entropy over all B*S positions of logits [B, S, V] (16-bit ones in float32) against
// targets [B, S] that are already shifted (llm.c style: targets = inputs moved by one); no
// second shift, as transformers' loss would do on labels. Targets -100 are ignored.
Tensor causal_lm_loss(const Tensor& logits, const Tensor& targets);

// Runs the blocks in `blocks`' slots in order (through wrappers put there), each called with
// block_args(h, layer_past) where layer_past is past_key_values[i] (None without a history);
// returns the last h, or with use_cache (h, ((k, v) per block)).
nn::Value run_blocks(const nn::Module& blocks, Tensor h, const nn::Value& past_key_values,
                     bool use_cache,
                     const std::function<nn::Args(const Tensor&, const nn::Value&)>& block_args);

// The KV cache as the blocks exchange it through their slots: the layer's (k, v) tuple, or None.
nn::Value layer_past(const KVCache* cache, std::size_t layer);
// Stores a block's returned (k, v) tuple as layer `layer` of the cache.
void store_layer_past(KVCache& cache, std::size_t layer, const nn::Value& present);

}  // namespace fsdp::models
