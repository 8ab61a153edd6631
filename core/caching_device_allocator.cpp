#include "core/caching_device_allocator.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace fsdp {

void StatValue::add(std::int64_t delta) {
  current += delta;
  peak = std::max(peak, current);
  (delta >= 0 ? allocated : freed) += delta >= 0 ? delta : -delta;
}

std::map<std::string, std::int64_t> DeviceAllocatorStats::as_torch_dict() const {
  std::map<std::string, std::int64_t> d;
  auto put = [&](const char* name, const StatValue& v) {
    d[fmt::format("{}.all.current", name)] = v.current;
    d[fmt::format("{}.all.peak", name)] = v.peak;
    d[fmt::format("{}.all.allocated", name)] = v.allocated;
    d[fmt::format("{}.all.freed", name)] = v.freed;
  };
  put("allocated_bytes", allocated_bytes);
  put("reserved_bytes", reserved_bytes);
  put("active_bytes", active_bytes);
  put("requested_bytes", requested_bytes);
  put("allocation", allocation);
  put("segment", segment);
  put("active", active);
  d["num_alloc_retries"] = num_alloc_retries;
  d["num_ooms"] = num_ooms;
  d["num_device_alloc"] = num_device_alloc;
  d["num_device_free"] = num_device_free;
  d["num_splits"] = num_splits;
  d["num_merges"] = num_merges;
  return d;
}

bool CachingDeviceAllocator::BlockLess::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  return a->ptr < b->ptr;
}

CachingDeviceAllocator::CachingDeviceAllocator(std::unique_ptr<DeviceMemoryBackend> backend,
                                               std::string device)
    : backend_(std::move(backend)), device_(std::move(device)) {}

CachingDeviceAllocator::~CachingDeviceAllocator() {
  std::lock_guard lock(mutex_);
  for (auto& [event, block] : pending_) backend_->destroy_event(event);
  for (Pool* pool : {&small_pool_, &large_pool_}) {
    for (Block* b : *pool) {
      if (!b->prev && !b->next) backend_->release(b->ptr);
      delete b;
    }
  }
}

std::size_t CachingDeviceAllocator::round_size(std::size_t bytes) {
  if (bytes < kMinBlock) return kMinBlock;
  return (bytes + kMinBlock - 1) / kMinBlock * kMinBlock;
}

