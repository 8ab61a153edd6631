// Where a tensor or buffer lives: cpu, cuda:N, or meta (shape and dtype only, no storage).
#pragma once

#include <charconv>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

#include "core/error.h"

namespace fsdp {

enum class DeviceType : std::uint8_t { CPU, CUDA, Meta };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = -1;  // -1: the current device of that type (cuda), always -1 for cpu/meta

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = -1) : type(t), index(i) {}

  constexpr bool is_cpu() const { return type == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type == DeviceType::CUDA; }
  constexpr bool is_meta() const { return type == DeviceType::Meta; }
  friend constexpr bool operator==(const Device&, const Device&) = default;

  std::string str() const {
    switch (type) {
      case DeviceType::CPU:
        return "cpu";
      case DeviceType::Meta:
        return "meta";
      case DeviceType::CUDA:
        return index < 0 ? "cuda" : "cuda:" + std::to_string(index);
    }
    return "?";
  }

  // "cpu", "meta", "cuda", "cuda:3".
  static Device parse(std::string_view s) {
    if (s == "cpu") return Device(DeviceType::CPU);
    if (s == "meta") return Device(DeviceType::Meta);
    if (s == "cuda") return Device(DeviceType::CUDA);
    if (s.substr(0, 5) == "cuda:") {
      int idx = -1;
      auto digits = s.substr(5);
      auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), idx);
      if (ec == std::errc() && p == digits.data() + digits.size() && idx >= 0)
        return Device(DeviceType::CUDA, idx);
    }
    throw ValueError("unknown device '" + std::string(s) +
                     "' (expected cpu, meta, cuda or cuda:N)");
  }
};

inline std::ostream& operator<<(std::ostream& os, const Device& d) {
  return os << d.str();
}

inline constexpr Device kCPU{DeviceType::CPU};
inline constexpr Device kMeta{DeviceType::Meta};

}  // namespace fsdp
