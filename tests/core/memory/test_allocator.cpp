// The caching CPU allocator: reuse, statistics, empty_cache, thread safety, and Storage on it.
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/caching_allocator.h"
#include "core/error.h"
#include "core/memory.h"

using namespace fsdp;

namespace {
constexpr std::size_t kMiB = 1 << 20;

// Makes the process's CPU allocator `kind` for one test, then restores the previous one.
struct CpuAllocatorSwitch {
  explicit CpuAllocatorSwitch(CpuAllocatorKind kind) : prev(cpu_allocator_kind()) {
    set_cpu_allocator(kind);
  }
  ~CpuAllocatorSwitch() { set_cpu_allocator(prev); }
  CpuAllocatorKind prev;
};
}  // namespace

BOOST_AUTO_TEST_SUITE(caching_allocator)

BOOST_AUTO_TEST_CASE(a_freed_block_serves_the_next_request_of_its_size) {
  CachingCpuAllocator a;
  void* p = a.allocate(kMiB, kCPU);
  std::memset(p, 1, kMiB);
  a.deallocate(p, kMiB, kCPU);
  void* q = a.allocate(kMiB, kCPU);
  BOOST_TEST(q == p);
  AllocatorStats s = a.stats();
  BOOST_TEST(s.cache_hits == 1);
  BOOST_TEST(s.cache_misses == 1);
  BOOST_TEST(s.num_system_allocs == 1);
  BOOST_TEST(s.num_allocs == 2);
  BOOST_TEST(s.num_frees == 1);
  a.deallocate(q, kMiB, kCPU);
}

BOOST_AUTO_TEST_CASE(best_fit_whole_within_an_eighth_or_split_and_small_blocks_by_exact_size) {
  CachingCpuAllocator a;
  BOOST_TEST(a.block_size(100) == 128u);
  BOOST_TEST(a.block_size(300 * 1024 + 1) == 300u * 1024 + 4096);
  void* big = a.allocate(kMiB, kCPU);
  void* small = a.allocate(100, kCPU);
  a.deallocate(big, kMiB, kCPU);
  a.deallocate(small, 100, kCPU);
  void* near = a.allocate(kMiB - 100 * 1024, kCPU);  // 1/8 of 924 KiB is 115 KiB: fits
  BOOST_TEST(near == big);
  void* small_again = a.allocate(128, kCPU);  // the same 128-byte block
  BOOST_TEST(small_again == small);
  void* other_small = a.allocate(64, kCPU);  // no 64-byte block cached
  BOOST_TEST(other_small != small);
  a.deallocate(near, kMiB - 100 * 1024, kCPU);
  void* half = a.allocate(kMiB / 2, kCPU);  // the front half of the 1 MiB block
  BOOST_TEST(half == big);
  AllocatorStats s = a.stats();
  BOOST_TEST(s.cache_hits == 3);
  BOOST_TEST(s.cache_misses == 3);
  BOOST_TEST(s.num_splits == 1);
  for (auto [p, n] :
       {std::pair{small_again, std::size_t{128}}, {other_small, 64}, {half, kMiB / 2}})
    a.deallocate(p, n, kCPU);
}

BOOST_AUTO_TEST_CASE(allocated_and_reserved_bytes_current_and_peak) {
  CachingCpuAllocator a;
  void* p = a.allocate(kMiB, kCPU);
  void* q = a.allocate(2 * kMiB + 1, kCPU);  // a block of 2 MiB + one page
  AllocatorStats s = a.stats();
  const std::int64_t q_block = 2 * kMiB + 4096;
  BOOST_TEST(s.allocated_bytes == std::int64_t(kMiB) + q_block);
  BOOST_TEST(s.requested_bytes == std::int64_t(3 * kMiB + 1));
  BOOST_TEST(s.reserved_bytes == s.allocated_bytes);
  a.deallocate(q, 2 * kMiB + 1, kCPU);
  s = a.stats();
  BOOST_TEST(s.allocated_bytes == std::int64_t(kMiB));
  BOOST_TEST(s.allocated_bytes_peak == std::int64_t(kMiB) + q_block);
  BOOST_TEST(s.reserved_bytes == std::int64_t(kMiB) + q_block);  // q is cached
  BOOST_TEST(s.cached_blocks == 1);
  a.reset_peak_stats();
  s = a.stats();
  BOOST_TEST(s.allocated_bytes_peak == std::int64_t(kMiB));
  BOOST_TEST(s.reserved_bytes_peak == std::int64_t(kMiB) + q_block);
  a.deallocate(p, kMiB, kCPU);
}

