#include "core/device_copy.h"

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <cstring>

#include "core/builtin_devices.h"
#include "core/error.h"

namespace fsdp {

namespace {
std::array<std::atomic<const DeviceCopyFunctions*>, kNumDeviceTypes>& registry() {
  static std::array<std::atomic<const DeviceCopyFunctions*>, kNumDeviceTypes> r{};
  return r;
}
}  // namespace

void register_device_copy(DeviceType type, const DeviceCopyFunctions* functions) {
  registry()[static_cast<int>(type)] = functions;
}

const DeviceCopyFunctions& device_copy(Device device) {
  auto& slot = registry()[static_cast<int>(device.type)];
  const DeviceCopyFunctions* f = slot.load(std::memory_order_acquire);
  if (!f && device.is_accelerator()) {
    ensure_builtin_devices();
    f = slot.load(std::memory_order_acquire);
  }
  if (!f)
    throw RuntimeError(
        fmt::format("{}: no copy functions: {}", device.str(), missing_device_reason(device)));
  return *f;
}

void* launched_address(Device device, const void* ptr, const char* what) {
  if (!device.is_accelerator()) return const_cast<void*>(ptr);
  const DeviceCopyFunctions& f = device_copy(device);
  FSDP_CHECK(f.launched_address != nullptr, ValueError,
             "{}: {} runs host code on the device's streams, which cannot reach {} memory",
             device.str(), what, device.str());
  return ptr == nullptr ? nullptr : f.launched_address(ptr);
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device,
                std::size_t nbytes) {
  if (nbytes == 0) return;
  const bool dst_acc = dst_device.is_accelerator(), src_acc = src_device.is_accelerator();
  FSDP_CHECK(!dst_device.is_meta() && !src_device.is_meta(), ValueError,
             "copy_bytes: cannot copy {} bytes from {} to {}: meta tensors have no data", nbytes,
             src_device.str(), dst_device.str());
  if (!dst_acc && !src_acc) {
    std::memcpy(dst, src, nbytes);
  } else if (dst_acc && !src_acc) {
    device_copy(dst_device).host_to_device(dst, src, nbytes, current_stream(dst_device));
  } else if (!dst_acc) {
    device_copy(src_device).device_to_host(dst, src, nbytes, current_stream(src_device));
  } else {
    FSDP_CHECK(dst_device.type == src_device.type, ValueError,
               "copy_bytes: cannot copy {} bytes from {} to {} directly (copy through the cpu)",
               nbytes, src_device.str(), dst_device.str());
    const Stream dst_stream = current_stream(dst_device), src_stream = current_stream(src_device);
    // Across devices the copy is ordered with both current streams, as torch's copy_ orders a
    // peer copy: after the source's work so far, before the source's later work.
    const bool peer = !(src_stream == dst_stream);
    if (peer) dst_stream.wait_stream(src_stream);
    device_copy(dst_device).device_to_device(dst, src, nbytes, dst_stream);
    if (peer) src_stream.wait_stream(dst_stream);
  }
}

}  // namespace fsdp
