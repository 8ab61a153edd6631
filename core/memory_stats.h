// Memory statistics: current and peak bytes, globally per device type and per scope. Scopes nest
// (an allocation is charged to every enclosing scope) and travel with work handed to other
// threads (comm's worker threads run a queued collective under the scopes of the thread that
// queued it). The same thread context carries the memory category and the memory timeline
// (core/memory_timeline.h) that allocations are recorded under, so those travel too.
// Standalone: comm/ links it without the tensor library.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "core/device.h"
#include "core/memory_category.h"

namespace fsdp {

class MemoryTimeline;

struct MemoryStats {
  std::atomic<std::int64_t> current_bytes{0};
  std::atomic<std::int64_t> peak_bytes{0};
  std::atomic<std::int64_t> num_allocs{0};
  std::atomic<std::int64_t> num_frees{0};

  void on_alloc(std::int64_t n);
  void on_free(std::int64_t n);
  void reset_peak() { peak_bytes.store(current_bytes.load()); }
};

// Process-wide statistics of one device type (cpu, cuda). Meta tensors allocate nothing.
MemoryStats& global_memory_stats(DeviceType type);

// The scopes current on a thread, innermost first: an immutable chain, so a copy is one
// shared_ptr (a storage keeps the chain it was allocated under and charges its frees back to it
// from any thread). With them: the thread's memory category and memory timeline (if recording).
class MemoryScopes {
 public:
  MemoryScopes() = default;
  static MemoryScopes current();  // this thread's
  bool empty() const { return head_ == nullptr; }
  MemoryCategory category() const { return category_; }
  const std::shared_ptr<MemoryTimeline>& timeline() const { return timeline_; }
  // Charges every scope of the chain once (a stats object entered twice counts once).
  void on_alloc(std::int64_t n) const;
  void on_free(std::int64_t n) const;

 private:
  friend class MemoryStatsScope;
  friend class MemoryScopesGuard;
  friend class MemoryCategoryScope;
  friend class MemoryTimelineScope;
  struct Link;
  std::shared_ptr<const Link> head_;
  MemoryCategory category_ = MemoryCategory::Other;
  std::shared_ptr<MemoryTimeline> timeline_;
};

// While alive, storages this thread allocates are charged to `stats` and to every enclosing
// scope, and their frees are charged back to them from whichever thread frees them.
class MemoryStatsScope {
 public:
  explicit MemoryStatsScope(std::shared_ptr<MemoryStats> stats);
  ~MemoryStatsScope();
  MemoryStatsScope(const MemoryStatsScope&) = delete;
  MemoryStatsScope& operator=(const MemoryStatsScope&) = delete;
  static std::shared_ptr<MemoryStats> current();  // the innermost scope's stats (null if none)

 private:
  MemoryScopes prev_;
};

// Makes `scopes` (captured on another thread with MemoryScopes::current()) this thread's scopes
// while alive, replacing the thread's own: work run for another thread is charged to its scopes.
class MemoryScopesGuard {
 public:
  explicit MemoryScopesGuard(MemoryScopes scopes);
  ~MemoryScopesGuard();
  MemoryScopesGuard(const MemoryScopesGuard&) = delete;
  MemoryScopesGuard& operator=(const MemoryScopesGuard&) = delete;

 private:
  MemoryScopes prev_;
};

// While alive, storages this thread allocates (and work it queues to comm's worker threads)
// are of category `category` (parameters, gradients, ...).
class MemoryCategoryScope {
 public:
  explicit MemoryCategoryScope(MemoryCategory category);
  ~MemoryCategoryScope();
  MemoryCategoryScope(const MemoryCategoryScope&) = delete;
  MemoryCategoryScope& operator=(const MemoryCategoryScope&) = delete;

 private:
  MemoryCategory prev_;
};

// While alive, allocations and frees of storages this thread allocates (and of work it queues)
// are recorded in `timeline`; null stops recording.
class MemoryTimelineScope {
 public:
  explicit MemoryTimelineScope(std::shared_ptr<MemoryTimeline> timeline);
  ~MemoryTimelineScope();
  MemoryTimelineScope(const MemoryTimelineScope&) = delete;
  MemoryTimelineScope& operator=(const MemoryTimelineScope&) = delete;

 private:
  std::shared_ptr<MemoryTimeline> prev_;
};

}  // namespace fsdp
