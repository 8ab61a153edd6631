// A memory timeline: when a thread records into one (MemoryTimelineScope, core/memory_stats.h),
// every storage allocation and free it makes is logged with its time, bytes and category (the
// thread's MemoryCategoryScope), and named events ("unit 3 forward") mark the time axis.
// memory_timeline_svg.h draws it. Frees are charged to the timeline and category of their
// allocation, from whichever thread frees.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/memory_category.h"

namespace fsdp {

class MemoryTimeline {
 public:
  struct Record {
    std::int64_t time_ns;  // since the timeline was created
    std::int64_t delta;    // bytes: > 0 allocated, < 0 freed
    MemoryCategory category;
  };
  struct Event {
    std::int64_t time_ns;
    std::string name;
  };
  using PerCategory = std::array<std::int64_t, kNumMemoryCategories>;

  MemoryTimeline();

  // Thread-safe.
  void record(std::int64_t delta, MemoryCategory category);
  void mark(std::string name);

  std::vector<Record> records() const;
  std::vector<Event> events() const;
  PerCategory current_bytes() const;        // live bytes per category (index: the enum value)
  PerCategory peak_bytes() const;           // each category's own peak
  std::int64_t peak_total_bytes() const;    // the peak of the sum over categories
  PerCategory bytes_at_peak_total() const;  // the categories' bytes at that peak

 private:
  std::int64_t now_ns() const;
  std::chrono::steady_clock::time_point start_;
  mutable std::mutex mutex_;
  std::vector<Record> records_;
  std::vector<Event> events_;
  PerCategory current_{}, peak_{}, at_peak_total_{};
  std::int64_t total_ = 0, peak_total_ = 0;
};

// Marks `name` on the calling thread's timeline; does nothing when the thread records none.
void mark_memory_event(std::string name);

}  // namespace fsdp
