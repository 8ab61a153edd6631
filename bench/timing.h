// How the in-process benchmarks time a step: the median wall and CPU milliseconds per call over
// `iters` calls after `warmup` calls. On a shared host other jobs stretch the wall clock; the
// CPU time a step needs (this process, all threads) barely moves, so both are kept.
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace fsdp::bench {

// Milliseconds of this process's CPU time (all threads).
inline double cpu_now_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

struct Timing {
  double wall_ms, cpu_ms;
};

template <typename Fn>
Timing median_ms(Fn&& fn, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> wall, cpu;
  for (int i = 0; i < iters; ++i) {
    const double c0 = cpu_now_ms();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    wall.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    cpu.push_back(cpu_now_ms() - c0);
  }
  std::sort(wall.begin(), wall.end());
  std::sort(cpu.begin(), cpu.end());
  return {wall[wall.size() / 2], cpu[cpu.size() / 2]};
}

}  // namespace fsdp::bench
