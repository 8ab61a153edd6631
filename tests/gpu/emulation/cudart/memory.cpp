// Device and pinned memory of the emulated CUDA runtime: allocations in host memory, kept in a
// map so that copies, memsets and kernel arguments are checked against them as a GPU's memory
// protection would, fresh device memory filled with 0xff bytes (NaN in every float format, -1
// in integers) so that a read before a write shows, and each device's capacity enforced.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "tests/gpu/emulation/cudart/emu_state.h"
#include "tests/gpu/emulation/emu_runtime.h"

namespace fsdp::emu {
namespace {

std::mutex* const g_memory_lock = new std::mutex;
std::map<std::uintptr_t, Allocation>* const g_allocations =
    new std::map<std::uintptr_t, Allocation>;
std::vector<std::size_t>* const g_used = new std::vector<std::size_t>(64, 0);  // per device
// The stream-ordered pool (cudaMallocAsync) per device: what it has handed out, and the high
// marks. It keeps nothing back, so its reserved memory is its used memory.
struct Pool {
  std::size_t used = 0, used_high = 0, reserved_high = 0, release_threshold = 0;
};
std::vector<Pool>* const g_pools = new std::vector<Pool>(64);

std::string hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

bool find_locked(const void* p, std::size_t bytes, Allocation* out) {
  const auto key = reinterpret_cast<std::uintptr_t>(p);
  auto it = g_allocations->upper_bound(key);
  if (it == g_allocations->begin()) return false;
  --it;
  const Allocation& a = it->second;
  if (key < a.base || key - a.base > a.size || key - a.base + bytes > a.size) return false;
  if (bytes == 0 && key - a.base == a.size) return false;
  if (out) *out = a;
  return true;
}

void* allocate(std::size_t bytes, int device, MemoryKind kind) {
  const std::size_t rounded = (bytes + 255) / 256 * 256;
  void* p = std::aligned_alloc(256, rounded);
  if (p == nullptr) return nullptr;
  if (kind == MemoryKind::device) std::memset(p, 0xff, rounded);
  std::lock_guard<std::mutex> lk(*g_memory_lock);
  (*g_allocations)[reinterpret_cast<std::uintptr_t>(p)] =
      Allocation{reinterpret_cast<std::uintptr_t>(p), bytes, device, kind};
  return p;
}

// Where a copy's side lies: in the map (device or pinned) or plain host memory.
enum class Side { device, pinned, pageable };
Side side_of(const void* p, std::size_t bytes, bool* partly_outside) {
  Allocation a;
  std::lock_guard<std::mutex> lk(*g_memory_lock);
  if (find_locked(p, bytes, &a)) return a.kind == MemoryKind::device ? Side::device : Side::pinned;
  *partly_outside = find_locked(p, 0, nullptr);  // starts inside, runs past the end
  return Side::pageable;
}

const char* kind_name(cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToHost:
      return "cudaMemcpyHostToHost";
    case cudaMemcpyHostToDevice:
      return "cudaMemcpyHostToDevice";
    case cudaMemcpyDeviceToHost:
      return "cudaMemcpyDeviceToHost";
    case cudaMemcpyDeviceToDevice:
      return "cudaMemcpyDeviceToDevice";
    default:
      return "cudaMemcpyDefault";
  }
}

// A copy in stream order, CUDA's rules for pageable host memory: the source of a copy from
// pageable memory is staged before the call returns; a copy into pageable memory is complete
// when the call returns. A pageable source above kInlineCopyBytes is staged through the driver's
// pinned buffers, which "may synchronize with the stream" (CUDA's API synchronization
// behaviour): the emulation always does, as the worst case a step must not depend on; smaller
// ones travel inline in the command stream.
constexpr std::size_t kInlineCopyBytes = 64 * 1024;
cudaError_t copy(const char* call, void* dst, const void* src, std::size_t count,
                 cudaMemcpyKind kind, cudaStream_t stream, bool synchronous) {
  if (cudaError_t e = sticky_error()) return set_error(e);
  if (count == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr)
    return refuse(cudaErrorInvalidValue, std::string(call) + ": a null pointer");
  bool dst_outside = false, src_outside = false;
  const Side d = side_of(dst, count, &dst_outside), s = side_of(src, count, &src_outside);
  const std::string where = std::string(call) + " (" + kind_name(kind) + ", " +
                            std::to_string(count) + " bytes, dst " + hex(dst) + ", src " +
                            hex(src) + "): ";
  if (dst_outside || src_outside)
    return refuse(cudaErrorInvalidValue,
                  where + (dst_outside ? "dst" : "src") + " runs past the end of its allocation");
  const bool dst_device = d == Side::device, src_device = s == Side::device;
  if ((kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice) && !dst_device)
    return refuse(cudaErrorInvalidValue, where + "dst is not device memory");
  if ((kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice) && !src_device)
    return refuse(cudaErrorInvalidValue, where + "src is not device memory");
  if ((kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost) && src_device)
    return refuse(cudaErrorInvalidValue, where + "src is device memory");
  if ((kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost) && dst_device)
    return refuse(cudaErrorInvalidValue, where + "dst is device memory");
  CUstream_st* st = resolve(stream);
  if (st == nullptr) return refuse(cudaErrorInvalidResourceHandle, where + "a destroyed stream");
  std::function<void()> work = [dst, src, count] { std::memcpy(dst, src, count); };
  if (skipping_device_work() && d == Side::device && s == Side::device) {
    count_skipped();
    work = [] {};
  }
  if (s == Side::pageable && d == Side::device && !synchronous && count > kInlineCopyBytes) {
    std::uint64_t queued;
    {
      std::lock_guard<std::mutex> lk(lock());
      queued = st->submitted;
    }
    count_host_wait("cudaMemcpyAsync from pageable host memory (staged)");
    wait_until(st, queued);
  }
  if (s == Side::pageable) {  // staged now
    auto staged = std::make_shared<std::vector<unsigned char>>(
        static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + count);
    work = [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); };
  }
  const std::uint64_t position = enqueue(st, std::move(work));
  if (synchronous || d == Side::pageable) {
    count_host_wait(synchronous ? call : "cudaMemcpyAsync to pageable host memory");
    wait_until(st, position);
  }
  return set_error(sticky_error());
}

