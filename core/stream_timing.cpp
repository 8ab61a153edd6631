#include "core/stream_timing.h"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "core/builtin_devices.h"
#include "core/error.h"

namespace fsdp {

namespace {

std::array<std::atomic<TimingMarkFn>, kNumDeviceTypes>& timing_mark_makers() {
  static std::array<std::atomic<TimingMarkFn>, kNumDeviceTypes> r{};
  return r;
}

// The host's clock read by a work item on the stream; the event after it says when it ran.
class HostClockMark final : public TimingMark {
 public:
  explicit HostClockMark(const Stream& stream)
      : device_(stream.device),
        ns_(std::make_shared<std::atomic<std::int64_t>>(0)),
        ran_(stream.device) {
    launch(stream, [ns = ns_] {
      ns->store(std::chrono::steady_clock::now().time_since_epoch().count(),
                std::memory_order_release);
    });
    ran_.record(stream);
  }
  bool done() override { return ran_.query(); }
  void wait() override { ran_.synchronize(); }
  double seconds_since(TimingMark& earlier) override {
    auto* e = dynamic_cast<HostClockMark*>(&earlier);
    FSDP_CHECK(e != nullptr && stream_device(e->device_) == stream_device(device_), ValueError,
               "timing marks: seconds_since needs an earlier mark of {}", device_.str());
    e->wait();
    wait();
    const auto ticks =
        ns_->load(std::memory_order_acquire) - e->ns_->load(std::memory_order_acquire);
    return std::chrono::duration<double>(std::chrono::steady_clock::duration(ticks)).count();
  }

 private:
  Device device_;
  std::shared_ptr<std::atomic<std::int64_t>> ns_;  // the clock's ticks when the item ran
  Event ran_;
};

}  // namespace

void register_timing_marks(DeviceType type, TimingMarkFn make) {
  timing_mark_makers()[static_cast<int>(type)] = make;
}

std::unique_ptr<TimingMark> timing_mark(const Stream& stream) {
  auto& slot = timing_mark_makers()[static_cast<int>(stream.device.type)];
  TimingMarkFn make = slot.load(std::memory_order_acquire);
  if (!make && stream.device.is_accelerator()) {
    ensure_builtin_devices();  // the device's registration may come with its first use
    make = slot.load(std::memory_order_acquire);
  }
  if (make) return make(stream);
  return std::make_unique<HostClockMark>(stream);
}

}  // namespace fsdp
