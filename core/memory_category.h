// What an allocation is for: the memory timeline (core/memory_timeline.h) stacks bytes by these
// categories. A thread's current category is set with MemoryCategoryScope (core/memory_stats.h)
// and, like the memory scopes, travels with work queued to comm's worker threads.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace fsdp {

enum class MemoryCategory : std::uint8_t {
  Other,
  Parameters,
  Gradients,
  OptimizerState,
  Activations,
  CommBuffers,
};

inline constexpr std::size_t kNumMemoryCategories = 6;

inline constexpr std::array<MemoryCategory, kNumMemoryCategories> kMemoryCategories = {
    MemoryCategory::Other,          MemoryCategory::Parameters,  MemoryCategory::Gradients,
    MemoryCategory::OptimizerState, MemoryCategory::Activations, MemoryCategory::CommBuffers,
};

// The category's name in charts and reports ("parameters", "optimizer state", ...).
constexpr std::string_view memory_category_name(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::Other:
      return "other";
    case MemoryCategory::Parameters:
      return "parameters";
    case MemoryCategory::Gradients:
      return "gradients";
    case MemoryCategory::OptimizerState:
      return "optimizer state";
    case MemoryCategory::Activations:
      return "activations";
    case MemoryCategory::CommBuffers:
      return "communication buffers";
  }
  return "other";
}

}  // namespace fsdp
