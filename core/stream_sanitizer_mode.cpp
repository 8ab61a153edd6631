#include "core/stream_sanitizer_mode.h"

#include <algorithm>

namespace fsdp::stream_sanitizer {

nn::Value StreamSanitizerMode::handle(const dispatch::OpCall& call) {
  struct Restore {
    const char* previous = current_op();
    ~Restore() { set_current_op(previous); }
  } restore;
  set_current_op(call.name());
  return call.run();
}

Access access_of(const Tensor& t, bool write) {
  Access a;
  if (!t.defined() || !t.impl()->storage || t.numel() == 0) return a;
  const auto item = static_cast<std::int64_t>(dtype_size(t.dtype()));
  std::int64_t first = t.storage_offset(), last = first;
  for (std::size_t d = 0; d < t.shape().size(); ++d) {
    const std::int64_t span = (t.shape()[d] - 1) * t.strides()[d];
    (span < 0 ? first : last) += span;
  }
  a.ptr = static_cast<const char*>(t.impl()->storage->data()) + first * item;
  a.bytes = static_cast<std::size_t>((last - first + 1) * item);
  a.write = write;
  return a;
}

}  // namespace fsdp::stream_sanitizer
