#include "core/cuda/async_allocator.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/devices.h"
#include "core/cuda/streams.h"
#include "core/error.h"

namespace fsdp::cuda {

AllocatorBackend parse_alloc_conf(std::string_view conf) {
  if (conf.empty() || conf == "backend:native") return AllocatorBackend::Native;
  if (conf == "backend:cudaMallocAsync") return AllocatorBackend::CudaMallocAsync;
  throw ValueError(
      fmt::format("FSDP_CUDA_ALLOC_CONF: '{}' is not supported (expected backend:native or "
                  "backend:cudaMallocAsync)",
                  conf));
}

AllocatorBackend configured_backend() {
  static const AllocatorBackend backend = [] {
    const char* conf = std::getenv("FSDP_CUDA_ALLOC_CONF");
    return parse_alloc_conf(conf ? conf : "");
  }();
  return backend;
}

namespace {

constexpr int kMaxDevices = 16;

struct Block {
  std::size_t bytes = 0;
  int device = 0;
  cudaStream_t stream = nullptr;
  std::vector<cudaStream_t> used_on;  // record_stream's streams
};

struct Counter {
  std::int64_t current = 0, peak = 0;
  void add(std::int64_t n) {
    current += n;
    peak = std::max(peak, current);
  }
};

struct DeviceStats {
  Counter allocated, requested, allocations;
  std::int64_t num_allocs = 0, num_frees = 0, retries = 0, ooms = 0;
};

int devices() {
  int n = 0;
  FSDP_CUDA_CHECK(cudaGetDeviceCount(&n));
  return n;
}

cudaMemPool_t pool_of(int device) {
  cudaMemPool_t pool = nullptr;
  FSDP_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  return pool;
}

std::int64_t pool_attribute(int device, cudaMemPoolAttr attribute) {
  std::uint64_t v = 0;
  FSDP_CUDA_CHECK(cudaMemPoolGetAttribute(pool_of(device), attribute, &v));
  return static_cast<std::int64_t>(v);
}

class AsyncAllocator final : public Allocator {
 public:
  void* allocate(std::size_t nbytes, Device device) override {
    const int index = checked_index(device);
    if (nbytes == 0) return nullptr;
    DeviceGuard guard(index);
    cudaStream_t stream = streams().native(current_stream(device));
    void* p = nullptr;
    cudaError_t rc = cudaMallocAsync(&p, nbytes, stream);
    if (rc == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      std::lock_guard lock(mutex_);
      ++stats_[index].retries;
      FSDP_CUDA_CHECK(cudaDeviceSynchronize());  // frees queued on any stream take effect
      FSDP_CUDA_CHECK(cudaMemPoolTrimTo(pool_of(index), 0));
      rc = cudaMallocAsync(&p, nbytes, stream);
      if (rc == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        ++stats_[index].ooms;
        throw RuntimeError(fmt::format(
            "{} out of memory. Tried to allocate {:.2f} MiB; the cudaMallocAsync allocator has "
            "{:.2f} MiB allocated",
            device.str(), nbytes / 1048576.0, stats_[index].allocated.current / 1048576.0));
      }
    }
    FSDP_CUDA_CHECK(rc);
    std::lock_guard lock(mutex_);
    blocks_[p] = Block{nbytes, index, stream, {}};
    DeviceStats& s = stats_[index];
    s.allocated.add(static_cast<std::int64_t>(nbytes));
    s.requested.add(static_cast<std::int64_t>(nbytes));
    s.allocations.add(1);
    ++s.num_allocs;
    return p;
  }

  void deallocate(void* ptr, std::size_t, Device) override {
    if (ptr == nullptr) return;
    Block b;
    {
      std::lock_guard lock(mutex_);
      auto it = blocks_.find(ptr);
      FSDP_CHECK(it != blocks_.end(), RuntimeError,
                 "cudaMallocAsync allocator: {} was not allocated by it", ptr);
      b = std::move(it->second);
      blocks_.erase(it);
      DeviceStats& s = stats_[b.device];
      s.allocated.add(-static_cast<std::int64_t>(b.bytes));
      s.requested.add(-static_cast<std::int64_t>(b.bytes));
      s.allocations.add(-1);
      ++s.num_frees;
    }
    DeviceGuard guard(b.device);
    for (cudaStream_t other : b.used_on) {  // the free waits for their work queued by now
      cudaEvent_t e;
      FSDP_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      FSDP_CUDA_CHECK(cudaEventRecord(e, other));
      FSDP_CUDA_CHECK(cudaStreamWaitEvent(b.stream, e, 0));
      FSDP_CUDA_CHECK(cudaEventDestroy(e));  // released once it completes
    }
    FSDP_CUDA_CHECK(cudaFreeAsync(ptr, b.stream));
  }

