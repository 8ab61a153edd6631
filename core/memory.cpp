#include "core/memory.h"

#include <array>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/builtin_devices.h"
#include "core/caching_allocator.h"
#include "core/device_copy.h"
#include "core/env.h"
#include "core/error.h"
#include "core/memory_timeline.h"
#include "core/stream_sanitizer.h"

namespace fsdp {

namespace {

// std::aligned_alloc and free, with allocated-bytes counters (reserved = allocated).
class MallocAllocator final : public Allocator {
 public:
  void* allocate(std::size_t nbytes, Device) override {
    if (nbytes == 0) return nullptr;
    std::size_t rounded = (nbytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (!p)
      throw RuntimeError(fmt::format("cpu allocator: out of memory allocating {} bytes", nbytes));
    allocated_.on_alloc(static_cast<std::int64_t>(rounded));
    requested_.on_alloc(static_cast<std::int64_t>(nbytes));
    return p;
  }
  void deallocate(void* ptr, std::size_t nbytes, Device) override {
    if (!ptr) return;
    std::free(ptr);
    allocated_.on_free(static_cast<std::int64_t>((nbytes + 63) / 64 * 64));
    requested_.on_free(static_cast<std::int64_t>(nbytes));
  }
  AllocatorStats stats() const override {
    AllocatorStats s;
    s.allocated_bytes = s.reserved_bytes = allocated_.current_bytes.load();
    s.allocated_bytes_peak = s.reserved_bytes_peak = allocated_.peak_bytes.load();
    s.requested_bytes = requested_.current_bytes.load();
    s.requested_bytes_peak = requested_.peak_bytes.load();
    s.num_allocs = s.num_system_allocs = s.cache_misses = allocated_.num_allocs.load();
    s.num_frees = s.num_system_frees = allocated_.num_frees.load();
    return s;
  }
  void reset_peak_stats() override {
    allocated_.reset_peak();
    requested_.reset_peak();
  }
  std::string_view name() const override { return "malloc"; }

 private:
  MemoryStats allocated_, requested_;
};

// AddressSanitizer finds use-after-free and overflows only in memory it hands out and takes back
// itself: an ASan build defaults to the plain allocator.
#if defined(__SANITIZE_ADDRESS__)
constexpr CpuAllocatorKind kDefaultCpuAllocator = CpuAllocatorKind::Malloc;
#else
constexpr CpuAllocatorKind kDefaultCpuAllocator = CpuAllocatorKind::Caching;
#endif

struct Registry {
  std::array<std::atomic<Allocator*>, kNumDeviceTypes> allocators{};
  std::array<std::atomic<Allocator*>, kNumDeviceTypes> pinned{};
  std::atomic<CpuAllocatorKind> cpu_kind{kDefaultCpuAllocator};
  // A bad FSDP_CPU_ALLOCATOR: every CPU allocation throws it until set_cpu_allocator() is called
  // (an exception out of a static initialiser would leave its guard locked).
  std::string env_error;
  std::atomic<bool> has_env_error{false};
  Registry() {
    try {
      if (auto v = env::choice("FSDP_CPU_ALLOCATOR")) cpu_kind = parse_cpu_allocator_kind(*v);
    } catch (const EnvError& e) {
      env_error = e.what();
      has_env_error = true;
    }
    allocators[0] = &cpu_allocator(cpu_kind.load());
  }
};

Registry& allocator_registry() {
  static Registry r;
  return r;
}

}  // namespace

Allocator& cpu_allocator(CpuAllocatorKind kind) {
  static MallocAllocator malloc_allocator;
  return kind == CpuAllocatorKind::Malloc ? static_cast<Allocator&>(malloc_allocator)
                                          : cpu_caching_allocator();
}

CpuAllocatorKind parse_cpu_allocator_kind(std::string_view value) {
  if (value == "caching") return CpuAllocatorKind::Caching;
  if (value == "malloc") return CpuAllocatorKind::Malloc;
  throw ValueError(
      fmt::format("FSDP_CPU_ALLOCATOR: unknown allocator '{}' (expected caching or "
                  "malloc)",
                  value));
}

std::string_view cpu_allocator_kind_name(CpuAllocatorKind kind) {
  return kind == CpuAllocatorKind::Malloc ? "malloc" : "caching";
}

void set_cpu_allocator(CpuAllocatorKind kind) {
  Registry& r = allocator_registry();
  r.cpu_kind = kind;
  r.allocators[0] = &cpu_allocator(kind);
  r.has_env_error = false;
}

CpuAllocatorKind cpu_allocator_kind() {
  return allocator_registry().cpu_kind.load();
}

void register_allocator(DeviceType type, Allocator* allocator) {
  allocator_registry().allocators[static_cast<int>(type)] = allocator;
}

void register_pinned_host_allocator(DeviceType type, Allocator* allocator) {
  allocator_registry().pinned[static_cast<int>(type)] = allocator;
}

Allocator* pinned_host_allocator(DeviceType type) {
  auto& slot = allocator_registry().pinned[static_cast<int>(type)];
  if (!slot.load()) ensure_builtin_devices();
  return slot.load();
}

Allocator* allocator_for(Device device) {
  if (device.is_meta())
    throw RuntimeError("meta tensors have no storage: cannot allocate data on the meta device");
  Registry& r = allocator_registry();
  if (device.is_cpu() && r.has_env_error.load(std::memory_order_relaxed))
    throw EnvError(r.env_error);
  auto& slot = r.allocators[static_cast<int>(device.type)];
  Allocator* a = slot.load();
  if (!a) {
    ensure_builtin_devices();
    a = slot.load();
  }
  if (!a)
    throw RuntimeError(
        fmt::format("no allocator for device {}: {}", device.str(), missing_device_reason(device)));
  return a;
}

AllocatorStats allocator_stats(Device device) {
  return allocator_for(device)->stats_for(device);
}

void reset_allocator_peak_stats(Device device) {
  allocator_for(device)->reset_peak_stats_for(device);
}

void empty_cache(Device device) {
  allocator_for(device)->empty_cache_for(device);
}

Storage::Storage(std::size_t nbytes, Device device) : device_(device) {
  if (device.is_meta()) {
    nbytes_ = nbytes;  // shape bookkeeping only
    return;
  }
  scopes_ = MemoryScopes::current();
  resize(nbytes);
}

Storage::Storage(Borrowed, void* data, std::size_t nbytes, Device device)
    : data_(data), nbytes_(nbytes), device_(device), borrowed_(true) {}

std::shared_ptr<Storage> Storage::borrowed(void* data, std::size_t nbytes, Device device) {
  return std::shared_ptr<Storage>(new Storage(Borrowed{}, data, nbytes, device));
}

std::shared_ptr<Storage> Storage::pinned(std::size_t nbytes, Device accelerator) {
  auto s = std::make_shared<Storage>(0, kCPU);
  s->fixed_allocator_ = pinned_host_allocator(accelerator.type);
  s->resize(nbytes);
  return s;
}

Storage::~Storage() {
  release();
}

void Storage::record_stream(const Stream& stream) {
  FSDP_CHECK(stream_device(stream.device) == stream_device(device_), ValueError,
             "record_stream: a storage of {} cannot be recorded on stream {} of {}", device_.str(),
             stream.id, stream.device.str());
  if (!data_ || borrowed_) return;
  stream_sanitizer::on_record_stream(data_, stream);
  allocator_->record_stream(data_, device_, stream);
}

void Storage::release() {
  if (borrowed_) return;
  if (device_.is_meta() || !data_) {
    if (!device_.is_meta()) nbytes_ = 0;
    return;
  }
  auto n = static_cast<std::int64_t>(nbytes_);
  if (device_.is_accelerator()) stream_sanitizer::on_free(data_, nbytes_, stream());
  allocator_->deallocate(data_, nbytes_, device_);
  global_memory_stats(device_.type).on_free(n);
  scopes_.on_free(n);
  if (timeline_) timeline_->record(-n, category_);
  timeline_.reset();
  data_ = nullptr;
  nbytes_ = 0;
}

void Storage::copy_prefix(void* fresh, std::size_t nbytes) {
  const std::size_t n = std::min(nbytes, nbytes_);
  if (device_.is_cpu()) {
    std::memcpy(fresh, data_, n);
    return;
  }
  // Queued on the current stream, which may not be the old block's: its free must wait for it.
  const Stream current = current_stream(device_);
  if (current.id != stream_id_) allocator_->record_stream(data_, device_, current);
  copy_bytes(fresh, device_, data_, device_, n);
}

void Storage::resize(std::size_t nbytes) {
  FSDP_CHECK(!borrowed_, RuntimeError,
             "resize: a borrowed storage ({} bytes of {}) cannot be resized", nbytes_,
             device_.str());
  if (device_.is_meta()) {
    nbytes_ = nbytes;
    return;
  }
  if (nbytes == nbytes_ && (data_ || nbytes == 0)) return;
  void* fresh = nullptr;
  Allocator* allocator = nullptr;
  MemoryScopes context;
  if (nbytes > 0) {
    allocator = fixed_allocator_ ? fixed_allocator_ : allocator_for(device_);
    fresh = allocator->allocate(nbytes, device_);
    if (data_) {
      try {
        copy_prefix(fresh, nbytes);
      } catch (...) {  // (a device's copy refused): the storage stays as it was
        allocator->deallocate(fresh, nbytes, device_);
        throw;
      }
    }
    auto n = static_cast<std::int64_t>(nbytes);
    global_memory_stats(device_.type).on_alloc(n);
    scopes_.on_alloc(n);
    context = MemoryScopes::current();
    if (context.timeline()) context.timeline()->record(n, context.category());
  }
  release();
  if (fresh && device_.is_accelerator()) stream_id_ = current_stream(device_).id;
  data_ = fresh;
  nbytes_ = nbytes;
  allocator_ = allocator;
  category_ = context.category();
  timeline_ = context.timeline();
}

}  // namespace fsdp
