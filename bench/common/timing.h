// How every benchmark times: the median wall and CPU milliseconds per call over `iters` calls
// after `warmup` calls. On a shared host other jobs stretch the wall clock; the CPU time a step
// needs (this process, all threads) barely moves, so both are kept.
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

// Milliseconds on the steady clock, for programs that time phases themselves.
inline double wall_now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The median of `v` (the mean of the middle two for an even count); 0 for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
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
    const double t0 = wall_now_ms();
    fn();
    wall.push_back(wall_now_ms() - t0);
    cpu.push_back(cpu_now_ms() - c0);
  }
  return {median(wall), median(cpu)};
}

}  // namespace fsdp::bench
