#include "core/stream.h"

#include <fmt/format.h>

#include <array>
#include <atomic>

#include "core/builtin_devices.h"
#include "core/error.h"

namespace fsdp {

namespace {

// Device indices a thread keeps a current stream for (torch's C10_COMPILE_TIME_MAX_GPUS is 16).
constexpr int kMaxDeviceIndex = 16;

// The CPU has one stream; work runs when launched, so every event is complete when recorded.
class CpuStreamBackend final : public StreamBackend {
 public:
  Stream new_stream(Device device, int) override { return Stream{device, 0}; }
  void launch(const Stream&, std::function<void()> work) override { work(); }
  std::uint64_t record(const Stream&) override { return 1; }
  bool query(const Stream&, std::uint64_t) override { return true; }
  void synchronize(const Stream&, std::uint64_t) override {}
  void wait(const Stream&, const Stream&, std::uint64_t) override {}
  void synchronize_device(Device) override {}
};

struct Registry {
  std::array<std::atomic<StreamBackend*>, kNumDeviceTypes> backends{};
  Registry() {
    static CpuStreamBackend cpu;
    backends[static_cast<int>(DeviceType::CPU)] = &cpu;
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

// Zero-initialised: every device starts on its default stream.
thread_local std::array<std::array<std::uint64_t, kMaxDeviceIndex>, kNumDeviceTypes> t_current{};

}  // namespace

void register_stream_backend(DeviceType type, StreamBackend* backend) {
  registry().backends[static_cast<int>(type)] = backend;
}

StreamBackend& stream_backend(Device device) {
  auto& slot = registry().backends[static_cast<int>(device.type)];
  StreamBackend* b = slot.load(std::memory_order_acquire);
  if (!b) {
    ensure_builtin_devices();
    b = slot.load(std::memory_order_acquire);
  }
  if (!b) throw RuntimeError(fmt::format("{}: {}", device.str(), missing_device_reason(device)));
  return *b;
}

Device stream_device(Device device) {
  if (!device.is_accelerator()) return device;
  const int index = device.index < 0 ? 0 : device.index;
  FSDP_CHECK(index < kMaxDeviceIndex, ValueError,
             "{}: device index out of range (this build supports indices 0 to {})", device.str(),
             kMaxDeviceIndex - 1);
  return Device(device.type, index);
}

Stream default_stream(Device device) {
  return Stream{stream_device(device), 0};
}

Stream current_stream(Device device) {
  const Device d = stream_device(device);
  const int index = d.index < 0 ? 0 : d.index;
  return Stream{d, t_current[static_cast<int>(d.type)][index]};
}

void set_current_stream(const Stream& stream) {
  const Device d = stream_device(stream.device);
  t_current[static_cast<int>(d.type)][d.index < 0 ? 0 : d.index] = stream.id;
}

Stream new_stream(Device device, int priority) {
  const Device d = stream_device(device);
  return stream_backend(d).new_stream(d, priority);
}

void device_synchronize(Device device) {
  const Device d = stream_device(device);
  stream_backend(d).synchronize_device(d);
}

void launch(const Stream& stream, std::function<void()> work) {
  stream_backend(stream.device).launch(stream, std::move(work));
}

void Stream::synchronize() const {
  StreamBackend& b = stream_backend(device);
  b.synchronize(*this, b.record(*this));
}

bool Stream::query() const {
  StreamBackend& b = stream_backend(device);
  return b.query(*this, b.record(*this));
}

void Stream::wait_stream(const Stream& other) const {
  Event e;
  e.record(other);
  wait_event(e);
}

void Stream::wait_event(const Event& event) const {
  event.block(*this);
}

void Event::record() {
  record(current_stream(stream_.device));
}

void Event::record(const Stream& stream) {
  stream_ = Stream{stream_device(stream.device), stream.id};
  sequence_ = stream_backend(stream_.device).record(stream_);
  recorded_ = true;
}

void Event::block(const Stream& stream) const {
  if (!recorded() || stream == stream_) return;  // a stream is ordered with itself
  FSDP_CHECK(stream.device.type == stream_.device.type, ValueError,
             "Event::block: an event of {} cannot order stream {} of {}", stream_.device.str(),
             stream.id, stream.device.str());
  stream_backend(stream.device).wait(stream, stream_, sequence_);
}

bool Event::query() const {
  return !recorded() || stream_backend(stream_.device).query(stream_, sequence_);
}

void Event::synchronize() const {
  if (recorded()) stream_backend(stream_.device).synchronize(stream_, sequence_);
}

StreamGuard::StreamGuard(const Stream& stream) : previous_(current_stream(stream.device)) {
  set_current_stream(stream);
}

StreamGuard::~StreamGuard() {
  set_current_stream(previous_);
}

}  // namespace fsdp
