#include "core/fake_cuda/copies.h"

#include <cstddef>
#include <cstring>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/fake_cuda/context.h"
#include "core/fake_cuda/fake_cuda.h"
#include "core/stream_sanitizer.h"

namespace fsdp::fake_cuda {

namespace {

// Both ends of a copy, checked when it is queued: the error names the copy and the pointer.
void* checked_view(const void* device_ptr, std::size_t nbytes, const Stream& stream,
                   const char* what) {
  void* host = host_view(device_ptr, what);
  FSDP_CHECK(is_device_pointer(static_cast<const char*>(device_ptr) + nbytes - 1), ValueError,
             "{}: {} of {} bytes at {} runs past the end of device memory", stream.device.str(),
             what, nbytes, device_ptr);
  return host;
}

void host_to_device(void* dst, const void* src, std::size_t nbytes, const Stream& stream) {
  void* to = checked_view(dst, nbytes, stream, "host_to_device");
  // Staged now, as a pageable cudaMemcpyAsync does: the caller may reuse `src` on return.
  auto staged = std::make_shared<std::vector<std::byte>>(
      static_cast<const std::byte*>(src), static_cast<const std::byte*>(src) + nbytes);
  streams().launch(stream, [to, staged] { std::memcpy(to, staged->data(), staged->size()); });
  stream_sanitizer::on_accesses(stream, "copy to the device", {{dst, nbytes, true}});
}

void device_to_host(void* dst, const void* src, std::size_t nbytes, const Stream& stream) {
  const void* from = checked_view(src, nbytes, stream, "device_to_host");
  streams().launch(stream, [dst, from, nbytes] { std::memcpy(dst, from, nbytes); });
  stream_sanitizer::on_accesses(stream, "copy to the host", {{src, nbytes, false}});
  streams().synchronize(stream, streams().record(stream));
}

void device_to_device(void* dst, const void* src, std::size_t nbytes, const Stream& stream) {
  void* to = checked_view(dst, nbytes, stream, "device_to_device");
  const void* from = checked_view(src, nbytes, stream, "device_to_device");
  streams().launch(stream, [to, from, nbytes] { std::memmove(to, from, nbytes); });
  stream_sanitizer::on_accesses(stream, "copy on the device",
                                {{src, nbytes, false}, {dst, nbytes, true}});
}

}  // namespace

const DeviceCopyFunctions& copy_functions() {
  static const DeviceCopyFunctions functions{
      host_to_device, device_to_host, device_to_device,
      [](const void* ptr) { return host_view(ptr, "launched work"); }};
  return functions;
}

}  // namespace fsdp::fake_cuda
