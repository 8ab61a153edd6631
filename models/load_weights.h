// Loading a save_pretrained safetensors file into a model built from its config.json, with
// transformers' rules: tied aliases may be absent, GPT-2 keys may lack the "transformer." prefix,
// GPT-2's old causal-mask buffers (attn.bias, attn.masked_bias) are ignored. (from_pretrained,
// with sharded files and FSDP's per-rank reads, is built on top of this.)
#pragma once

#include <string>

#include "core/module.h"

namespace fsdp::models {

// Copies every tensor of the file into the parameter or buffer of the same FQN (converting the
// dtype). InputError naming the file for a tensor the model lacks, a shape that differs, or a
// parameter the file lacks that is not tied to one it has.
void load_safetensors_weights(nn::Module& model, const std::string& path);

}  // namespace fsdp::models
