#include "core/cuda/index_fault.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <array>
#include <atomic>
#include <cstring>
#include <mutex>

#include "core/cuda/cuda_check.h"
#include "core/cuda/devices.h"
#include "core/cuda/streams.h"
#include "core/error.h"

namespace fsdp::cuda {
namespace {

std::array<std::atomic<IndexFault*>, CudaStreams::kMaxDevices> records{};
std::mutex records_mutex;

}  // namespace

IndexFault* index_fault_record(int device) {
  if (IndexFault* r = records.at(static_cast<std::size_t>(device)).load()) return r;
  std::lock_guard lock(records_mutex);
  auto& slot = records.at(static_cast<std::size_t>(device));
  if (IndexFault* r = slot.load()) return r;
  // Pinned and mapped: the device writes it in place (unified addressing) only when an index
  // is bad, and the host reads it without a copy (a copy would be one more host wait).
  DeviceGuard guard(device);
  void* p = nullptr;
  FSDP_CUDA_CHECK(
      cudaHostAlloc(&p, sizeof(IndexFault), cudaHostAllocMapped | cudaHostAllocPortable));
  std::memset(p, 0, sizeof(IndexFault));
  slot.store(static_cast<IndexFault*>(p));
  return static_cast<IndexFault*>(p);
}

void raise_index_fault(int device) {
  if (device < 0 || device >= CudaStreams::kMaxDevices) return;
  IndexFault* r = records[static_cast<std::size_t>(device)].load();
  if (r == nullptr || std::atomic_ref<int>(r->ready).load(std::memory_order_acquire) == 0) return;
  const IndexBounds bounds = r->bounds;
  const std::int64_t value = r->value;
  std::atomic_ref<int>(r->ready).store(0, std::memory_order_relaxed);
  std::atomic_ref<unsigned long long>(r->claimed).store(0, std::memory_order_release);
  throw IndexError(
      fmt::format("cuda:{}: {} (found by a kernel, reported at the next "
                  "synchronisation)",
                  device, index_error_message(bounds, value)));
}

}  // namespace fsdp::cuda
