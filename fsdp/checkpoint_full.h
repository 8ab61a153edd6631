// Full checkpoints in Hugging Face's layout: a directory with model.safetensors, or, when the
// tensors exceed a size limit, model-0000k-of-0000n.safetensors files (filled in order up to the
// limit; a tensor larger than the limit gets a file of its own) and model.safetensors.index.json
// ({"metadata": {"total_size": bytes}, "weight_map": {name: file}}), as transformers'
// save_pretrained writes and from_pretrained / safetensors read.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "fsdp/full_state_dict.h"

namespace fsdp {

inline constexpr std::int64_t kDefaultMaxShardBytes = 5'000'000'000;  // transformers' "5GB"

// Writes `state` under `dir` (created). Each file is written atomically and the index last, so
// a reader never sees an index naming a missing file; each file's header records its tensors'
// checksums (io::Checksums::xxh3), verified when read. Returns the number of files.
// `metadata` goes into every file's header.
int save_full_checkpoint(const std::string& dir, const NamedTensors& state,
                         std::int64_t max_shard_bytes = kDefaultMaxShardBytes,
                         const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

// One safetensors file holding the full state dict of `root`: the same bytes as
// io::save_safetensors(path, full_state_dict(root, true), metadata, io::Checksums::xxh3),
// streamed (see
// visit_full_state_dict): rank 0 writes the header first, then each parameter straight from
// its unit's all-gathered buffer (pwrite at its offset, no copy of the model, one unit unsharded
// at a time), the buffers, fsync and an atomic rename. Every rank must call it; rank 0 writes
// (under HYBRID_SHARD, rank 0 of the first replica), and its write error is raised there after
// the last all-gather.
void save_full_state_dict(FullyShardedDataParallel& root, const std::string& path,
                          const std::map<std::string, std::string>& metadata = {});

// Reads a directory written by save_full_checkpoint (or by transformers), in the index's
// order of files. ValueError naming the index and the file when a named file lacks a tensor.
// `metadata` (when given) receives the first file's header metadata.
NamedTensors load_full_checkpoint(const std::string& dir,
                                  std::map<std::string, std::string>* metadata = nullptr);

}  // namespace fsdp
