// The caching CPU allocator: freed blocks stay with the allocator and serve later requests of
// (nearly) the same size, so an FSDP step that frees and re-allocates the same unsharded
// parameters, gradients and activations every iteration takes no new pages from the system
// after the first step (no page faults: bench/memory). Large blocks are mmapped and kept mapped
// while cached, split to serve smaller requests and merged again when freed; small ones come
// from malloc. empty_cache() gives every cached block back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>

#include "core/memory.h"

namespace fsdp {

class CachingCpuAllocator final : public Allocator {
 public:
  struct Options {
    std::size_t mmap_threshold = 256 * 1024;  // blocks at least this large are mmapped
    // The best-fitting cached block serves a request whole when at most size / slack_divisor
    // bytes larger; a larger one is split when what is left is at least mmap_threshold (the
    // rest stays cached, and merges again with free neighbours when blocks are freed).
    std::size_t slack_divisor = 8;
    // A freed block that would take the cached bytes over this goes back to the system.
    std::size_t max_cached_bytes = SIZE_MAX;
  };
  CachingCpuAllocator() : CachingCpuAllocator(Options{}) {}
  explicit CachingCpuAllocator(Options options) : options_(options) {}
  ~CachingCpuAllocator() override;  // gives back the cached blocks (live ones are leaked)

  void* allocate(std::size_t nbytes, Device device) override;
  void deallocate(void* ptr, std::size_t nbytes, Device device) override;
  AllocatorStats stats() const override;
  void reset_peak_stats() override;
  void empty_cache() override;
  std::string_view name() const override { return "caching"; }

  // The size of the block that serves a request of `nbytes` (64 bytes, or a page from the
  // mmap threshold up).
  std::size_t block_size(std::size_t nbytes) const;

 private:
  void* system_allocate(std::size_t size);  // null when the system has no memory
  void system_free(void* ptr, std::size_t size);
  void release_cached_locked();
  // The cached block that serves `want` bytes (whole or split), or cached_.end().
  std::multimap<std::size_t, void*>::iterator find_cached_locked(std::size_t want);
  void take_cached_locked(std::multimap<std::size_t, void*>::iterator it);
  void erase_cached_locked(void* ptr, std::size_t size);
  void cache_locked(void* ptr, std::size_t size);  // merges a large block with free neighbours

  Options options_;
  mutable std::mutex mutex_;
  std::multimap<std::size_t, void*> cached_;       // free blocks by size: best fit
  std::map<void*, std::size_t> free_large_;        // the large ones of cached_, by address
  std::unordered_map<void*, std::size_t> in_use_;  // block sizes of live allocations
  AllocatorStats stats_;
};

// The process's caching CPU allocator (the default CPU allocator, core/memory.h).
CachingCpuAllocator& cpu_caching_allocator();

}  // namespace fsdp
