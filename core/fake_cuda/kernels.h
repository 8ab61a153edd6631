// fake_cuda's kernel table (kernels.cpp): the CPU kernels queued on the device's streams.
#pragma once

#include "core/kernels/kernel_table.h"

namespace fsdp::fake_cuda {

const KernelTable& kernel_table();

}  // namespace fsdp::fake_cuda
