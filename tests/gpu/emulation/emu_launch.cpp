// The launch's refusal of a pointer argument the device cannot access (emu_launch.h).
#include "tests/gpu/emulation/emu_launch.h"

#include <fmt/format.h>

#include <string>

namespace fsdp::emu {

void refuse_argument(const char* kernel, int position, std::string_view type, const void* p) {
  const std::string message =
      fmt::format("{}: argument {} ({}) is not device memory ({})", kernel, position, type, p);
  fsdp_emu_launch_error(cudaErrorInvalidValue, message.c_str());
}

}  // namespace fsdp::emu
