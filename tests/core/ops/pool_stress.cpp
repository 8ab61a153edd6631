// ThreadSanitizer's run of the intra-op pool (core/parallel.h), built on its own by
// .ci/sanitize_quick.sh: many calls, two callers at once (ranks as threads), nested calls and
// resizing between calls. Exits non-zero when a result is wrong; TSan reports races.
#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

#include "core/parallel.h"

using fsdp::parallel_for;

int main() {
  fsdp::set_num_threads(2);
  std::vector<double> data(100000, 0.0);
  for (int round = 0; round < 2000; ++round)
    parallel_for(0, static_cast<std::int64_t>(data.size()), 1000,
                 [&](std::int64_t b, std::int64_t e) {
                   for (std::int64_t i = b; i < e; ++i) data[static_cast<std::size_t>(i)] += 1;
                 });
  std::atomic<std::int64_t> covered{0};
  auto caller = [&] {
    for (int k = 0; k < 500; ++k)
      parallel_for(0, 50000, 1000, [&](std::int64_t b, std::int64_t e) {
        covered += e - b;
        parallel_for(0, 10, 1, [&](std::int64_t, std::int64_t) {});  // nested: serial
      });
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  fsdp::set_num_threads(3);
  for (int round = 0; round < 500; ++round)
    parallel_for(0, 30000, 100, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) data[static_cast<std::size_t>(i)] += 1;
    });
  fsdp::set_num_threads(1);
  const bool ok = covered.load() == 2 * 500 * 50000 && data[5] == 2500.0 && data[50000] == 2000.0;
  std::printf("%s: covered %lld, data[5] %.0f, data[50000] %.0f\n", ok ? "ok" : "WRONG",
              static_cast<long long>(covered.load()), data[5], data[50000]);
  return ok ? 0 : 1;
}
