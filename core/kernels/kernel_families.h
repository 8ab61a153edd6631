// The kernel table's families as one list (core/kernels/kernel_table.h), for the tables built
// entry by entry from another; the check below fails the build when a family is missing from it.
#pragma once

#include <cstdint>

#include "core/kernels/kernel_table.h"

// Every kernel family of the table (its function members), for code that builds a table entry by
// entry from another (fake_cuda's queued kernels, CUDA's reported ones): X(name) for each.
// clang-format off
#define FSDP_KERNEL_FAMILIES(X) \
  X(binary) X(unary) X(compare) X(eq_scalar) X(logical_not) X(where) X(masked_fill) X(sum) \
  X(amax) X(max_dim) X(max_dim_backward) X(copy) X(copy_broadcast) X(fill) X(store_values) \
  X(index_select) X(index_add) X(random) X(bmm) X(linear) X(linear_backward16) X(split_heads) \
  X(merge_heads) X(blocked_attention) X(blocked_attention_backward) X(activation) \
  X(activation_backward) X(masked_scale) X(softmax) X(softmax_backward) X(masked_softmax) \
  X(rms_norm) X(rms_norm_backward) X(rotary) X(layer_norm) X(layer_norm_backward) \
  X(cross_entropy) X(cross_entropy_backward) X(nll_loss) X(nll_loss_backward) X(sum_in_order) \
  X(batch_norm_stats) X(running_update) X(batch_norm) X(batch_norm_backward) X(mse_loss) \
  X(mse_loss_backward) X(norm_partial) X(clamp_) X(embedding_renorm_) X(adam_update) \
  X(sgd_update)
// clang-format on

namespace fsdp::kernel_families_detail {
#define FSDP_KERNEL_FAMILY_COUNT(name) +1
inline constexpr int kCount = 0 FSDP_KERNEL_FAMILIES(FSDP_KERNEL_FAMILY_COUNT);
#undef FSDP_KERNEL_FAMILY_COUNT
// The table is its families' pointers and linear_backward16_max_weight.
static_assert(sizeof(KernelTable) == kCount * sizeof(void (*)()) + sizeof(std::int64_t),
              "FSDP_KERNEL_FAMILIES must name every function member of KernelTable");
}  // namespace fsdp::kernel_families_detail
