#include "core/cuda/copies.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/devices.h"
#include "core/cuda/kernels.h"
#include "core/cuda/streams.h"
#include "core/error.h"
#include "core/stream_sanitizer.h"

namespace fsdp::cuda {

namespace {

void copy_async(void* dst, const void* src, std::size_t nbytes, const Stream& stream,
                cudaMemcpyKind kind) {
  cudaStream_t handle = streams().native(stream);
  DeviceGuard guard(stream_device(stream.device).index);
  FSDP_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, kind, handle));
}

// Each copy is one item of work for the stream sanitizer, reported before it is queued (so that
// device_to_host's wait orders its read), with the device memory it reads and writes.
void host_to_device(void* dst, const void* src, std::size_t nbytes, const Stream& stream) {
  stream_sanitizer::on_work(stream, "copy to the device", {{dst, nbytes, true}});
  copy_async(dst, src, nbytes, stream, cudaMemcpyHostToDevice);
}

void device_to_host(void* dst, const void* src, std::size_t nbytes, const Stream& stream) {
  stream_sanitizer::on_work(stream, "copy to the host", {{src, nbytes, false}});
  copy_async(dst, src, nbytes, stream, cudaMemcpyDeviceToHost);
  stream.synchronize();  // through the backend: a failed kernel before the copy throws here
}

void device_to_pinned_host(void* dst, const void* src, std::size_t nbytes, const Stream& stream) {
  stream_sanitizer::on_work(stream, "copy to pinned host memory", {{src, nbytes, false}});
  copy_async(dst, src, nbytes, stream, cudaMemcpyDeviceToHost);  // DMA: no wait
}

void device_to_device(void* dst, const void* src, std::size_t nbytes, const Stream& stream) {
  stream_sanitizer::on_work(stream, "copy on the device",
                            {{src, nbytes, false}, {dst, nbytes, true}});
  // cudaMemcpyDefault: the pointers say which devices (a peer copy when they differ).
  copy_async(dst, src, nbytes, stream, cudaMemcpyDefault);
}

// The device `ptr` lives on (unified addressing).
int device_of(const void* ptr) {
  cudaPointerAttributes attributes{};
  FSDP_CUDA_CHECK(cudaPointerGetAttributes(&attributes, ptr));
  if (attributes.type != cudaMemoryTypeDevice)
    throw ValueError(fmt::format("cuda reduce: buffer {} is not CUDA device memory", ptr));
  return attributes.device;
}

// A kernel on `device` reads `peer`'s memory only with peer access enabled, once per pair.
void ensure_peer_access(int device, int peer) {
  static std::mutex mutex;
  static std::set<std::pair<int, int>> enabled;
  std::lock_guard lock(mutex);
  if (enabled.count({device, peer})) return;
  int can = 0;
  FSDP_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, device, peer));
  if (!can)
    throw ValueError(
        fmt::format("cuda:{} cannot read cuda:{}'s memory (no peer access): reduce "
                    "on ranks sharing a device, or use the nccl backend",
                    device, peer));
  const cudaError_t status = cudaDeviceEnablePeerAccess(peer, 0);
  if (status == cudaErrorPeerAccessAlreadyEnabled)
    (void)cudaGetLastError();  // not a fault: clear the error the call left
  else
    FSDP_CUDA_CHECK(status);
  enabled.insert({device, peer});
}

RankDType rank_dtype(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return RankDType::Float32;
    case DType::Float64:
      return RankDType::Float64;
    case DType::Float16:
      return RankDType::Float16;
    case DType::BFloat16:
      return RankDType::BFloat16;
    case DType::Int64:
      return RankDType::Int64;
    case DType::Int32:
      return RankDType::Int32;
    case DType::UInt8:
      return RankDType::UInt8;
    case DType::Bool:
      return RankDType::Bool;
  }
  throw ValueError(fmt::format("cuda reduce: unsupported dtype {}", dtype_name(dtype)));
}

static_assert(int(DeviceReduceOp::Avg) == int(RankReduceOp::Avg) &&
              int(DeviceReduceOp::Max) == int(RankReduceOp::Max) &&
              int(DeviceReduceOp::Min) == int(RankReduceOp::Min));

void reduce(void* dst, const void* const* srcs, int n, std::size_t count, DType dtype,
            DeviceReduceOp op, int divisor, const Stream& stream) {
  if (count == 0 || n <= 0) return;
  if (n > kMaxRankInputs)
    throw ValueError(fmt::format("cuda reduce: {} ranks' buffers, at most {}", n, kMaxRankInputs));
  if (stream_sanitizer::enabled()) {
    const std::size_t bytes = count * dtype_size(dtype);
    std::vector<stream_sanitizer::Access> accesses;
    for (int k = 0; k < n; ++k) accesses.push_back({srcs[k], bytes, false});
    accesses.push_back({dst, bytes, true});
    stream_sanitizer::on_work(stream, "reduce over ranks' buffers", accesses);
  }
  cudaStream_t handle = streams().native(stream);
  const int index = stream_device(stream.device).index;
  DeviceGuard guard(index);
  RankInputs inputs;
  for (int k = 0; k < n; ++k) {
    inputs.ptr[k] = srcs[k];
    const int owner = device_of(srcs[k]);
    if (owner != index) ensure_peer_access(index, owner);
  }
  reduce_ranks(static_cast<RankReduceOp>(op), rank_dtype(dtype), dst, inputs, n,
               std::int64_t(count), divisor, handle);
}

}  // namespace

const DeviceCopyFunctions& copy_functions() {
  static const DeviceCopyFunctions functions{host_to_device, device_to_host, device_to_device,
                                             nullptr,        reduce,         device_to_pinned_host};
  return functions;
}

}  // namespace fsdp::cuda