cudaError_t fill(const char* call, void* p, int value, std::size_t width, std::size_t pitch,
                 std::size_t height, cudaStream_t stream, bool synchronous) {
  if (cudaError_t e = sticky_error()) return set_error(e);
  if (width == 0 || height == 0) return cudaSuccess;
  const std::size_t extent = pitch * (height - 1) + width;
  Allocation a;
  bool inside;
  {
    std::lock_guard<std::mutex> lk(*g_memory_lock);
    inside = find_locked(p, extent, &a) && a.kind == MemoryKind::device;
  }
  if (!inside)
    return refuse(cudaErrorInvalidValue, std::string(call) + ": [" + hex(p) + ", +" +
                                             std::to_string(extent) +
                                             ") is not inside one device allocation");
  CUstream_st* st = resolve(stream);
  if (st == nullptr) return refuse(cudaErrorInvalidResourceHandle, std::string(call) + ": stream");
  const bool skip = skipping_device_work();
  if (skip) count_skipped();
  const std::uint64_t position = enqueue(st, [p, value, width, pitch, height, skip] {
    if (skip) return;
    for (std::size_t r = 0; r < height; ++r)
      std::memset(static_cast<char*>(p) + r * pitch, value, width);
  });
  if (synchronous) {
    count_host_wait(call);
    wait_until(st, position);
  }
  return set_error(sticky_error());
}

}  // namespace

bool find_allocation(const void* p, std::size_t bytes, Allocation* out) {
  std::lock_guard<std::mutex> lk(*g_memory_lock);
  return find_locked(p, bytes, out);
}

}  // namespace fsdp::emu

using namespace fsdp::emu;

