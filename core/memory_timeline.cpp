#include "core/memory_timeline.h"

#include <algorithm>

#include "core/memory_stats.h"

namespace fsdp {

MemoryTimeline::MemoryTimeline() : start_(std::chrono::steady_clock::now()) {}

std::int64_t MemoryTimeline::now_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                              start_)
      .count();
}

void MemoryTimeline::record(std::int64_t delta, MemoryCategory category) {
  auto c = static_cast<std::size_t>(category);
  std::lock_guard lock(mutex_);
  // The time is taken under the lock so that records are in time order.
  records_.push_back(Record{now_ns(), delta, category});
  current_[c] += delta;
  peak_[c] = std::max(peak_[c], current_[c]);
  total_ += delta;
  if (total_ > peak_total_) {
    peak_total_ = total_;
    at_peak_total_ = current_;
  }
}

void MemoryTimeline::mark(std::string name) {
  std::lock_guard lock(mutex_);
  events_.push_back(Event{now_ns(), std::move(name)});
}

std::vector<MemoryTimeline::Record> MemoryTimeline::records() const {
  std::lock_guard lock(mutex_);
  return records_;
}

std::vector<MemoryTimeline::Event> MemoryTimeline::events() const {
  std::lock_guard lock(mutex_);
  return events_;
}

MemoryTimeline::PerCategory MemoryTimeline::current_bytes() const {
  std::lock_guard lock(mutex_);
  return current_;
}

MemoryTimeline::PerCategory MemoryTimeline::peak_bytes() const {
  std::lock_guard lock(mutex_);
  return peak_;
}

std::int64_t MemoryTimeline::peak_total_bytes() const {
  std::lock_guard lock(mutex_);
  return peak_total_;
}

MemoryTimeline::PerCategory MemoryTimeline::bytes_at_peak_total() const {
  std::lock_guard lock(mutex_);
  return at_peak_total_;
}

void mark_memory_event(std::string name) {
  if (auto timeline = MemoryScopes::current().timeline()) timeline->mark(std::move(name));
}

}  // namespace fsdp
