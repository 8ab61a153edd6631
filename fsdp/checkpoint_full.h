// Full checkpoints in Hugging Face's layout (core/io/safetensors_dir.h: model.safetensors, or
// model-0000k-of-0000n.safetensors files and model.safetensors.index.json above a size limit),
// as transformers' save_pretrained writes and from_pretrained reads, with checksums.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/io/safetensors_dir.h"
#include "fsdp/full_state_dict.h"

namespace fsdp {

using io::kDefaultMaxShardBytes;  // transformers' "50GB"

// io::save_safetensors_dir with each file's header recording its tensors' checksums
// (io::Checksums::xxh3), verified when read. Returns the number of files.
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

// Reads a directory written by save_full_checkpoint (or by transformers), or one .safetensors
// file, in io::SafetensorsDir::names() order, checksums verified; its errors. `metadata` (when
// given) receives the first file's header metadata.
NamedTensors load_full_checkpoint(const std::string& dir,
                                  std::map<std::string, std::string>* metadata = nullptr);

}  // namespace fsdp