  void record_stream(void* ptr, Device, const Stream& stream) override {
    cudaStream_t s = streams().native(stream);
    std::lock_guard lock(mutex_);
    auto it = blocks_.find(ptr);
    FSDP_CHECK(it != blocks_.end(), RuntimeError,
               "cudaMallocAsync allocator: record_stream of {}, which it did not allocate", ptr);
    if (s != it->second.stream && std::find(it->second.used_on.begin(), it->second.used_on.end(),
                                            s) == it->second.used_on.end())
      it->second.used_on.push_back(s);
  }

  AllocatorStats stats_for(Device device) const override {
    const int index = checked_index(device);
    std::lock_guard lock(mutex_);
    const DeviceStats& s = stats_[index];
    AllocatorStats a;
    a.allocated_bytes = s.allocated.current;
    a.allocated_bytes_peak = s.allocated.peak;
    a.requested_bytes = s.requested.current;
    a.requested_bytes_peak = s.requested.peak;
    a.num_allocs = s.num_allocs;
    a.num_frees = s.num_frees;
    a.num_alloc_retries = s.retries;
    a.reserved_bytes = pool_attribute(index, cudaMemPoolAttrReservedMemCurrent);
    a.reserved_bytes_peak = pool_attribute(index, cudaMemPoolAttrReservedMemHigh);
    return a;
  }

  AllocatorStats stats() const override {
    AllocatorStats total;
    for (int d = 0; d < devices(); ++d) {
      const AllocatorStats s = stats_for(Device(DeviceType::CUDA, d));
      total.allocated_bytes += s.allocated_bytes;
      total.allocated_bytes_peak += s.allocated_bytes_peak;
      total.reserved_bytes += s.reserved_bytes;
      total.reserved_bytes_peak += s.reserved_bytes_peak;
      total.requested_bytes += s.requested_bytes;
      total.requested_bytes_peak += s.requested_bytes_peak;
      total.num_allocs += s.num_allocs;
      total.num_frees += s.num_frees;
      total.num_alloc_retries += s.num_alloc_retries;
    }
    return total;
  }

  void reset_peak_stats_for(Device device) override {
    const int index = checked_index(device);
    std::lock_guard lock(mutex_);
    DeviceStats& s = stats_[index];
    s.allocated.peak = s.allocated.current;
    s.requested.peak = s.requested.current;
    s.allocations.peak = s.allocations.current;
    std::uint64_t zero = 0;
    FSDP_CUDA_CHECK(cudaMemPoolSetAttribute(pool_of(index), cudaMemPoolAttrReservedMemHigh, &zero));
  }
  void reset_peak_stats() override {
    for (int d = 0; d < devices(); ++d) reset_peak_stats_for(Device(DeviceType::CUDA, d));
  }

  // The pool keeps freed memory for reuse: it goes back once the device's work is done.
  void empty_cache_for(Device device) override {
    const int index = checked_index(device);
    DeviceGuard guard(index);
    FSDP_CUDA_CHECK(cudaDeviceSynchronize());
    FSDP_CUDA_CHECK(cudaMemPoolTrimTo(pool_of(index), 0));
  }
  void empty_cache() override {
    for (int d = 0; d < devices(); ++d) empty_cache_for(Device(DeviceType::CUDA, d));
  }

  std::string_view name() const override { return "cudaMallocAsync"; }

  std::map<std::string, std::int64_t> torch_dict(Device device) const {
    const AllocatorStats a = stats_for(device);
    std::lock_guard lock(mutex_);
    const DeviceStats& s = stats_[checked_index(device)];
    return {{"allocated_bytes.all.current", a.allocated_bytes},
            {"allocated_bytes.all.peak", a.allocated_bytes_peak},
            {"reserved_bytes.all.current", a.reserved_bytes},
            {"reserved_bytes.all.peak", a.reserved_bytes_peak},
            {"requested_bytes.all.current", a.requested_bytes},
            {"requested_bytes.all.peak", a.requested_bytes_peak},
            {"allocation.all.current", s.allocations.current},
            {"allocation.all.peak", s.allocations.peak},
            {"num_alloc_retries", s.retries},
            {"num_ooms", s.ooms}};
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<void*, Block> blocks_;
  std::array<DeviceStats, kMaxDevices> stats_{};
};

AsyncAllocator& the_async_allocator() {
  static auto* a = new AsyncAllocator;  // never destroyed: storages freed late still find it
  return *a;
}

}  // namespace

Allocator& async_allocator() {
  return the_async_allocator();
}

std::map<std::string, std::int64_t> async_memory_stats(Device device) {
  return the_async_allocator().torch_dict(device);
}

}  // namespace fsdp::cuda
