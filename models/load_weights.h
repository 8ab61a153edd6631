// Loading save_pretrained weights into a model built from its config.json, with transformers'
// rules: tied aliases may be absent, GPT-2 keys may lack the "transformer." prefix, GPT-2's old
// causal-mask buffers (attn.bias, attn.masked_bias) and Llama's old rotary_emb.inv_freq buffers
// are ignored. The rules are written once
// (checkpoint_names) for the whole-model load here and FSDP's per-rank shard reads
// (fsdp/load_sharded.h).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/io/safetensors_dir.h"
#include "core/module.h"

namespace fsdp::models {

// How a model's FQNs are named in a checkpoint of its family.
struct CheckpointNames {
  // The file's name of a model FQN: itself, or for GPT-2 hub files without "transformer.", the
  // name without that prefix when the file has it.
  std::function<std::string(const std::string& fqn)> name_in_file;
  // Regular expressions of file tensors that belong to no parameter (GPT-2's mask buffers,
  // Llama's old inv_freq).
  std::vector<std::string> ignore_unexpected;
};
CheckpointNames checkpoint_names(const nn::Module& model, const io::SafetensorsDir& files);

// The weights of a save_pretrained directory (model.safetensors.index.json with its shards, or
// model.safetensors) or of one .safetensors file, headers read; InputError naming the path.
io::SafetensorsDir open_pretrained_weights(const std::string& path);

// Two tensors of `files` (their names, sorted) that fill one tied parameter of `model` (a tied
// head and its embedding) with different values: transformers' tie_weights then unties them
// (from_pretrained does so too). None where every such pair holds equal values.
std::optional<std::pair<std::string, std::string>> differing_tied_tensors(
    nn::Module& model, const io::SafetensorsDir& files);

// Copies every tensor of `files` into the parameter or buffer of the same FQN (converting the
// dtype). InputError naming the file for a tensor the model lacks, a shape that differs, a
// parameter the file lacks that is not tied to one it has, or tied tensors that differ.
void load_pretrained_weights(nn::Module& model, const io::SafetensorsDir& files);
// The same from one file or directory.
void load_safetensors_weights(nn::Module& model, const std::string& path);

}  // namespace fsdp::models
