#include "core/native_stream.h"

#include <array>
#include <atomic>

#include "core/builtin_devices.h"
#include "core/error.h"

namespace fsdp {

namespace {
using Lookup = void* (*)(const Stream&);
std::array<std::atomic<Lookup>, kNumDeviceTypes>& native_stream_lookups() {
  static std::array<std::atomic<Lookup>, kNumDeviceTypes> r{};
  return r;
}
}  // namespace

void register_native_stream(DeviceType type, void* (*lookup)(const Stream&)) {
  native_stream_lookups()[static_cast<int>(type)] = lookup;
}

void* native_stream(const Stream& stream) {
  auto& slot = native_stream_lookups()[static_cast<int>(stream.device.type)];
  Lookup lookup = slot.load(std::memory_order_acquire);
  if (!lookup && stream.device.is_accelerator()) {
    ensure_builtin_devices();
    lookup = slot.load(std::memory_order_acquire);
  }
  FSDP_CHECK(lookup != nullptr, ValueError,
             "native_stream: stream {} of {} has no handle in a device API", stream.id,
             stream.device.str());
  return lookup(stream);
}

}  // namespace fsdp
