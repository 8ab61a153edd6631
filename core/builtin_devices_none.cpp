// A build without the fake_cuda device (-Dfake_cuda=disabled): nothing beyond the CPU.
#include "core/builtin_devices.h"

namespace fsdp {

void register_builtin_devices() {}

}  // namespace fsdp
