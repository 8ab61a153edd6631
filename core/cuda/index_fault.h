// The host side of the device-side index checks: each device's IndexFault record (kernels.h) in
// pinned host memory, which the kernels write through unified addressing, and its report. The
// runtime raises a recorded bad index at the next host synchronisation of the device (a stream
// or device synchronisation, a copy to the host: CudaStreams), with the CPU's IndexError
// message, as torch reports a device-side assert: asynchronously, at a later call.
#pragma once

#include "core/cuda/kernels.h"

namespace fsdp::cuda {

// The record kernels on `device` write (allocated and cleared at its first use).
IndexFault* index_fault_record(int device);

// Throws IndexError with the CPU's message when a kernel on `device` recorded a bad index, and
// clears the record for the next one. Call after a synchronisation: it reads host memory only.
void raise_index_fault(int device);

}  // namespace fsdp::cuda
