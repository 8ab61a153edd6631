// Bytes between devices, the path of every cross-device copy (Tensor::to, copy_, item, printing,
// safetensors I/O): a device type registers three functions and copy_bytes picks one. Copies are
// queued on the current stream of the accelerator involved (of the destination's between two
// devices, ordered after and before the source's), in order with the kernels queued there, as
// cudaMemcpyAsync is: host to device
// takes the host bytes when called (the source may be reused at once, as a pageable
// cudaMemcpyAsync stages it), except from pinned memory (Storage::pinned), which the copy reads
// when it runs, as cudaMemcpyAsync reads page-locked memory; device to host waits for the copy (the
// stream's earlier work first), since host memory is read as soon as this returns.
// launched_address: where host code run on a device's stream (core/stream.h's launch) reaches its
// memory.
#pragma once

#include <cstddef>

#include "core/device.h"
#include "core/dtype.h"
#include "core/stream.h"

namespace fsdp {

// comm/reduce_op.h's operators, for a device's reduce function (core cannot name comm's enum).
enum class DeviceReduceOp : std::uint8_t { Sum, Avg, Max, Min };

struct DeviceCopyFunctions {
  void (*host_to_device)(void* dst, const void* src, std::size_t nbytes, const Stream& stream);
  void (*device_to_host)(void* dst, const void* src, std::size_t nbytes, const Stream& stream);
  // Between two buffers of this device type (either device index), queued on `stream`.
  void (*device_to_device)(void* dst, const void* src, std::size_t nbytes, const Stream& stream);
  // The host address at which work launched on this device's streams reaches a device pointer
  // (fake_cuda: its host view); null where launched host code cannot reach device memory (CUDA).
  void* (*launched_address)(const void* device_ptr) = nullptr;
  // dst[i] = op over srcs[0..n)[i] (`count` elements of `dtype` in n buffers of this device type;
  // AVG divides by `divisor`), with comm/reduce_op.h's meaning, queued on `stream`: how the
  // threads backend reduces memory that launched host code cannot reach (CUDA's kernel); null
  // where launched_address serves instead.
  void (*reduce)(void* dst, const void* const* srcs, int n, std::size_t count, DType dtype,
                 DeviceReduceOp op, int divisor, const Stream& stream) = nullptr;
  // Device to page-locked host memory (Storage::pinned) queued on `stream` without waiting:
  // DMA, done when the stream reaches it. Null where the type has no pinned memory.
  void (*device_to_pinned_host)(void* dst, const void* src, std::size_t nbytes,
                                const Stream& stream) = nullptr;
};
void register_device_copy(DeviceType type, const DeviceCopyFunctions* functions);
// Throws naming the device when its type registered none (meta, or a device not built).
const DeviceCopyFunctions& device_copy(Device device);

// `nbytes` from `src` on `src_device` to `dst` on `dst_device` (cpu <-> an accelerator, within an
// accelerator type, or cpu to cpu). Between two accelerator types it is a ValueError naming both.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device,
                std::size_t nbytes);

// The address at which host code running inside work launched on a stream of `device` (see
// launch() in core/stream.h) reads and writes `ptr`: `ptr` itself on the cpu. A device whose
// memory launched host code cannot reach is a ValueError naming it and `what`. Only valid inside
// launched work: the host itself never dereferences device memory.
void* launched_address(Device device, const void* ptr, const char* what);

}  // namespace fsdp
