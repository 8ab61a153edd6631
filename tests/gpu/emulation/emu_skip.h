// FSDP_EMU_SKIP_KERNELS=1: the emulated device checks, queues and orders work as usual but does
// none of it: no kernel runs, no cuBLASLt product, no copy between device buffers, no memset
// (copies to and from the host still move their bytes). A program then takes the time of its host
// side alone, which bench/gpu/bench_host_overhead.py measures per training step at GPT-2's size.
// Results are garbage: for timing only.
#pragma once

#include <cstdlib>

namespace fsdp::emu {

inline bool skipping_device_work() {
  static const bool skip = [] {
    const char* v = std::getenv("FSDP_EMU_SKIP_KERNELS");
    return v != nullptr && *v != '\0' && *v != '0';
  }();
  return skip;
}

}  // namespace fsdp::emu
