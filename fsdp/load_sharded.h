// Loading a sharded model straight from a Hugging Face checkpoint directory (or one .safetensors
// file): each rank reads, for every flat parameter, only the elements its own shard holds
// (io::SafetensorsDir::read_range), so a rank reads about 1/world of the parameters' bytes and
// never holds a full parameter it does not own. With the model built on the meta device and
// param_init_fn = allocate_only() (fsdp/fully_sharded_data_parallel.h), a rank's peak while
// wrapping is one unit unsharded (the flat buffer that is its parameters' storage) plus the
// shards so far; loading adds nothing but a conversion buffer.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/io/safetensors_dir.h"
#include "fsdp/fully_sharded_data_parallel.h"

namespace fsdp {

struct LoadShardedOptions {
  // The file's name of a model FQN (unwrapped, as full_state_dict names it); identity when empty.
  std::function<std::string(const std::string& fqn)> name_in_file;
  // Tensors of the file that the model may lack without being reported: regular expressions
  // searched in the name (transformers' _keys_to_ignore_on_load_unexpected; GPT-2's are
  // R"(attn\.masked_bias)" and R"(attn\.bias)").
  std::vector<std::string> ignore_unexpected;
};

// For every flat parameter of `root`'s tree, this rank's local shard is filled from `src` with
// exactly the elements it owns, converted to the shard's dtype (every sharding strategy, with or
// without use_orig_params; padding keeps what construction put there: zeros, and upstream's 42
// in alignment padding). Parameters FSDP does not manage (ignored modules) and persistent
// buffers are loaded whole; non-persistent buffers are left alone. A tied parameter is found
// under any of its FQNs. Every rank calls it for its own shards; no communication. A missing
// tensor or a shape mismatch is a ValueError naming the FQN, the file and the rank. Returns the
// file's tensors that match nothing in the model and no ignore pattern, in src.names() order.
std::vector<std::string> load_sharded_from(FullyShardedDataParallel& root,
                                           const io::SafetensorsDir& src,
                                           const LoadShardedOptions& options = {});

}  // namespace fsdp
