#include "core/cuda/pinned_allocator.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <mutex>

#include "core/cuda/cuda_check.h"
#include "core/error.h"

namespace fsdp::cuda {
namespace {

class PinnedHostAllocator final : public Allocator {
 public:
  void* allocate(std::size_t nbytes, Device) override {
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, nbytes, cudaHostAllocDefault);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: clear it
      throw RuntimeError(fmt::format("pinned host memory: cudaHostAlloc of {} bytes failed: {}",
                                     nbytes, cudaGetErrorString(e)));
    }
    std::lock_guard lock(mutex_);
    stats_.allocated_bytes += static_cast<std::int64_t>(nbytes);
    stats_.allocated_bytes_peak = std::max(stats_.allocated_bytes_peak, stats_.allocated_bytes);
    stats_.reserved_bytes = stats_.allocated_bytes;
    stats_.reserved_bytes_peak = stats_.allocated_bytes_peak;
    ++stats_.num_allocs;
    ++stats_.num_system_allocs;
    return p;
  }
  void deallocate(void* ptr, std::size_t nbytes, Device) override {
    FSDP_CUDA_CHECK(cudaFreeHost(ptr));
    std::lock_guard lock(mutex_);
    stats_.allocated_bytes -= static_cast<std::int64_t>(nbytes);
    stats_.reserved_bytes = stats_.allocated_bytes;
    ++stats_.num_frees;
    ++stats_.num_system_frees;
  }
  AllocatorStats stats() const override {
    std::lock_guard lock(mutex_);
    return stats_;
  }
  std::string_view name() const override { return "cuda_pinned_host"; }

 private:
  mutable std::mutex mutex_;
  AllocatorStats stats_;
};

}  // namespace

Allocator& pinned_host_allocator() {
  static PinnedHostAllocator* a = new PinnedHostAllocator;  // outlives static storages
  return *a;
}

}  // namespace fsdp::cuda
