// transformers' from_pretrained and save_pretrained for the causal LMs here: a directory with
// config.json and the weights (model.safetensors, or shards with model.safetensors.index.json)
// in, the same layout out -- one that transformers.AutoModelForCausalLM.from_pretrained loads.
// Under FSDP the model is built on meta and each rank reads its own shards
// (fsdp/load_sharded.h with checkpoint_names from load_weights.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/io/safetensors_dir.h"
#include "models/auto_model.h"
#include "models/causal_lm.h"

namespace fsdp::models {

// The model of DIR (config.json read and checked; InputError naming the field) with its weights,
// in `dtype` (float32, bfloat16, float16 or float64, cast after loading); without one, in
// auto_dtype's, as transformers 5's from_pretrained (dtype="auto" by default): a bfloat16
// checkpoint loads as bfloat16, a float32 one as float32. A head the config ties but the files
// hold with other values than the embedding's is untied, as transformers' tie_weights does.
// DIR/generation_config.json, where present, is read into generation_config (its eos and pad ids
// checked).
std::shared_ptr<CausalLM> from_pretrained(const std::string& dir,
                                          std::optional<DType> dtype = std::nullopt);

// transformers' dtype="auto": config.json's "dtype" (or the older "torch_dtype"), else the dtype
// of the first floating tensor (in name order) of the weights' first file, else float32.
// InputError naming the file and the field for a dtype that is not a floating one.
DType auto_dtype(const ConfigFile& config, const io::SafetensorsDir& files);

// `config` as from_pretrained builds the model from it for the weights `files`: a head the config
// ties but the files hold apart (other values than the embedding's) untied, as transformers'
// tie_weights does. For jobs that build the model themselves (finetune under FSDP).
ModelConfig untie_where_files_differ(ModelConfig config, const io::SafetensorsDir& files);

// DIR/generation_config.json, its eos and pad ids and generation defaults (temperature, top_k,
// top_p, repetition_penalty, max_new_tokens, max_length) checked (InputError naming the file, the
// field and the value); an empty object where DIR has none.
nlohmann::json read_generation_config(const std::string& dir);

// The model of `config` on the CPU for weights that come from files: built on meta and given
// uninitialised storage (tied weights stay tied), its computed buffers (inv_freq) filled. Skips
// transformers' random initialisation, which loading would overwrite (from_pretrained, and jobs
// that load every weight next).
std::shared_ptr<CausalLM> make_causal_lm_for_loading(const ModelConfig& config);

// Writes DIR (created) as save_pretrained does: config.json (model.config_json with `dtype`
// named after the tensors'), generation_config.json (the model's, else derived from config.json),
// and `state` as safetensors (FQN -> tensor, e.g. model.state_dict() or FSDP's full_state_dict)
// with the tied head omitted, in one model.safetensors or sharded above `max_shard_bytes` with
// the index.
void save_pretrained(const std::string& dir, const CausalLM& model,
                     const std::vector<std::pair<std::string, Tensor>>& state,
                     std::int64_t max_shard_bytes = io::kDefaultMaxShardBytes);

// For a model built on meta whose weights come from files (FSDP's param_init_fn, with storage
// given): computes `module`'s own buffers that no file holds (the rotary embedding's inv_freq)
// and leaves every parameter as it is.
void init_computed_buffers(nn::Module& module);

// The class name of the model's decoder blocks ("GPT2Block", "LlamaDecoderLayer",
// "MistralDecoderLayer"): the usual FSDP unit and activation checkpointing's class.
std::string decoder_block_class(const nn::Module& model);

}  // namespace fsdp::models
