// finetune's model as a JobModel (job_model.h): a Hugging Face causal LM (GPT2LMHeadModel,
// LlamaForCausalLM) from a save_pretrained directory. Unsharded it is built on the host and
// loaded whole; under FSDP it is built on the meta device, each unit materialised without
// initialisation and every rank reads from the files the bytes of its own shards only. --save
// writes a save_pretrained directory (config.json, generation_config.json, safetensors sharded
// above --max-shard-size, the tied head omitted) that transformers loads, with the model
// directory's tokenizer files (tokenizer.json, tokenizer_config.json, special_tokens_map.json,
// added_tokens.json, chat_template.jinja/json, tokenizer.model, vocab.json, merges.txt).
#pragma once

#include <memory>
#include <string>

#include "examples/job_model.h"

namespace fsdp::examples {

// The model of `dir` (its config.json read and checked: InputError naming the field) trained on
// sequences of `seq` tokens (ValueError when GPT-2's positions are fewer). Its block_class() is
// the decoder blocks' ("GPT2Block", "LlamaDecoderLayer"): finetune's default unit.
std::shared_ptr<const JobModel> hf_job_model(const std::string& dir, std::int64_t seq);

}  // namespace fsdp::examples
