// How a bench program times device work (bench/common/timing.h's counterpart for CUDA): each call
// between its own pair of CUDA events on the stream it launches on, the host waiting for the end
// event before the next call, so a call is timed alone and on the device's clock (a host clock
// would time the asynchronous launch); the median of `iters` calls after `warmup` calls.
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "bench/common/timing.h"
#include "core/cuda/runtime.h"

namespace fsdp::bench {

template <typename Fn>
double cuda_median_ms(Fn&& fn, cudaStream_t stream, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) fn();
  fsdp::cuda::Event start(true), end(true);
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    start.record(stream);
    fn();
    end.record(stream);
    end.synchronize();
    ms.push_back(start.elapsed_ms(end));
  }
  return median(std::move(ms));
}

}  // namespace fsdp::bench
