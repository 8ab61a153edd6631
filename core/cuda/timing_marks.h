// Timing marks (core/stream_timing.h) on CUDA streams: timing events.
#pragma once

#include <memory>

#include "core/stream_timing.h"

namespace fsdp::cuda {

std::unique_ptr<TimingMark> timing_mark(const Stream& stream);

}  // namespace fsdp::cuda
