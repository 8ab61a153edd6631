// CUDA's copy functions (core/device_copy.h) through cudaMemcpyAsync on the given stream.
#pragma once

#include "core/device_copy.h"

namespace fsdp::cuda {

// Host to device: returns once the host bytes are staged (a pageable cudaMemcpyAsync), so the
// caller may reuse them. Device to host: waits for the copy and so for the stream's earlier work
// (the host reads the bytes as soon as it returns, as fake_cuda's and cudaMemcpy do). Device to
// device: queued (peer copies through unified addressing). No launched_address: host code run on
// a stream cannot reach device memory; instead `reduce` (the threads backend's reductions)
// launches collective_reduce.cu's kernel on the stream.
const DeviceCopyFunctions& copy_functions();

}  // namespace fsdp::cuda
