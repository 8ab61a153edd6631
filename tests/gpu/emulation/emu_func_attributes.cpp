// emu_func_attributes.h: the opt-ins per (device, kernel), as CUDA keeps them per context.
#include "tests/gpu/emulation/emu_func_attributes.h"

#include <map>
#include <mutex>
#include <utility>

namespace fsdp::emu {
namespace {

std::mutex mutex;
std::map<std::pair<int, const void*>, std::size_t> max_dynamic_shared;

}  // namespace

cudaError_t set_func_attribute(int device, const void* function, cudaFuncAttribute attr, int value,
                               std::string& why) {
  const std::string call = "cudaFuncSetAttribute(attribute " + std::to_string(attr) + ", value " +
                           std::to_string(value) + "): ";
  if (function == nullptr) {
    why = call + "a null function";
    return cudaErrorInvalidDeviceFunction;
  }
  switch (attr) {
    case cudaFuncAttributeMaxDynamicSharedMemorySize:
      if (value < 0 || static_cast<std::size_t>(value) > kSharedMemPerBlockOptin) {
        why = call + "cudaFuncAttributeMaxDynamicSharedMemorySize outside 0 to " +
              std::to_string(kSharedMemPerBlockOptin) +
              " bytes (the device's sharedMemPerBlockOptin)";
        return cudaErrorInvalidValue;
      }
      {
        std::lock_guard lock(mutex);
        max_dynamic_shared[{device, function}] = static_cast<std::size_t>(value);
      }
      return cudaSuccess;
    case cudaFuncAttributePreferredSharedMemoryCarveout:
      // A hint to the hardware's split of L1 and shared memory: nothing to do here.
      if (value < -1 || value > 100) {
        why = call + "cudaFuncAttributePreferredSharedMemoryCarveout outside -1 to 100";
        return cudaErrorInvalidValue;
      }
      return cudaSuccess;
    default:
      why = call + "the attribute is not emulated (cluster attributes and others)";
      return cudaErrorNotSupported;
  }
}

std::string dynamic_shared_refusal(int device, const void* function, std::size_t bytes) {
  std::size_t limit = kSharedMemPerBlock;
  bool opted = false;
  {
    std::lock_guard lock(mutex);
    const auto it = max_dynamic_shared.find({device, function});
    if (it != max_dynamic_shared.end()) {
      limit = it->second;
      opted = true;
    }
  }
  if (bytes <= limit) return {};
  if (opted)
    return std::to_string(bytes) +
           " bytes of dynamic shared memory, above the kernel's "
           "cudaFuncAttributeMaxDynamicSharedMemorySize of " +
           std::to_string(limit) + " bytes";
  return std::to_string(bytes) +
         " bytes of dynamic shared memory, above 48 KiB without an opt-in "
         "(cudaFuncSetAttribute with cudaFuncAttributeMaxDynamicSharedMemorySize)";
}

}  // namespace fsdp::emu
