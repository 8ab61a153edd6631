// A stream's handle in its device's own API (CUDA: the cudaStream_t, torch's
// Stream.cuda_stream), for a library that enqueues on the stream itself: NCCL's collectives run
// on Collective::stream (comm/nccl). A device type with such handles registers the lookup; it is
// apart from StreamBackend so that what comm sees of core stays small (check_layering.py).
#pragma once

#include "core/stream.h"

namespace fsdp {

void register_native_stream(DeviceType type, void* (*lookup)(const Stream&));
// The handle of `stream`; a ValueError naming the stream's device when its type has none
// (cpu, fake_cuda: their streams are not a device API's).
void* native_stream(const Stream& stream);

}  // namespace fsdp
