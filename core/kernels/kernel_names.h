// The name of a KernelTable member (its family), for messages and reports: fake_cuda's stream
// sanitizer names a kernel by it, and a device without a kernel for a family names the family.
#pragma once

#include <type_traits>

#include "core/kernels/kernel_table.h"

namespace fsdp {

// Whether two table members are the same one (members of different types never are).
template <auto A, auto B>
constexpr bool same_member() {
  if constexpr (std::is_same_v<decltype(A), decltype(B)>)
    return A == B;
  else
    return false;
}

// The kernel's name in reports.
template <auto Member>
constexpr const char* kernel_name() {
  using K = KernelTable;
  if constexpr (same_member<Member, &K::binary>())
    return "binary";
  else if constexpr (same_member<Member, &K::unary>())
    return "unary";
  else if constexpr (same_member<Member, &K::compare>())
    return "compare";
  else if constexpr (same_member<Member, &K::eq_scalar>())
    return "eq_scalar";
  else if constexpr (same_member<Member, &K::logical_not>())
    return "logical_not";
  else if constexpr (same_member<Member, &K::where>())
    return "where";
  else if constexpr (same_member<Member, &K::masked_fill>())
    return "masked_fill";
  else if constexpr (same_member<Member, &K::sum>())
    return "sum";
  else if constexpr (same_member<Member, &K::amax>())
    return "amax";
  else if constexpr (same_member<Member, &K::max_dim>())
    return "max_dim";
  else if constexpr (same_member<Member, &K::max_dim_backward>())
    return "max_dim_backward";
  else if constexpr (same_member<Member, &K::copy>())
    return "copy";
  else if constexpr (same_member<Member, &K::copy_broadcast>())
    return "copy_broadcast";
  else if constexpr (same_member<Member, &K::fill>())
    return "fill";
  else if constexpr (same_member<Member, &K::store_values>())
    return "store_values";
  else if constexpr (same_member<Member, &K::index_select>())
    return "index_select";
  else if constexpr (same_member<Member, &K::index_add>())
    return "index_add";
  else if constexpr (same_member<Member, &K::random>())
    return "random";
  else if constexpr (same_member<Member, &K::bmm>())
    return "bmm";
  else if constexpr (same_member<Member, &K::linear>())
    return "linear";
  else if constexpr (same_member<Member, &K::linear_backward16>())
    return "linear_backward16";
  else if constexpr (same_member<Member, &K::split_heads>())
    return "split_heads";
  else if constexpr (same_member<Member, &K::merge_heads>())
    return "merge_heads";
  else if constexpr (same_member<Member, &K::blocked_attention>())
    return "blocked_attention";
  else if constexpr (same_member<Member, &K::blocked_attention_backward>())
    return "blocked_attention_backward";
  else if constexpr (same_member<Member, &K::activation>())
    return "activation";
  else if constexpr (same_member<Member, &K::activation_backward>())
    return "activation_backward";
  else if constexpr (same_member<Member, &K::masked_scale>())
    return "masked_scale";
  else if constexpr (same_member<Member, &K::softmax>())
    return "softmax";
  else if constexpr (same_member<Member, &K::softmax_backward>())
    return "softmax_backward";
  else if constexpr (same_member<Member, &K::masked_softmax>())
    return "masked_softmax";
  else if constexpr (same_member<Member, &K::layer_norm>())
    return "layer_norm";
  else if constexpr (same_member<Member, &K::layer_norm_backward>())
    return "layer_norm_backward";
  else if constexpr (same_member<Member, &K::rms_norm>())
    return "rms_norm";
  else if constexpr (same_member<Member, &K::rms_norm_backward>())
    return "rms_norm_backward";
  else if constexpr (same_member<Member, &K::rotary>())
    return "rotary";
  else if constexpr (same_member<Member, &K::cross_entropy>())
    return "cross_entropy";
  else if constexpr (same_member<Member, &K::cross_entropy_backward>())
    return "cross_entropy_backward";
  else if constexpr (same_member<Member, &K::nll_loss>())
    return "nll_loss";
  else if constexpr (same_member<Member, &K::nll_loss_backward>())
    return "nll_loss_backward";
  else if constexpr (same_member<Member, &K::sum_in_order>())
    return "sum_in_order";
  else if constexpr (same_member<Member, &K::batch_norm_stats>())
    return "batch_norm_stats";
  else if constexpr (same_member<Member, &K::running_update>())
    return "running_update";
  else if constexpr (same_member<Member, &K::batch_norm>())
    return "batch_norm";
  else if constexpr (same_member<Member, &K::batch_norm_backward>())
    return "batch_norm_backward";
  else if constexpr (same_member<Member, &K::mse_loss>())
    return "mse_loss";
  else if constexpr (same_member<Member, &K::mse_loss_backward>())
    return "mse_loss_backward";
  else if constexpr (same_member<Member, &K::norm_partial>())
    return "norm_partial";
  else if constexpr (same_member<Member, &K::clamp_>())
    return "clamp_";
  else if constexpr (same_member<Member, &K::embedding_renorm_>())
    return "embedding_renorm_";
  else if constexpr (same_member<Member, &K::adam_update>())
    return "adam_update";
  else if constexpr (same_member<Member, &K::sgd_update>())
    return "sgd_update";
  else
    return "kernel";
}

}  // namespace fsdp
