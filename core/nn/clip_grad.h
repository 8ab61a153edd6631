// torch.nn.utils.clip_grad_norm_ and clip_grad_value_, plus the two halves of clip_grad_norm_
// (torch's get_total_norm and clip_grads_with_norm_) for callers that combine partial norms
// themselves, such as FSDP over sharded gradients.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace fsdp::nn {

// The norm of order `norm_type` of all elements of `tensors` taken together, as a 0-d tensor
// (float64 when any tensor is float64, else float32). norm_type may be inf (max |x|), -inf
// (min |x|) or 0 (count of non-zeros). Undefined tensors are skipped; none gives 0. With
// error_if_nonfinite, a nan or infinite norm is a RuntimeError (torch's message).
Tensor get_total_norm(const std::vector<Tensor>& tensors, double norm_type = 2.0,
                      bool error_if_nonfinite = false);

// What ranks holding parts of the gradients combine (sum; max for inf, min for -inf) before
// taking the root: the sum of |x|^p over every element of `tensors` in double (max |x| for inf,
// min |x| for -inf). get_total_norm is pow(norm_partial, 1/p) for p other than 0, 1 and +-inf.
double norm_partial(const std::vector<Tensor>& tensors, double norm_type);

// Scales every defined .grad of `parameters` in place by min(1, max_norm / (total_norm + 1e-6)),
// computed in total_norm's dtype as torch does.
void clip_grads_with_norm_(const std::vector<Tensor>& parameters, double max_norm,
                           const Tensor& total_norm);

// Clips the gradients of `parameters` (those with a .grad) to a total norm of max_norm and
// returns their total norm before clipping (a 0-d tensor).
Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm,
                       double norm_type = 2.0, bool error_if_nonfinite = false);

// Clamps every element of every defined .grad of `parameters` to [-clip_value, clip_value].
void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value);

}  // namespace fsdp::nn
