#include "core/caching_allocator.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>

#include "core/error.h"

namespace fsdp {

namespace {
constexpr std::size_t kSmallAlign = 64;
constexpr std::size_t kPage = 4096;

std::size_t round_up(std::size_t n, std::size_t m) {
  return (n + m - 1) / m * m;
}

void add_peak(std::int64_t& current, std::int64_t& peak, std::int64_t delta) {
  current += delta;
  peak = std::max(peak, current);
}
}  // namespace

CachingCpuAllocator::~CachingCpuAllocator() {
  std::lock_guard lock(mutex_);
  release_cached_locked();
}

std::size_t CachingCpuAllocator::block_size(std::size_t nbytes) const {
  std::size_t small = round_up(nbytes, kSmallAlign);
  return small < options_.mmap_threshold ? small : round_up(nbytes, kPage);
}

void* CachingCpuAllocator::system_allocate(std::size_t size) {
  if (size < options_.mmap_threshold) return std::aligned_alloc(kSmallAlign, size);
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void CachingCpuAllocator::system_free(void* ptr, std::size_t size) {
  if (size < options_.mmap_threshold)
    std::free(ptr);
  else
    munmap(ptr, size);
}

std::multimap<std::size_t, void*>::iterator CachingCpuAllocator::find_cached_locked(
    std::size_t want) {
  auto it = cached_.lower_bound(want);
  if (it == cached_.end()) return it;
  // Small blocks are served by exact sizes only: a malloc'd block and an mmapped one must not be
  // confused when they are given back (the size decides which).
  if (it->first == want || want < options_.mmap_threshold)
    return it->first == want ? it : cached_.end();
  // Large: the smallest block at most 1/8 larger, whole; else the smallest one that leaves a
  // large block when split (its front serves the request); else none.
  if (it->first - want <= want / options_.slack_divisor) return it;
  return cached_.lower_bound(want + options_.mmap_threshold);
}

void CachingCpuAllocator::take_cached_locked(std::multimap<std::size_t, void*>::iterator it) {
  if (it->first >= options_.mmap_threshold) free_large_.erase(it->second);
  cached_.erase(it);
}

void CachingCpuAllocator::erase_cached_locked(void* ptr, std::size_t size) {
  auto [first, last] = cached_.equal_range(size);
  for (auto it = first; it != last; ++it)
    if (it->second == ptr) return take_cached_locked(it);
}

void CachingCpuAllocator::cache_locked(void* ptr, std::size_t size) {
  if (size >= options_.mmap_threshold) {
    // Merge with the free large blocks just before and after it: one block again for a later
    // larger request (munmap gives back any page range, across mappings too).
    auto* p = static_cast<char*>(ptr);
    auto next = free_large_.find(p + size);
    if (next != free_large_.end()) {
      const std::size_t next_size = next->second;
      erase_cached_locked(next->first, next_size);
      size += next_size;
      ++stats_.num_merges;
    }
    auto prev = free_large_.lower_bound(p);
    if (prev != free_large_.begin()) {
      --prev;
      if (static_cast<char*>(prev->first) + prev->second == p) {
        void* prev_ptr = prev->first;
        const std::size_t prev_size = prev->second;
        erase_cached_locked(prev_ptr, prev_size);
        ptr = prev_ptr;
        size += prev_size;
        ++stats_.num_merges;
      }
    }
    free_large_.emplace(ptr, size);
  }
  cached_.emplace(size, ptr);
  stats_.cached_blocks = static_cast<std::int64_t>(cached_.size());
}

void* CachingCpuAllocator::allocate(std::size_t nbytes, Device) {
  if (nbytes == 0) return nullptr;
  const std::size_t want = block_size(nbytes);
  std::lock_guard lock(mutex_);
  void* p = nullptr;
  std::size_t size = want;
  if (auto it = find_cached_locked(want); it != cached_.end()) {
    p = it->second;
    size = it->first;
    take_cached_locked(it);
    ++stats_.cache_hits;
    if (size - want >= options_.mmap_threshold) {
      // Split: the front serves the request, the rest stays cached.
      cache_locked(static_cast<char*>(p) + want, size - want);
      size = want;
      ++stats_.num_splits;
    }
    stats_.cached_blocks = static_cast<std::int64_t>(cached_.size());
  } else {
    ++stats_.cache_misses;
    p = system_allocate(want);
    if (!p && !cached_.empty()) {
      ++stats_.num_alloc_retries;
      release_cached_locked();
      p = system_allocate(want);
    }
    if (!p)
      throw RuntimeError(fmt::format(
          "cpu caching allocator: out of memory allocating {} bytes ({} bytes allocated, {} "
          "reserved)",
          nbytes, stats_.allocated_bytes, stats_.reserved_bytes));
    ++stats_.num_system_allocs;
    add_peak(stats_.reserved_bytes, stats_.reserved_bytes_peak, static_cast<std::int64_t>(want));
  }
  in_use_.emplace(p, size);
  ++stats_.num_allocs;
  add_peak(stats_.allocated_bytes, stats_.allocated_bytes_peak, static_cast<std::int64_t>(size));
  add_peak(stats_.requested_bytes, stats_.requested_bytes_peak, static_cast<std::int64_t>(nbytes));
  return p;
}

void CachingCpuAllocator::deallocate(void* ptr, std::size_t nbytes, Device) {
  if (!ptr) return;
  std::lock_guard lock(mutex_);
  auto it = in_use_.find(ptr);
  if (it == in_use_.end())
    throw RuntimeError(fmt::format(
        "cpu caching allocator: free of {} bytes at {} that it did not allocate", nbytes, ptr));
  std::size_t size = it->second;
  in_use_.erase(it);
  ++stats_.num_frees;
  stats_.allocated_bytes -= static_cast<std::int64_t>(size);
  stats_.requested_bytes -= static_cast<std::int64_t>(nbytes);
  auto cached_bytes = static_cast<std::size_t>(stats_.reserved_bytes - stats_.allocated_bytes);
  if (cached_bytes > options_.max_cached_bytes) {
    system_free(ptr, size);
    ++stats_.num_system_frees;
    stats_.reserved_bytes -= static_cast<std::int64_t>(size);
    return;
  }
  cache_locked(ptr, size);
}

void CachingCpuAllocator::release_cached_locked() {
  for (auto& [size, ptr] : cached_) {
    system_free(ptr, size);
    ++stats_.num_system_frees;
    stats_.reserved_bytes -= static_cast<std::int64_t>(size);
  }
  cached_.clear();
  free_large_.clear();
  stats_.cached_blocks = 0;
}

void CachingCpuAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  release_cached_locked();
}

AllocatorStats CachingCpuAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void CachingCpuAllocator::reset_peak_stats() {
  std::lock_guard lock(mutex_);
  stats_.allocated_bytes_peak = stats_.allocated_bytes;
  stats_.reserved_bytes_peak = stats_.reserved_bytes;
  stats_.requested_bytes_peak = stats_.requested_bytes;
}

CachingCpuAllocator& cpu_caching_allocator() {
  // Never destroyed: storages of static objects may be freed after main returns.
  static auto* allocator = new CachingCpuAllocator();
  return *allocator;
}

}  // namespace fsdp
