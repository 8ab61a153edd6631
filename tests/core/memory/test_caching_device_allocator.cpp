// The caching device allocator's logic on a fake backend (no GPU needed): rounding and
// segments, best fit per stream, split and merge, record_stream's deferred reuse, the retry
// after freeing the cache, out-of-memory, and torch.cuda's statistic names.
#include <boost/test/unit_test.hpp>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/caching_device_allocator.h"
#include "core/error.h"

using namespace fsdp;

namespace {
constexpr std::size_t kOneMiB = 1 << 20;
constexpr StreamId kS1 = 1, kS2 = 2;

// Device memory as address ranges (never touched), a capacity, and events a test completes.
struct FakeDevice {
  std::size_t capacity = 1ull << 40, used = 0;
  std::uintptr_t next_address = 1ull << 32;
  std::map<void*, std::size_t> segments;
  struct FakeEvent {
    StreamId stream;
    bool done = false;
  };
  std::map<EventId, FakeEvent> events;
  EventId next_event = 1;
  int synchronized = 0, destroyed = 0;
  void complete(StreamId stream) {
    for (auto& [id, e] : events)
      if (e.stream == stream) e.done = true;
  }
};

class FakeBackend final : public DeviceMemoryBackend {
 public:
  explicit FakeBackend(FakeDevice& d) : d_(d) {}
  void* allocate(std::size_t bytes) override {
    if (d_.used + bytes > d_.capacity) return nullptr;
    void* p = reinterpret_cast<void*>(d_.next_address);
    d_.next_address += bytes + 4096;  // a gap: segments are never contiguous by accident
    d_.used += bytes;
    d_.segments[p] = bytes;
    return p;
  }
  void release(void* ptr) override {
    auto it = d_.segments.find(ptr);
    BOOST_REQUIRE(it != d_.segments.end());
    d_.used -= it->second;
    d_.segments.erase(it);
  }
  EventId record_event(StreamId stream) override {
    d_.events[d_.next_event] = {stream, false};
    return d_.next_event++;
  }
  bool event_done(EventId e) override { return d_.events.at(e).done; }
  void synchronize_event(EventId e) override {
    ++d_.synchronized;
    d_.events.at(e).done = true;
  }
  void destroy_event(EventId e) override {
    ++d_.destroyed;
    d_.events.erase(e);
  }

 private:
  FakeDevice& d_;
};

struct Fixture {
  FakeDevice dev;
  CachingDeviceAllocator alloc{std::make_unique<FakeBackend>(dev)};
  // An address as a number: Boost.Test would print a char* as a C string.
  static std::uintptr_t at(void* p) { return reinterpret_cast<std::uintptr_t>(p); }
};
}  // namespace

BOOST_FIXTURE_TEST_SUITE(caching_device_allocator, Fixture)

BOOST_AUTO_TEST_CASE(sizes_round_to_512_bytes_and_segments_follow_torch) {
  BOOST_TEST(CachingDeviceAllocator::round_size(0) == 512u);
  BOOST_TEST(CachingDeviceAllocator::round_size(1) == 512u);
  BOOST_TEST(CachingDeviceAllocator::round_size(513) == 1024u);
  BOOST_TEST(CachingDeviceAllocator::segment_size(512) == 2 * kOneMiB);
  BOOST_TEST(CachingDeviceAllocator::segment_size(kOneMiB) == 2 * kOneMiB);
  BOOST_TEST(CachingDeviceAllocator::segment_size(kOneMiB + 512) == 20 * kOneMiB);
  BOOST_TEST(CachingDeviceAllocator::segment_size(10 * kOneMiB) == 10 * kOneMiB);
  BOOST_TEST(CachingDeviceAllocator::segment_size(11 * kOneMiB + 1) == 12 * kOneMiB);
}

BOOST_AUTO_TEST_CASE(small_requests_share_a_2_mib_segment_split_in_order) {
  void* a = alloc.allocate(100, kS1);
  void* b = alloc.allocate(1000, kS1);
  void* c = alloc.allocate(512, kS1);
  BOOST_TEST(at(b) == at(a) + 512);
  BOOST_TEST(at(c) == at(b) + 1024);
  DeviceAllocatorStats s = alloc.stats();
  BOOST_TEST(s.num_device_alloc == 1);
  BOOST_TEST(s.reserved_bytes.current == std::int64_t(2 * kOneMiB));
  BOOST_TEST(s.allocated_bytes.current == 2048);
  BOOST_TEST(s.requested_bytes.current == 1612);
  BOOST_TEST(s.allocation.current == 3);
  BOOST_TEST(s.num_splits == 3);
  alloc.free(a);
  alloc.free(b);
  alloc.free(c);
}

