// CUDA's kernel table (core/kernels/kernel_table.h), installed by kernels(device) at its first
// lookup: each family core/cuda has a kernel for launches it on current_stream(device)'s
// cudaStream_t; every other family, and every case of a family that its kernel does not cover
// (a dtype, a strided operand), throws NotImplementedError "<family>: no CUDA kernel yet
// (device cuda:N)" -- never a silent host fallback. README.md lists what is covered.
#pragma once

#include "core/kernels/kernel_table.h"

namespace fsdp::cuda {

// The table kernels(cuda) installs: launching_kernel_table()'s families, each reporting its
// accesses to the stream sanitizer first (reported_kernels.cpp).
const KernelTable& kernel_table();
// The families' launchers themselves (kernel_table.cpp).
const KernelTable& launching_kernel_table();

}  // namespace fsdp::cuda
