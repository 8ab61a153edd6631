// Intra-op parallelism for the element-wise and row-wise kernels (layer norm, softmax,
// activations, the optimizer's update): one op's loop split across a small pool of threads, as
// torch.set_num_threads does for its CPU kernels. Matrix products keep OpenBLAS's own threads.
//
// One pool per process. The thread that calls an op takes the first chunk and the pool's workers
// the rest; an idle worker spins briefly (ops follow each other within microseconds), then
// sleeps. Work in a region must not allocate tensors (memory statistics are per thread), throw,
// or start another region (a nested call runs serially); calls from several threads at once
// (ranks as threads) run serially on all but the first.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>

namespace fsdp {

// Elements below which an element-wise kernel runs on one thread (waking a worker costs about a
// microsecond; 16K floats take several).
inline constexpr std::int64_t kParallelGrain = 16384;

// Threads for intra-op work, the caller included (1: serial; the default). Not to be called
// while an op runs.
void set_num_threads(int n);
int get_num_threads();

namespace parallel_detail {
void run(std::int64_t begin, std::int64_t end, std::int64_t chunks,
         const std::function<void(std::int64_t, std::int64_t)>& fn);
bool in_parallel_region();
}  // namespace parallel_detail

// fn(b, e) over [begin, end) in contiguous chunks of at least `grain` indices, one per thread;
// serial when the range is small, the pool has one thread, or this is inside a region already.
template <typename F>
void parallel_for(std::int64_t begin, std::int64_t end, std::int64_t grain, F&& fn) {
  const std::int64_t n = end - begin;
  if (n <= 0) return;
  const std::int64_t g = std::max<std::int64_t>(grain, 1);
  const std::int64_t chunks = std::min<std::int64_t>(get_num_threads(), (n + g - 1) / g);
  if (chunks <= 1 || parallel_detail::in_parallel_region()) {
    fn(begin, end);
    return;
  }
  parallel_detail::run(begin, end, chunks, std::function<void(std::int64_t, std::int64_t)>(fn));
}

}  // namespace fsdp