BOOST_AUTO_TEST_CASE(a_freed_block_is_reused_on_its_stream_but_not_on_another) {
  void* a = alloc.allocate(4 * kOneMiB, kS1);
  alloc.free(a);
  void* other = alloc.allocate(4 * kOneMiB, kS2);
  BOOST_TEST(other != a);
  void* again = alloc.allocate(4 * kOneMiB, kS1);
  BOOST_TEST(again == a);
  BOOST_TEST(alloc.stats().num_device_alloc == 2);
  alloc.free(other);
  alloc.free(again);
}

BOOST_AUTO_TEST_CASE(best_fit_picks_the_smallest_cached_block_that_fits) {
  void* big = alloc.allocate(30 * kOneMiB, kS1);  // own 30 MiB segment
  void* mid = alloc.allocate(12 * kOneMiB, kS1);  // own 12 MiB segment
  alloc.free(big);
  alloc.free(mid);
  void* p = alloc.allocate(11 * kOneMiB, kS1);
  BOOST_TEST(p == mid);  // 12 MiB fits best; 1 MiB left is not worth a split
  BOOST_TEST(alloc.stats().allocated_bytes.current == std::int64_t(12 * kOneMiB));
  void* q = alloc.allocate(20 * kOneMiB, kS1);
  BOOST_TEST(q == big);  // split: 10 MiB stay cached
  BOOST_TEST(alloc.stats().allocated_bytes.current == std::int64_t(32 * kOneMiB));
  void* r = alloc.allocate(10 * kOneMiB, kS1);
  BOOST_TEST(at(r) == at(big) + 20 * kOneMiB);
  alloc.free(p);
  alloc.free(q);
  alloc.free(r);
}

BOOST_AUTO_TEST_CASE(freed_neighbours_merge_and_empty_cache_returns_whole_segments) {
  void* a = alloc.allocate(256 * 1024, kS1);
  void* b = alloc.allocate(256 * 1024, kS1);
  void* c = alloc.allocate(256 * 1024, kS1);
  alloc.free(b);
  alloc.free(a);  // merges with b
  BOOST_TEST(alloc.stats().num_merges == 1);
  void* ab = alloc.allocate(512 * 1024, kS1);
  BOOST_TEST(ab == a);  // the merged block serves a request of both sizes
  alloc.empty_cache();  // c and ab are live: the segment stays
  BOOST_TEST(alloc.stats().num_device_free == 0);
  alloc.free(ab);
  alloc.free(c);
  alloc.empty_cache();
  DeviceAllocatorStats s = alloc.stats();
  BOOST_TEST(s.num_device_free == 1);
  BOOST_TEST(s.reserved_bytes.current == 0);
  BOOST_TEST(s.reserved_bytes.peak == std::int64_t(2 * kOneMiB));
  BOOST_TEST(dev.segments.empty());
}

BOOST_AUTO_TEST_CASE(record_stream_defers_reuse_until_the_other_streams_event_completes) {
  void* a = alloc.allocate(4 * kOneMiB, kS1);
  alloc.record_stream(a, kS2);
  alloc.record_stream(a, kS1);  // its own stream: no event needed
  alloc.free(a);
  BOOST_TEST(dev.events.size() == 1u);
  DeviceAllocatorStats s = alloc.stats();
  BOOST_TEST(s.allocated_bytes.current == 0);
  BOOST_TEST(s.active_bytes.current == std::int64_t(4 * kOneMiB));  // freed, still in use on s2
  void* b = alloc.allocate(4 * kOneMiB, kS1);
  BOOST_TEST(b != a);  // s2 may still be using a
  dev.complete(kS2);
  alloc.free(b);
  void* c = alloc.allocate(4 * kOneMiB, kS1);
  BOOST_TEST((c == a || c == b));
  BOOST_TEST(alloc.stats().active_bytes.current == std::int64_t(4 * kOneMiB));
  BOOST_TEST(dev.destroyed == 1);
  alloc.free(c);
}

BOOST_AUTO_TEST_CASE(empty_cache_waits_for_pending_frees) {
  void* a = alloc.allocate(4 * kOneMiB, kS1);
  alloc.record_stream(a, kS2);
  alloc.free(a);
  alloc.empty_cache();
  BOOST_TEST(dev.synchronized == 1);
  BOOST_TEST(alloc.stats().reserved_bytes.current == 0);
  BOOST_TEST(alloc.stats().active_bytes.current == 0);
}

BOOST_AUTO_TEST_CASE(out_of_memory_frees_the_cache_and_retries_once_then_says_what_it_wanted) {
  dev.capacity = 40 * kOneMiB;
  void* a = alloc.allocate(20 * kOneMiB, kS1);
  void* b = alloc.allocate(20 * kOneMiB, kS1);
  alloc.free(a);  // cached on s1: s2 cannot use it, but the retry gives it back
  void* c = alloc.allocate(20 * kOneMiB, kS2);
  DeviceAllocatorStats s = alloc.stats();
  BOOST_TEST(s.num_alloc_retries == 1);
  BOOST_TEST(s.num_device_free == 1);
  BOOST_TEST(s.reserved_bytes.current == std::int64_t(40 * kOneMiB));
  try {
    alloc.allocate(3 * kOneMiB, kS1);
    BOOST_FAIL("expected out of memory");
  } catch (const RuntimeError& e) {
    BOOST_TEST(std::string(e.what()) ==
               "CUDA out of memory. Tried to allocate 3.00 MiB (a 20.00 MiB segment); this "
               "allocator has 40.00 MiB allocated and 40.00 MiB reserved");
  }
  BOOST_TEST(alloc.stats().num_ooms == 1);
  alloc.free(b);
  alloc.free(c);
}

