// The caching device allocator, PyTorch's CUDACachingAllocator design in our own code: device
// memory is taken from the backend in segments and kept; a request is served by the best-fitting
// cached block of its stream's pool (split when much larger), and freed blocks merge with free
// neighbours of their segment. Pools are per stream because a block freed on stream s may still
// be in use by kernels queued on s: reusing it on s is ordered, on another stream it is not.
// record_stream(p, t) says p is also used on t; freeing p then records an event on t and the
// block waits for it before it returns to the pool. The backend (device memory and events) is
// injected, so the logic is plain C++ and device-independent: core/cuda's backend is cudaMalloc
// and CUDA events, core/fake_cuda's is host pages and that device's stream counters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

namespace fsdp {

using StreamId = std::uintptr_t;  // a cudaStream_t's value, or a fake_cuda stream's id
using EventId = std::uintptr_t;

class DeviceMemoryBackend {
 public:
  virtual ~DeviceMemoryBackend() = default;
  virtual void* allocate(std::size_t bytes) = 0;  // nullptr when the device is out of memory
  virtual void release(void* ptr) = 0;
  virtual EventId record_event(StreamId stream) = 0;  // an event after the work queued so far
  virtual bool event_done(EventId event) = 0;
  virtual void synchronize_event(EventId event) = 0;
  virtual void destroy_event(EventId event) = 0;
};

// One statistic as torch.cuda.memory_stats() reports it: current and peak, and the totals
// ever added ("allocated") and removed ("freed").
struct StatValue {
  std::int64_t current = 0, peak = 0, allocated = 0, freed = 0;
  void add(std::int64_t delta);
};

// torch.cuda.memory_stats()'s names (the ".all" aggregate).
struct DeviceAllocatorStats {
  StatValue allocated_bytes;  // blocks handed out, rounded sizes
  StatValue reserved_bytes;   // segments held from the device
  StatValue active_bytes;     // allocated, or freed but waiting for record_stream's events
  StatValue requested_bytes;  // as asked, before rounding
  StatValue allocation, segment, active;  // counts of the same things
  std::int64_t num_alloc_retries = 0;     // device allocations retried after freeing the cache
  std::int64_t num_ooms = 0;
  std::int64_t num_device_alloc = 0, num_device_free = 0;
  std::int64_t num_splits = 0, num_merges = 0;
  std::int64_t cached_blocks = 0;  // free blocks in the pools (filled in by stats())
  // "allocated_bytes.all.current" = ..., as torch.cuda.memory_stats() spells them.
  std::map<std::string, std::int64_t> as_torch_dict() const;
};

class CachingDeviceAllocator {
 public:
  // torch's constants: requests round to 512 bytes; under 1 MiB they come from 2 MiB segments
  // (the small pool), up to 10 MiB from 20 MiB segments, larger ones from segments rounded to
  // 2 MiB. A small block is split when 512 bytes or more would be left, a large one when more
  // than 1 MiB would be (smaller remainders are rarely reused and only fragment).
  static constexpr std::size_t kMinBlock = 512;
  static constexpr std::size_t kSmallSize = 1 << 20;
  static constexpr std::size_t kSmallBuffer = 2 << 20;
  static constexpr std::size_t kLargeBuffer = 20 << 20;
  static constexpr std::size_t kMinLargeAlloc = 10 << 20;
  static constexpr std::size_t kRoundLarge = 2 << 20;

  // `device` names the device in errors ("CUDA out of memory", "fake_cuda:0 out of memory").
  explicit CachingDeviceAllocator(std::unique_ptr<DeviceMemoryBackend> backend,
                                  std::string device = "CUDA");
  ~CachingDeviceAllocator();  // gives cached segments back; live blocks are the owners' problem
  CachingDeviceAllocator(const CachingDeviceAllocator&) = delete;
  CachingDeviceAllocator& operator=(const CachingDeviceAllocator&) = delete;

  // A block of at least `bytes` for use on `stream`; throws fsdp::RuntimeError ("CUDA out of
  // memory. Tried to allocate ...") when the device has none even after the cache is freed.
  // allocate(0) is nullptr, as torch's (no block, nothing counted).
  void* allocate(std::size_t bytes, StreamId stream);
  void free(void* ptr);  // throws ValueError for a pointer this allocator did not hand out
  // `ptr` is also used on `stream`: its reuse waits for the work queued there at free time.
  void record_stream(void* ptr, StreamId stream);
  void empty_cache();  // waits for pending frees, then gives every whole free segment back
  DeviceAllocatorStats stats() const;
  void reset_peak_stats();

  static std::size_t round_size(std::size_t bytes);
  static std::size_t segment_size(std::size_t rounded);

 private:
  struct Block {
    std::size_t size = 0, requested = 0;
    char* ptr = nullptr;
    StreamId stream = 0;
    bool small = false, allocated = false;
    int pending_events = 0;                  // record_stream events still to complete after free
    Block *prev = nullptr, *next = nullptr;  // neighbours in the same segment
    std::set<StreamId> stream_uses;
  };
  struct BlockLess {  // by stream, then size, then address: lower_bound is the best fit
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BlockLess>;

  Pool& pool_of(bool small) { return small ? small_pool_ : large_pool_; }
  void process_events_locked();
  void free_block_locked(Block* block);  // back to its pool, merged with free neighbours
  bool merge_locked(Block* into, Block* other);
  void release_cached_locked();  // every whole free segment back to the backend
  Block* find_block_locked(std::size_t size, StreamId stream, bool small);
  void split_locked(Block* block, std::size_t size);

  std::unique_ptr<DeviceMemoryBackend> backend_;
  std::string device_;
  mutable std::mutex mutex_;
  Pool small_pool_, large_pool_;
  std::unordered_map<void*, Block*> live_;  // allocated blocks by address
  std::deque<std::pair<EventId, Block*>> pending_;
  DeviceAllocatorStats stats_;
};

}  // namespace fsdp
