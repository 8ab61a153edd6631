#include "core/memory_stats.h"

namespace fsdp {

void MemoryStats::on_alloc(std::int64_t n) {
  num_allocs.fetch_add(1, std::memory_order_relaxed);
  std::int64_t cur = current_bytes.fetch_add(n, std::memory_order_relaxed) + n;
  std::int64_t peak = peak_bytes.load(std::memory_order_relaxed);
  while (cur > peak && !peak_bytes.compare_exchange_weak(peak, cur, std::memory_order_relaxed)) {
  }
}

void MemoryStats::on_free(std::int64_t n) {
  num_frees.fetch_add(1, std::memory_order_relaxed);
  current_bytes.fetch_sub(n, std::memory_order_relaxed);
}

MemoryStats& global_memory_stats(DeviceType type) {
  static MemoryStats stats[kNumDeviceTypes];
  return stats[static_cast<int>(type)];
}

struct MemoryScopes::Link {
  std::shared_ptr<MemoryStats> stats;
  std::shared_ptr<const Link> outer;
  bool charged;  // false when an enclosing scope already holds the same stats
};

namespace {
thread_local MemoryScopes t_scopes;
}  // namespace

MemoryScopes MemoryScopes::current() {
  return t_scopes;
}

void MemoryScopes::on_alloc(std::int64_t n) const {
  for (const Link* l = head_.get(); l; l = l->outer.get())
    if (l->charged) l->stats->on_alloc(n);
}

void MemoryScopes::on_free(std::int64_t n) const {
  for (const Link* l = head_.get(); l; l = l->outer.get())
    if (l->charged) l->stats->on_free(n);
}

MemoryStatsScope::MemoryStatsScope(std::shared_ptr<MemoryStats> stats) : prev_(t_scopes) {
  bool charged = stats != nullptr;
  for (const MemoryScopes::Link* l = prev_.head_.get(); l && charged; l = l->outer.get())
    if (l->stats == stats) charged = false;
  t_scopes.head_ = std::make_shared<const MemoryScopes::Link>(
      MemoryScopes::Link{std::move(stats), prev_.head_, charged});
}

// Only the chain is restored: a category or timeline scope nested inside restores its own.
MemoryStatsScope::~MemoryStatsScope() {
  t_scopes.head_ = std::move(prev_.head_);
}

std::shared_ptr<MemoryStats> MemoryStatsScope::current() {
  return t_scopes.head_ ? t_scopes.head_->stats : nullptr;
}

MemoryScopesGuard::MemoryScopesGuard(MemoryScopes scopes) : prev_(std::move(t_scopes)) {
  t_scopes = std::move(scopes);
}

MemoryScopesGuard::~MemoryScopesGuard() {
  t_scopes = std::move(prev_);
}

MemoryCategoryScope::MemoryCategoryScope(MemoryCategory category) : prev_(t_scopes.category_) {
  t_scopes.category_ = category;
}

MemoryCategoryScope::~MemoryCategoryScope() {
  t_scopes.category_ = prev_;
}

MemoryTimelineScope::MemoryTimelineScope(std::shared_ptr<MemoryTimeline> timeline)
    : prev_(std::move(t_scopes.timeline_)) {
  t_scopes.timeline_ = std::move(timeline);
}

MemoryTimelineScope::~MemoryTimelineScope() {
  t_scopes.timeline_ = std::move(prev_);
}

}  // namespace fsdp
