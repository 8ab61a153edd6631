// CUDA's second allocator: the driver's stream-ordered pool (cudaMallocAsync/cudaFreeAsync), as
// torch's PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync. Chosen by FSDP_CUDA_ALLOC_CONF
// (`backend:native`, the caching allocator, is the default); the oracle the caching allocator's
// results are compared with (the same training on either, tests/gpu/emulation).
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "core/memory.h"

namespace fsdp::cuda {

enum class AllocatorBackend { Native, CudaMallocAsync };

// "backend:native" or "backend:cudaMallocAsync" (empty: native); anything else a ValueError
// naming FSDP_CUDA_ALLOC_CONF and what was wrong.
AllocatorBackend parse_alloc_conf(std::string_view conf);
// FSDP_CUDA_ALLOC_CONF's backend, read once.
AllocatorBackend configured_backend();

// Allocations on the calling thread's current stream of the device; a free is queued on the
// allocation's stream after the work of every stream record_stream named (event waits), so
// the pool reuses the memory only after that work. Statistics: allocated and requested bytes
// (current, peak), allocations and frees; reserved bytes from the pool's attributes. An
// allocation the pool cannot serve retries once after trimming the pool, then throws as the
// caching allocator does ("cuda:N out of memory. Tried to allocate ...").
Allocator& async_allocator();

// torch.cuda.memory_stats's keys this backend has (allocated_bytes.all.*, reserved_bytes.all.*,
// num_alloc_retries, num_ooms, allocation.all.*).
std::map<std::string, std::int64_t> async_memory_stats(Device device);

}  // namespace fsdp::cuda