extern "C" {

cudaError_t cudaMalloc(void** ptr, std::size_t size) {
  if (ptr == nullptr) return refuse(cudaErrorInvalidValue, "cudaMalloc: null");
  if (cudaError_t e = sticky_error()) return set_error(e);
  *ptr = nullptr;
  if (size == 0) return cudaSuccess;
  const int device = current_device();
  {
    std::lock_guard<std::mutex> lk(*g_memory_lock);
    std::size_t& used = (*g_used)[static_cast<std::size_t>(device)];
    if (size > memory_limit() || used + size > memory_limit())
      return set_error(cudaErrorMemoryAllocation);
    used += size;
  }
  *ptr = allocate(size, device, MemoryKind::device);
  if (*ptr == nullptr) {
    std::lock_guard<std::mutex> lk(*g_memory_lock);
    (*g_used)[static_cast<std::size_t>(device)] -= size;
    return set_error(cudaErrorMemoryAllocation);
  }
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, std::size_t size) {
  if (ptr == nullptr) return refuse(cudaErrorInvalidValue, "cudaMallocHost: null");
  *ptr = size == 0 ? nullptr : allocate(size, current_device(), MemoryKind::pinned);
  return size != 0 && *ptr == nullptr ? set_error(cudaErrorMemoryAllocation) : cudaSuccess;
}

cudaError_t cudaHostAlloc(void** ptr, std::size_t size, unsigned int) {
  return cudaMallocHost(ptr, size);
}

namespace {
cudaError_t release(const char* call, void* p, MemoryKind kind) {
  if (p == nullptr) return cudaSuccess;
  Allocation a;
  {
    std::lock_guard<std::mutex> lk(*g_memory_lock);
    auto it = g_allocations->find(reinterpret_cast<std::uintptr_t>(p));
    if (it == g_allocations->end() || it->second.kind != kind)
      return refuse(cudaErrorInvalidValue,
                    std::string(call) + ": " + hex(p) + " is not the start of an allocation " +
                        (kind == MemoryKind::device ? "cudaMalloc" : "cudaMallocHost") + " made");
    a = it->second;
  }
  count_host_wait(call);
  synchronize_device(a.device);  // CUDA's frees wait for the device's work
  std::lock_guard<std::mutex> lk(*g_memory_lock);
  g_allocations->erase(a.base);
  if (kind == MemoryKind::device) (*g_used)[static_cast<std::size_t>(a.device)] -= a.size;
  std::free(p);
  return set_error(sticky_error());
}
}  // namespace

cudaError_t cudaFree(void* p) {
  return release("cudaFree", p, MemoryKind::device);
}
cudaError_t cudaFreeHost(void* p) {
  return release("cudaFreeHost", p, MemoryKind::pinned);
}

cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total) {
  std::lock_guard<std::mutex> lk(*g_memory_lock);
  *total = memory_limit();
  *free_bytes = memory_limit() - (*g_used)[static_cast<std::size_t>(current_device())];
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return copy("cudaMemcpyAsync", dst, src, count, kind, stream, false);
}
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t count, cudaMemcpyKind kind) {
  return copy("cudaMemcpy", dst, src, count, kind, nullptr, true);
}
cudaError_t cudaMemsetAsync(void* p, int value, std::size_t count, cudaStream_t stream) {
  return fill("cudaMemsetAsync", p, value, count, count, 1, stream, false);
}
cudaError_t cudaMemset(void* p, int value, std::size_t count) {
  return fill("cudaMemset", p, value, count, count, 1, nullptr, true);
}
cudaError_t cudaMemset2DAsync(void* p, std::size_t pitch, int value, std::size_t width,
                              std::size_t height, cudaStream_t stream) {
  if (width > pitch)
    return refuse(cudaErrorInvalidValue, "cudaMemset2DAsync: width " + std::to_string(width) +
                                             " above pitch " + std::to_string(pitch));
  return fill("cudaMemset2DAsync", p, value, width, pitch, height, stream, false);
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* p) {
  if (attributes == nullptr) return refuse(cudaErrorInvalidValue, "cudaPointerGetAttributes");
  *attributes = cudaPointerAttributes{};
  Allocation a;
  if (!find_allocation(p, 0, &a)) {
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = -2;
    return cudaSuccess;
  }
  attributes->device = a.device;
  if (a.kind == MemoryKind::device) {
    attributes->type = cudaMemoryTypeDevice;
    attributes->devicePointer = const_cast<void*>(p);
  } else {
    attributes->type = cudaMemoryTypeHost;
    attributes->devicePointer = const_cast<void*>(p);
    attributes->hostPointer = const_cast<void*>(p);
  }
  return cudaSuccess;
}

// The stream-ordered pool: memory handed out at the call (usable by work queued after it on any
// stream ordered after `stream`), given back when the free's turn comes on its stream.
cudaError_t cudaMallocAsync(void** ptr, std::size_t size, cudaStream_t stream) {
  if (resolve(stream) == nullptr)
    return refuse(cudaErrorInvalidResourceHandle, "cudaMallocAsync: a destroyed stream");
  if (cudaError_t e = cudaMalloc(ptr, size)) return e;
  std::lock_guard<std::mutex> lk(*g_memory_lock);
  Pool& pool = (*g_pools)[static_cast<std::size_t>(current_device())];
  pool.used += size;
  pool.used_high = std::max(pool.used_high, pool.used);
  pool.reserved_high = std::max(pool.reserved_high, pool.used);
  return cudaSuccess;
}