BOOST_AUTO_TEST_CASE(empty_cache_gives_cached_blocks_back) {
  CachingCpuAllocator a;
  void* live = a.allocate(kMiB, kCPU);
  for (std::size_t n : {std::size_t{512}, 300 * std::size_t{1024}, 3 * kMiB})
    a.deallocate(a.allocate(n, kCPU), n, kCPU);
  // Two large blocks the kernel mapped next to each other merge into one.
  const std::int64_t merges = a.stats().num_merges;
  BOOST_TEST(merges <= 1);
  BOOST_TEST(a.stats().cached_blocks == 3 - merges);
  a.empty_cache();
  AllocatorStats s = a.stats();
  BOOST_TEST(s.cached_blocks == 0);
  BOOST_TEST(s.reserved_bytes == std::int64_t(kMiB));
  BOOST_TEST(s.allocated_bytes == std::int64_t(kMiB));
  BOOST_TEST(s.num_system_frees == 3 - merges);
  void* again = a.allocate(3 * kMiB, kCPU);  // a miss now
  BOOST_TEST(a.stats().cache_misses == 5);
  a.deallocate(again, 3 * kMiB, kCPU);
  a.deallocate(live, kMiB, kCPU);
}

BOOST_AUTO_TEST_CASE(blocks_beyond_the_cache_limit_go_back_to_the_system) {
  CachingCpuAllocator::Options o;
  o.max_cached_bytes = kMiB;
  CachingCpuAllocator a(o);
  void* p = a.allocate(kMiB, kCPU);
  void* q = a.allocate(kMiB, kCPU);
  a.deallocate(p, kMiB, kCPU);
  a.deallocate(q, kMiB, kCPU);
  AllocatorStats s = a.stats();
  BOOST_TEST(s.cached_blocks == 1);
  BOOST_TEST(s.reserved_bytes == std::int64_t(kMiB));
  BOOST_TEST(s.num_system_frees == 1);
}

BOOST_AUTO_TEST_CASE(a_pointer_it_did_not_allocate_is_an_error) {
  CachingCpuAllocator a;
  int x = 0;
  BOOST_CHECK_EXCEPTION(a.deallocate(&x, 4, kCPU), RuntimeError, [&](const RuntimeError& e) {
    return std::string(e.what()).find("cpu caching allocator: free of 4 bytes at") == 0;
  });
}

// Ranks are threads and comm workers free buffers that ranks allocated: every thread allocates,
// and half of each thread's blocks are freed by the next thread.
BOOST_AUTO_TEST_CASE(threads_allocating_and_freeing_each_others_blocks) {
  CachingCpuAllocator a;
  constexpr int kThreads = 4, kRounds = 300;
  std::vector<std::vector<std::pair<void*, std::size_t>>> handoff(kThreads);
  std::vector<std::mutex> handoff_mutex(kThreads);
  std::vector<int> corrupt(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        std::vector<std::pair<void*, std::size_t>> mine;
        for (std::size_t n : {std::size_t{64}, std::size_t{1000}, 300 * std::size_t{1024},
                              kMiB + std::size_t(r % 3) * 4096}) {
          auto* p = static_cast<unsigned char*>(a.allocate(n, kCPU));
          std::memset(p, t + 1, n);
          mine.emplace_back(p, n);
        }
        for (auto [p, n] : mine) {
          auto* c = static_cast<unsigned char*>(p);
          if (c[0] != t + 1 || c[n - 1] != t + 1) ++corrupt[t];
        }
        {
          std::lock_guard lock(handoff_mutex[(t + 1) % kThreads]);
          handoff[(t + 1) % kThreads].push_back(mine[0]);
          handoff[(t + 1) % kThreads].push_back(mine[2]);
        }
        a.deallocate(mine[1].first, mine[1].second, kCPU);
        a.deallocate(mine[3].first, mine[3].second, kCPU);
        std::vector<std::pair<void*, std::size_t>> theirs;
        {
          std::lock_guard lock(handoff_mutex[t]);
          theirs.swap(handoff[t]);
        }
        for (auto [p, n] : theirs) a.deallocate(p, n, kCPU);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t)
    for (auto [p, n] : handoff[t]) a.deallocate(p, n, kCPU);
  for (int t = 0; t < kThreads; ++t) BOOST_TEST(corrupt[t] == 0);
  AllocatorStats s = a.stats();
  BOOST_TEST(s.num_allocs == kThreads * kRounds * 4);
  BOOST_TEST(s.num_frees == s.num_allocs);
  BOOST_TEST(s.cache_hits + s.cache_misses == s.num_allocs);
  BOOST_TEST(s.allocated_bytes == 0);
  BOOST_TEST(s.requested_bytes == 0);
  BOOST_TEST(s.cache_hits > s.cache_misses);
  a.empty_cache();
  BOOST_TEST(a.stats().reserved_bytes == 0);
  // Blocks come from the system or a split, and go back to the system or into a merge.
  BOOST_TEST(a.stats().num_system_frees == s.num_system_allocs + s.num_splits - s.num_merges);
}

