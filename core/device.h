// Where a tensor or buffer lives: cpu, cuda:N, fake_cuda:N (the stream-ordered test device,
// core/fake_cuda/), or meta (shape and dtype only, no storage).
#pragma once

#include <charconv>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

#include "core/error.h"

namespace fsdp {

enum class DeviceType : std::uint8_t { CPU, CUDA, Meta, FakeCUDA };
// Tables indexed by DeviceType (allocators, statistics, stream backends) have this many rows.
inline constexpr int kNumDeviceTypes = 4;

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = -1;  // -1: the current device of that type (accelerators), always -1 for cpu/meta

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = -1) : type(t), index(i) {}

  constexpr bool is_cpu() const { return type == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type == DeviceType::CUDA; }
  constexpr bool is_meta() const { return type == DeviceType::Meta; }
  constexpr bool is_fake_cuda() const { return type == DeviceType::FakeCUDA; }
  // Work on it is queued on streams and runs asynchronously to the host (core/stream.h).
  constexpr bool is_accelerator() const {
    switch (type) {
      case DeviceType::CUDA:
      case DeviceType::FakeCUDA:
        return true;
      case DeviceType::CPU:
      case DeviceType::Meta:
        return false;
    }
    return false;
  }
  friend constexpr bool operator==(const Device&, const Device&) = default;

  std::string str() const {
    switch (type) {
      case DeviceType::CPU:
        return "cpu";
      case DeviceType::Meta:
        return "meta";
      case DeviceType::CUDA:
        return index < 0 ? "cuda" : "cuda:" + std::to_string(index);
      case DeviceType::FakeCUDA:
        return index < 0 ? "fake_cuda" : "fake_cuda:" + std::to_string(index);
    }
    return "?";
  }

  // "cpu", "meta", "cuda", "cuda:3", "fake_cuda", "fake_cuda:1".
  static Device parse(std::string_view s) {
    if (s == "cpu") return Device(DeviceType::CPU);
    if (s == "meta") return Device(DeviceType::Meta);
    for (auto [name, type] : {std::pair{std::string_view("cuda"), DeviceType::CUDA},
                              std::pair{std::string_view("fake_cuda"), DeviceType::FakeCUDA}}) {
      if (s == name) return Device(type);
      if (s.size() > name.size() + 1 && s.substr(0, name.size()) == name && s[name.size()] == ':') {
        int idx = -1;
        auto digits = s.substr(name.size() + 1);
        auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), idx);
        if (ec == std::errc() && p == digits.data() + digits.size() && idx >= 0)
          return Device(type, idx);
      }
    }
    throw ValueError("unknown device '" + std::string(s) +
                     "' (expected cpu, meta, cuda, cuda:N, fake_cuda or fake_cuda:N)");
  }
};

inline std::ostream& operator<<(std::ostream& os, const Device& d) {
  return os << d.str();
}

inline constexpr Device kCPU{DeviceType::CPU};
inline constexpr Device kMeta{DeviceType::Meta};

}  // namespace fsdp
