// The CPU table itself: addresses only, so it is constant-initialised (kernel_table.cpp points
// at it before any static constructor runs).
#include "core/kernels/cpu/cpu_kernels.h"

namespace fsdp {

constinit const KernelTable kCpuKernels{
    .binary = &cpu::binary,
    .unary = &cpu::unary,
    .compare = &cpu::compare,
    .eq_scalar = &cpu::eq_scalar,
    .logical_not = &cpu::logical_not,
    .where = &cpu::where,
    .masked_fill = &cpu::masked_fill,
    .sum = &cpu::sum,
    .amax = &cpu::amax,
    .max_dim = &cpu::max_dim,
    .max_dim_backward = &cpu::max_dim_backward,
    .copy = &cpu::copy,
    .copy_broadcast = &cpu::copy_broadcast,
    .fill = &cpu::fill,
    .index_select = &cpu::index_select,
    .index_add = &cpu::index_add,
    .random = &cpu::random,
    .bmm = &cpu::bmm,
    .linear = &cpu::linear,
    .linear_backward16 = &cpu::linear_backward16,
    .split_heads = &cpu::split_heads,
    .merge_heads = &cpu::merge_heads,
    .blocked_attention = &cpu::blocked_attention,
    .blocked_attention_backward = &cpu::blocked_attention_backward,
    .activation = &cpu::activation,
    .activation_backward = &cpu::activation_backward,
    .masked_scale = &cpu::masked_scale,
    .softmax = &cpu::softmax,
    .softmax_backward = &cpu::softmax_backward,
    .masked_softmax = &cpu::masked_softmax,
    .layer_norm = &cpu::layer_norm,
    .layer_norm_backward = &cpu::layer_norm_backward,
    .cross_entropy = &cpu::cross_entropy,
    .cross_entropy_backward = &cpu::cross_entropy_backward,
    .nll_loss = &cpu::nll_loss,
    .nll_loss_backward = &cpu::nll_loss_backward,
    .sum_in_order = &cpu::sum_in_order,
    .mse_loss = &cpu::mse_loss,
    .mse_loss_backward = &cpu::mse_loss_backward,
    .adam_update = &cpu::adam_update,
    .sgd_update = &cpu::sgd_update,
};

}  // namespace fsdp