cudaError_t cudaFreeAsync(void* p, cudaStream_t stream) {
  if (p == nullptr) return cudaSuccess;
  CUstream_st* st = resolve(stream);
  if (st == nullptr)
    return refuse(cudaErrorInvalidResourceHandle, "cudaFreeAsync: a destroyed stream");
  Allocation a;
  {
    std::lock_guard<std::mutex> lk(*g_memory_lock);
    auto it = g_allocations->find(reinterpret_cast<std::uintptr_t>(p));
    if (it == g_allocations->end() || it->second.kind != MemoryKind::device)
      return refuse(cudaErrorInvalidValue,
                    "cudaFreeAsync: " + hex(p) + " is not the start of a device allocation");
    a = it->second;
  }
  enqueue(st, [p, a] {
    std::lock_guard<std::mutex> lk(*g_memory_lock);
    g_allocations->erase(a.base);
    (*g_used)[static_cast<std::size_t>(a.device)] -= a.size;
    Pool& pool = (*g_pools)[static_cast<std::size_t>(a.device)];
    pool.used -= std::min(pool.used, a.size);
    std::free(p);
  });
  return set_error(sticky_error());
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  if (pool == nullptr || device < 0 || device >= device_count())
    return refuse(cudaErrorInvalidDevice,
                  "cudaDeviceGetDefaultMemPool(" + std::to_string(device) + ")");
  // The handle is the device's number plus one (never dereferenced).
  *pool = reinterpret_cast<cudaMemPool_t>(static_cast<std::uintptr_t>(device) + 1);
  return cudaSuccess;
}

namespace {
Pool* pool_of(cudaMemPool_t handle) {
  const auto n = reinterpret_cast<std::uintptr_t>(handle);
  if (n == 0 || n > static_cast<std::uintptr_t>(device_count())) return nullptr;
  return &(*g_pools)[n - 1];
}
}  // namespace

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t handle, cudaMemPoolAttr attr, void* value) {
  std::lock_guard<std::mutex> lk(*g_memory_lock);
  Pool* pool = pool_of(handle);
  if (pool == nullptr || value == nullptr)
    return refuse(cudaErrorInvalidValue, "cudaMemPoolGetAttribute: not a pool");
  auto* out = static_cast<std::uint64_t*>(value);
  switch (attr) {
    case cudaMemPoolAttrReservedMemCurrent:
    case cudaMemPoolAttrUsedMemCurrent:
      *out = pool->used;
      return cudaSuccess;
    case cudaMemPoolAttrReservedMemHigh:
      *out = pool->reserved_high;
      return cudaSuccess;
    case cudaMemPoolAttrUsedMemHigh:
      *out = pool->used_high;
      return cudaSuccess;
    case cudaMemPoolAttrReleaseThreshold:
      *out = pool->release_threshold;
      return cudaSuccess;
    default:
      return refuse(cudaErrorNotSupported, "cudaMemPoolGetAttribute: attribute " +
                                               std::to_string(int(attr)) + " not emulated");
  }
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t handle, cudaMemPoolAttr attr, void* value) {
  std::lock_guard<std::mutex> lk(*g_memory_lock);
  Pool* pool = pool_of(handle);
  if (pool == nullptr || value == nullptr)
    return refuse(cudaErrorInvalidValue, "cudaMemPoolSetAttribute: not a pool");
  const std::uint64_t v = *static_cast<const std::uint64_t*>(value);
  switch (attr) {
    case cudaMemPoolAttrReleaseThreshold:
      pool->release_threshold = v;
      return cudaSuccess;
    case cudaMemPoolAttrReservedMemHigh:
    case cudaMemPoolAttrUsedMemHigh:
      if (v != 0)
        return refuse(cudaErrorInvalidValue, "cudaMemPoolSetAttribute: a high mark resets to 0");
      (attr == cudaMemPoolAttrReservedMemHigh ? pool->reserved_high : pool->used_high) = pool->used;
      return cudaSuccess;
    default:
      return refuse(cudaErrorNotSupported, "cudaMemPoolSetAttribute: attribute " +
                                               std::to_string(int(attr)) + " not emulated");
  }
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t handle, std::size_t) {
  std::lock_guard<std::mutex> lk(*g_memory_lock);
  if (pool_of(handle) == nullptr) return refuse(cudaErrorInvalidValue, "cudaMemPoolTrimTo");
  return cudaSuccess;  // nothing kept back
}

int fsdp_emu_device_accessible(const void* p) {
  Allocation a;
  if (p == nullptr || !find_allocation(p, 0, &a)) return 0;
  if (a.kind == MemoryKind::pinned) return 1;
  const int device = current_device();
  return a.device == device || peer_access_enabled(device, a.device) ? 1 : 0;
}

}  // extern "C"