std::size_t CachingDeviceAllocator::segment_size(std::size_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

CachingDeviceAllocator::Block* CachingDeviceAllocator::find_block_locked(std::size_t size,
                                                                         StreamId stream,
                                                                         bool small) {
  Pool& pool = pool_of(small);
  Block key;
  key.stream = stream;
  key.size = size;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
}

void CachingDeviceAllocator::split_locked(Block* block, std::size_t size) {
  std::size_t rest = block->size - size;
  bool split = block->small ? rest >= kMinBlock : rest > kSmallSize;
  if (!split) return;
  auto* tail = new Block;
  tail->size = rest;
  tail->ptr = block->ptr + size;
  tail->stream = block->stream;
  tail->small = block->small;
  tail->prev = block;
  tail->next = block->next;
  if (tail->next) tail->next->prev = tail;
  block->next = tail;
  block->size = size;
  pool_of(tail->small).insert(tail);
  ++stats_.num_splits;
}

void* CachingDeviceAllocator::allocate(std::size_t bytes, StreamId stream) {
  if (bytes == 0) return nullptr;
  std::lock_guard lock(mutex_);
  process_events_locked();
  std::size_t size = round_size(bytes);
  bool small = size <= kSmallSize;
  Block* block = find_block_locked(size, stream, small);
  if (!block) {
    std::size_t seg = segment_size(size);
    void* mem = backend_->allocate(seg);
    if (!mem) {
      // Cached segments of every stream go back, then one retry (torch's num_alloc_retries).
      for (auto& [event, b] : pending_) backend_->synchronize_event(event);
      process_events_locked();
      release_cached_locked();
      ++stats_.num_alloc_retries;
      mem = backend_->allocate(seg);
    }
    if (!mem) {
      ++stats_.num_ooms;
      throw RuntimeError(fmt::format(
          "{} out of memory. Tried to allocate {:.2f} MiB (a {:.2f} MiB segment); this "
          "allocator has {:.2f} MiB allocated and {:.2f} MiB reserved",
          device_, bytes / 1048576.0, seg / 1048576.0, stats_.allocated_bytes.current / 1048576.0,
          stats_.reserved_bytes.current / 1048576.0));
    }
    ++stats_.num_device_alloc;
    stats_.reserved_bytes.add(static_cast<std::int64_t>(seg));
    stats_.segment.add(1);
    block = new Block;
    block->size = seg;
    block->ptr = static_cast<char*>(mem);
    block->stream = stream;
    block->small = small;
  }
  split_locked(block, size);
  block->allocated = true;
  block->requested = bytes;
  live_[block->ptr] = block;
  auto sz = static_cast<std::int64_t>(block->size);
  stats_.allocated_bytes.add(sz);
  stats_.active_bytes.add(sz);
  stats_.requested_bytes.add(static_cast<std::int64_t>(bytes));
  stats_.allocation.add(1);
  stats_.active.add(1);
  return block->ptr;
}

void CachingDeviceAllocator::free(void* ptr) {
  if (!ptr) return;
  std::lock_guard lock(mutex_);
  auto it = live_.find(ptr);
  FSDP_CHECK(it != live_.end(), ValueError,
             "CachingDeviceAllocator::free: {} was not allocated here (or was freed twice)", ptr);
  Block* block = it->second;
  live_.erase(it);
  block->allocated = false;
  stats_.allocated_bytes.add(-static_cast<std::int64_t>(block->size));
  stats_.requested_bytes.add(-static_cast<std::int64_t>(block->requested));
  stats_.allocation.add(-1);
  if (block->stream_uses.empty()) {
    free_block_locked(block);
    return;
  }
  // Kernels queued on the other streams may still read or write it: reuse waits for them.
  for (StreamId s : block->stream_uses) {
    pending_.emplace_back(backend_->record_event(s), block);
    ++block->pending_events;
  }
  block->stream_uses.clear();
}

void CachingDeviceAllocator::record_stream(void* ptr, StreamId stream) {
  std::lock_guard lock(mutex_);
  auto it = live_.find(ptr);
  FSDP_CHECK(it != live_.end(), ValueError,
             "CachingDeviceAllocator::record_stream: {} is not a live allocation of this "
             "allocator",
             ptr);
  // Its own stream orders itself: only other streams need an event.
  if (stream != it->second->stream) it->second->stream_uses.insert(stream);
}

void CachingDeviceAllocator::process_events_locked() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (!backend_->event_done(it->first)) {
      ++it;
      continue;
    }
    backend_->destroy_event(it->first);
    Block* block = it->second;
    it = pending_.erase(it);
    if (--block->pending_events == 0) free_block_locked(block);
  }
}

bool CachingDeviceAllocator::merge_locked(Block* into, Block* other) {
  if (!other || other->allocated || other->pending_events > 0) return false;
  pool_of(other->small).erase(other);
  if (other == into->prev) {
    into->ptr = other->ptr;
    into->prev = other->prev;
    if (into->prev) into->prev->next = into;
  } else {
    into->next = other->next;
    if (into->next) into->next->prev = into;
  }
  into->size += other->size;
  delete other;
  ++stats_.num_merges;
  return true;
}

void CachingDeviceAllocator::free_block_locked(Block* block) {
  stats_.active_bytes.add(-static_cast<std::int64_t>(block->size));
  stats_.active.add(-1);
  merge_locked(block, block->prev);
  merge_locked(block, block->next);
  pool_of(block->small).insert(block);
}

void CachingDeviceAllocator::release_cached_locked() {
  for (Pool* pool : {&small_pool_, &large_pool_}) {
    std::vector<Block*> whole;
    for (Block* b : *pool)
      if (!b->prev && !b->next) whole.push_back(b);
    for (Block* b : whole) {
      pool->erase(b);
      backend_->release(b->ptr);
      ++stats_.num_device_free;
      stats_.reserved_bytes.add(-static_cast<std::int64_t>(b->size));
      stats_.segment.add(-1);
      delete b;
    }
  }
}

void CachingDeviceAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  for (auto& [event, block] : pending_) backend_->synchronize_event(event);
  process_events_locked();
  release_cached_locked();
}

DeviceAllocatorStats CachingDeviceAllocator::stats() const {
  std::lock_guard lock(mutex_);
  DeviceAllocatorStats s = stats_;
  s.cached_blocks = static_cast<std::int64_t>(small_pool_.size() + large_pool_.size());
  return s;
}

void CachingDeviceAllocator::reset_peak_stats() {
  std::lock_guard lock(mutex_);
  for (StatValue* v :
       {&stats_.allocated_bytes, &stats_.reserved_bytes, &stats_.active_bytes,
        &stats_.requested_bytes, &stats_.allocation, &stats_.segment, &stats_.active})
    v->peak = v->current;
}

}  // namespace fsdp