BOOST_AUTO_TEST_CASE(large_blocks_split_and_merge_again) {
  CachingCpuAllocator a;
  auto* four = static_cast<char*>(a.allocate(4 * kMiB, kCPU));
  a.deallocate(four, 4 * kMiB, kCPU);
  void* first = a.allocate(kMiB, kCPU);  // the front; 3 MiB stay cached
  void* second = a.allocate(kMiB, kCPU);
  BOOST_TEST(first == four);
  BOOST_TEST(second == four + kMiB);
  AllocatorStats s = a.stats();
  BOOST_TEST(s.num_system_allocs == 1);
  BOOST_TEST(s.num_splits == 2);
  BOOST_TEST(s.cached_blocks == 1);
  BOOST_TEST(s.reserved_bytes == std::int64_t(4 * kMiB));
  BOOST_TEST(s.allocated_bytes == std::int64_t(2 * kMiB));
  // A request whose leftover would be neither within 1/8 nor a large block is not served by the
  // 2 MiB block: 2 MiB - 1808 KiB = 240 KiB, above 1808/8 = 226 KiB and below 256 KiB.
  void* odd = a.allocate(1808 * 1024, kCPU);
  BOOST_TEST((odd < four || odd >= four + 4 * kMiB));
  // Freed in any order, the pieces merge back into the one 4 MiB block.
  a.deallocate(second, kMiB, kCPU);
  a.deallocate(first, kMiB, kCPU);
  s = a.stats();
  BOOST_TEST(s.num_merges == 2);
  void* again = a.allocate(4 * kMiB, kCPU);
  BOOST_TEST(again == four);
  BOOST_TEST(a.stats().num_system_allocs == 2);  // the 4 MiB block and the odd one
  a.deallocate(again, 4 * kMiB, kCPU);
  a.deallocate(odd, 1808 * 1024, kCPU);
  a.empty_cache();
  BOOST_TEST(a.stats().reserved_bytes == 0);
}

BOOST_AUTO_TEST_CASE(storage_resize_to_zero_returns_the_block_to_the_cache) {
  CpuAllocatorSwitch use(CpuAllocatorKind::Caching);
  BOOST_TEST(allocator_for(kCPU)->name() == "caching");
  const std::size_t n = 7 * kMiB + 12;  // a size nothing else in this test program uses
  Storage s(n, kCPU);
  void* p = s.data();
  AllocatorStats before = allocator_stats();
  s.resize(0);
  BOOST_TEST(s.data() == nullptr);
  BOOST_TEST(allocator_stats().allocated_bytes ==
             before.allocated_bytes - std::int64_t(7 * kMiB + 4096));
  s.resize(n);  // FSDP's next unshard
  BOOST_TEST(s.data() == p);
  AllocatorStats after = allocator_stats();
  BOOST_TEST(after.cache_hits == before.cache_hits + 1);
  BOOST_TEST(after.num_system_allocs == before.num_system_allocs);
}

BOOST_AUTO_TEST_CASE(a_storage_is_freed_by_the_allocator_that_allocated_it) {
  CpuAllocatorSwitch use(CpuAllocatorKind::Caching);
  auto caching_frees = allocator_stats().num_frees;
  auto s = std::make_unique<Storage>(kMiB, kCPU);
  set_cpu_allocator(CpuAllocatorKind::Malloc);
  BOOST_TEST(allocator_for(kCPU)->name() == "malloc");
  auto malloc_before = allocator_stats();
  s.reset();
  BOOST_TEST(cpu_allocator(CpuAllocatorKind::Caching).stats().num_frees == caching_frees + 1);
  BOOST_TEST(allocator_stats().num_frees == malloc_before.num_frees);
  Storage m(1000, kCPU);
  BOOST_TEST(allocator_stats().allocated_bytes == malloc_before.allocated_bytes + 1024);
  BOOST_TEST(allocator_stats().reserved_bytes == allocator_stats().allocated_bytes);
}

BOOST_AUTO_TEST_CASE(allocator_names_from_the_environment) {
  BOOST_TEST((parse_cpu_allocator_kind("caching") == CpuAllocatorKind::Caching));
  BOOST_TEST((parse_cpu_allocator_kind("malloc") == CpuAllocatorKind::Malloc));
  BOOST_TEST(cpu_allocator_kind_name(CpuAllocatorKind::Malloc) == "malloc");
  BOOST_CHECK_EXCEPTION(parse_cpu_allocator_kind("jemalloc"), ValueError, [](const ValueError& e) {
    return std::string(e.what()) ==
           "FSDP_CPU_ALLOCATOR: unknown allocator 'jemalloc' (expected caching or malloc)";
  });
}

BOOST_AUTO_TEST_SUITE_END()
