// What a queued kernel does to device memory, for the stream sanitizer (core/stream_sanitizer.h):
// which of a table family's arguments it writes and the accesses of its accelerator tensors.
// The fake_cuda table reports them for the kernels it queues, the CUDA table for the kernels it
// launches.
#pragma once

#include <vector>

#include "core/kernels/kernel_names.h"
#include "core/kernels/kernel_table.h"
#include "core/stream_sanitizer.h"
#include "core/stream_sanitizer_mode.h"
#include "core/tensor.h"

namespace fsdp {

// Which arguments a kernel writes (bit i: argument i); the default is the first tensor argument
// (outputs come first, kernel_table.h).
template <auto Member>
constexpr unsigned written_arguments() {
  using K = KernelTable;
  if constexpr (same_member<Member, &K::max_dim>() ||
                same_member<Member, &K::blocked_attention>() ||
                same_member<Member, &K::cross_entropy>() ||
                same_member<Member, &K::sum_in_order>() ||
                same_member<Member, &K::batch_norm_stats>() ||
                same_member<Member, &K::rms_norm>() || same_member<Member, &K::rms_norm_backward>())
    return 0b11;
  else if constexpr (same_member<Member, &K::linear_backward16>() ||
                     same_member<Member, &K::blocked_attention_backward>() ||
                     same_member<Member, &K::layer_norm>() ||
                     same_member<Member, &K::layer_norm_backward>() ||
                     same_member<Member, &K::batch_norm_backward>())
    return 0b111;
  else if constexpr (same_member<Member, &K::adam_update>())
    return 0b11101;
  else if constexpr (same_member<Member, &K::sgd_update>())
    return 0b101;
  else if constexpr (same_member<Member, &K::binary>() || same_member<Member, &K::unary>() ||
                     same_member<Member, &K::compare>() || same_member<Member, &K::activation>() ||
                     same_member<Member, &K::activation_backward>() ||
                     same_member<Member, &K::random>())
    return 0b10;  // after the kind
  else
    return 0b1;
}

namespace kernel_accesses_detail {
inline void add(std::vector<stream_sanitizer::Access>& out, const Tensor& t, bool write) {
  if (t.defined() && t.device().is_accelerator())
    out.push_back(stream_sanitizer::access_of(t, write));
}
inline void add(std::vector<stream_sanitizer::Access>& out, const std::vector<Tensor>& ts,
                bool write) {
  for (const auto& t : ts) add(out, t, write);
}
template <typename A>
void add(std::vector<stream_sanitizer::Access>&, const A&, bool) {}
}  // namespace kernel_accesses_detail

// The accesses of table family Member called with `args`: each accelerator tensor argument read
// or written as written_arguments says.
template <auto Member, typename... A>
std::vector<stream_sanitizer::Access> kernel_accesses(const A&... args) {
  std::vector<stream_sanitizer::Access> accesses;
  unsigned i = 0;
  (kernel_accesses_detail::add(accesses, args, (written_arguments<Member>() >> i++) & 1u), ...);
  return accesses;
}

}  // namespace fsdp