BOOST_AUTO_TEST_CASE(freeing_an_unknown_pointer_is_a_value_error) {
  int x = 0;
  BOOST_CHECK_EXCEPTION(alloc.free(&x), ValueError, [&](const ValueError& e) {
    return std::string(e.what()).find("was not allocated here (or was freed twice)") !=
           std::string::npos;
  });
  void* a = alloc.allocate(100, kS1);
  alloc.free(a);
  BOOST_CHECK_THROW(alloc.free(a), ValueError);
  BOOST_CHECK_THROW(alloc.record_stream(a, kS2), ValueError);
}

BOOST_AUTO_TEST_CASE(statistics_carry_torch_names_and_peaks_reset_to_current) {
  void* a = alloc.allocate(3 * kOneMiB, kS1);
  void* b = alloc.allocate(kOneMiB, kS1);
  alloc.free(a);
  auto d = alloc.stats().as_torch_dict();
  BOOST_TEST(d.at("allocated_bytes.all.current") == std::int64_t(kOneMiB));
  BOOST_TEST(d.at("allocated_bytes.all.peak") == std::int64_t(4 * kOneMiB));
  BOOST_TEST(d.at("reserved_bytes.all.current") == std::int64_t(22 * kOneMiB));
  BOOST_TEST(d.at("active_bytes.all.current") == std::int64_t(kOneMiB));
  BOOST_TEST(d.at("segment.all.current") == 2);
  BOOST_TEST(d.at("num_alloc_retries") == 0);
  alloc.reset_peak_stats();
  BOOST_TEST(alloc.stats().allocated_bytes.peak == std::int64_t(kOneMiB));
  alloc.free(b);
}

// Random sizes on two streams: live blocks never overlap, and once everything is freed every
// segment has merged back whole, so empty_cache returns all of them.
BOOST_AUTO_TEST_CASE(random_traffic_never_overlaps_and_merges_back_whole) {
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> pick(0, 99);
  std::vector<std::tuple<void*, std::size_t, StreamId>> live;
  for (int step = 0; step < 20000; ++step) {
    if (live.empty() || pick(rng) < 55) {
      const int kind = pick(rng);
      const std::size_t bytes = kind < 60   ? 1 + rng() % (64 * 1024)      // small pool
                                : kind < 90 ? 1 + rng() % (8 * kOneMiB)    // large segments
                                            : 1 + rng() % (40 * kOneMiB);  // own segments
      const StreamId stream = pick(rng) < 50 ? kS1 : kS2;
      void* p = alloc.allocate(bytes, stream);
      const auto lo = at(p), hi = lo + CachingDeviceAllocator::round_size(bytes);
      for (const auto& [q, qbytes, qstream] : live) {
        const auto qlo = at(q), qhi = qlo + CachingDeviceAllocator::round_size(qbytes);
        BOOST_REQUIRE_MESSAGE(hi <= qlo || qhi <= lo, "step " << step << ": overlap");
      }
      live.emplace_back(p, bytes, stream);
    } else {
      const std::size_t i = rng() % live.size();
      alloc.free(std::get<0>(live[i]));
      live[i] = live.back();
      live.pop_back();
    }
  }
  for (const auto& [p, bytes, stream] : live) alloc.free(p);
  DeviceAllocatorStats s = alloc.stats();
  BOOST_TEST(s.allocated_bytes.current == 0);
  BOOST_TEST(s.active_bytes.current == 0);
  BOOST_TEST(s.requested_bytes.current == 0);
  alloc.empty_cache();
  BOOST_TEST(alloc.stats().reserved_bytes.current == 0);
  BOOST_TEST(dev.segments.empty());
}

BOOST_AUTO_TEST_CASE(threads_allocating_at_once_keep_the_statistics_exact) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([this, t] {
      std::vector<void*> mine;
      for (int i = 0; i < 2000; ++i) {
        mine.push_back(alloc.allocate(512 * (1 + (i * 7 + t) % 300), StreamId(t + 1)));
        if (i % 3 == 2) {
          alloc.free(mine.front());
          mine.erase(mine.begin());
        }
      }
      for (void* p : mine) alloc.free(p);
    });
  for (auto& th : threads) th.join();
  BOOST_TEST(alloc.stats().allocated_bytes.current == 0);
  BOOST_TEST(alloc.stats().allocation.current == 0);
  alloc.empty_cache();
  BOOST_TEST(dev.segments.empty());
}

BOOST_AUTO_TEST_SUITE_END()
