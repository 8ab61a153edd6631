// Classification losses with class-index targets: cross_entropy (fused log-softmax + nll, with
// label smoothing) and nll_loss. Inputs are (N, C), (N, C, d1, ...) or (C); targets (N),
// (N, d1, ...) or a 0-d tensor. The input is read as (N, C, S): position (n, s) has its C class
// scores S elements apart. Targets equal to ignore_index contribute nothing, and "mean" divides
// by the number of targets that are not ignored, as torch does (0 / 0 = nan when all are).
// The kernels are the device's (core/kernels, `cross_entropy`, `nll_loss`).
#include "core/dispatch/intercept.h"
#include "core/functional/functional_common.h"
#include "core/kernels/kernel_table.h"
#include "core/ops.h"

namespace fsdp {
namespace {

enum class Reduction { None, Mean, Sum };

Reduction parse_reduction(const std::string& r, const char* op) {
  if (r == "mean") return Reduction::Mean;
  if (r == "sum") return Reduction::Sum;
  FSDP_CHECK(r == "none", ValueError,
             "{}: '{}' is not a valid value for reduction (expected 'mean', 'sum' or 'none')", op,
             r);
  return Reduction::None;
}

struct LossLayout : NcsLayout {
  Shape out_shape;  // shape of the unreduced loss (= target's shape)
};

// Checks input/target shapes and dtypes as torch's nll_loss does.
LossLayout loss_layout(const Tensor& input, const Tensor& target, const char* op) {
  functional::check_floating(input, op, "input");
  FSDP_CHECK(target.dtype() == DType::Int64, RuntimeError,
             "{}: expected a target of class indices of dtype int64, but got {} (shape {})", op,
             dtype_name(target.dtype()), shape_str(target.shape()));
  const Shape& in = input.shape();
  const Shape& tg = target.shape();
  LossLayout l;
  FSDP_CHECK(!in.empty(), ValueError,
             "{}: expected an input of 1 or more dimensions, got a 0-d "
             "tensor",
             op);
  if (in.size() == 1) {
    FSDP_CHECK(tg.empty(), RuntimeError,
               "{}: for an input of shape {} (C), expected a 0-d target, got shape {}", op,
               shape_str(in), shape_str(tg));
    l.c = in[0];
    return l;
  }
  FSDP_CHECK(!tg.empty() && in[0] == tg[0], ValueError,
             "{}: expected input batch_size ({}) to match target batch_size ({}) (input shape {}, "
             "target shape {})",
             op, in[0], tg.empty() ? 0 : tg[0], shape_str(in), shape_str(tg));
  Shape expected{in[0]};
  for (std::size_t i = 2; i < in.size(); ++i) expected.push_back(in[i]);
  FSDP_CHECK(tg == expected, RuntimeError, "{}: expected target size {}, got {} (input shape {})",
             op, shape_str(expected), shape_str(tg), shape_str(in));
  l.n = in[0];
  l.c = in[1];
  for (std::size_t i = 2; i < in.size(); ++i) l.s *= in[i];
  l.out_shape = tg;
  return l;
}

// The loss reduced on the device: "mean" divides by the count of targets that are not
// ignore_index, counted by the kernel (no host read) and kept in `count` for the backward.
Tensor reduce_loss(const Tensor& losses, const Tensor& target, std::int64_t ignore_index,
                   Reduction r, const Shape& out_shape, DType dtype, Tensor& count) {
  if (r == Reduction::None) return to_dtype(losses, dtype).reshape(out_shape);
  const Device dev = losses.device();
  Tensor out = new_tensor({}, dtype, dev);
  if (r == Reduction::Mean) count = new_tensor({}, DType::Float64, dev);
  kernels(dev).sum_in_order(out, count, losses, r == Reduction::Mean ? target : Tensor(),
                            ignore_index);
  return out;
}

// d loss / d (loss of position p) as the kernels take it (float64, on the device): the
// upstream gradient spread back through the reduction, never read on the host.
Tensor position_grads(const Tensor& grad, const Tensor& count, std::int64_t positions,
                      Reduction r) {
  Tensor g = functional::contiguous_as(grad, DType::Float64);
  if (r == Reduction::None) return g.reshape({positions});
  return r == Reduction::Mean ? div(g, count) : g;
}

}  // namespace

Tensor cross_entropy(const Tensor& input, const Tensor& target, std::int64_t ignore_index,
                     const std::string& reduction, double label_smoothing) {
  FSDP_DISPATCH("cross_entropy", cross_entropy, input, target, ignore_index, reduction,
                label_smoothing);
  const char* op = "cross_entropy";
  const Reduction red = parse_reduction(reduction, op);
  FSDP_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, RuntimeError,
             "cross_entropy: label_smoothing must be between 0.0 and 1.0, got {}", label_smoothing);
  FSDP_CHECK(!is_floating(target.dtype()), NotImplementedError,
             "cross_entropy: class-probability targets (floating target of shape {}) are not "
             "supported; pass int64 class indices",
             shape_str(target.shape()));
  const LossLayout l = loss_layout(input, target, op);
  const Shape result_shape = red == Reduction::None ? l.out_shape : Shape{};
  const Device dev = common_device(op, {&input, &target});
  if (dev.is_meta()) return functional::meta_empty(result_shape, input.dtype());

  const DType out_dtype = input.dtype();
  const std::int64_t positions = l.n * l.s;
  // The kernels check the targets (a bad one on a GPU is reported at the next synchronisation).
  const IndexBounds bounds = class_target_bounds(IndexOp::CrossEntropy, l.c, ignore_index);
  const Tensor tg = kernel_index(target, dev);
  // In the input's own dtype: 16-bit logits are read as they are (computed in float32 by the
  // kernels), not copied to float32 first; a (tokens, vocab) bf16 tensor is GPT's largest.
  Tensor x = functional::contiguous_as(input, out_dtype);
  Tensor losses = new_tensor({positions}, DType::Float64, dev);
  Tensor lse_t = new_tensor({positions}, DType::Float64, dev);
  const double eps = label_smoothing;
  kernels(dev).cross_entropy(losses, lse_t, x, tg, l, bounds, eps);
  Tensor count;
  Tensor out = reduce_loss(losses, tg, ignore_index, red, result_shape, out_dtype, count);

  autograd::record(
      "CrossEntropyBackward", {input, target}, {out}, {x, tg, lse_t},
      [l, red, count, bounds, eps, positions](const autograd::variable_list& saved,
                                              const autograd::variable_list& grads) {
        autograd::variable_list result(2);
        if (!grads[0].defined()) return result;
        Tensor gp = position_grads(grads[0], count, positions, red);
        const Tensor& xs = saved[0];
        // The kernel writes every element (zeros where the target is ignored).
        Tensor dx = new_tensor(xs.shape(), xs.dtype(), xs.device());
        kernels(xs.device()).cross_entropy_backward(dx, xs, saved[2], saved[1], gp, l, bounds, eps);
        result[0] = dx;
        return result;
      });
  return out;
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, std::int64_t ignore_index,
                const std::string& reduction) {
  FSDP_DISPATCH("nll_loss", nll_loss, log_probs, target, ignore_index, reduction);
  const char* op = "nll_loss";
  const Reduction red = parse_reduction(reduction, op);
  const LossLayout l = loss_layout(log_probs, target, op);
  const Shape result_shape = red == Reduction::None ? l.out_shape : Shape{};
  const Device dev = common_device(op, {&log_probs, &target});
  if (dev.is_meta()) return functional::meta_empty(result_shape, log_probs.dtype());

  const DType out_dtype = log_probs.dtype();
  const DType cd = functional::compute_dtype(out_dtype);
  const std::int64_t positions = l.n * l.s;
  const IndexBounds bounds = class_target_bounds(IndexOp::NllLoss, l.c, ignore_index);
  const Tensor tg = kernel_index(target, dev);
  Tensor x = functional::contiguous_as(log_probs, cd);
  Tensor losses = new_tensor({positions}, DType::Float64, dev);
  kernels(dev).nll_loss(losses, x, tg, l, bounds);
  Tensor count;
  Tensor out = reduce_loss(losses, tg, ignore_index, red, result_shape, out_dtype, count);

  const Shape in_shape = log_probs.shape();
  autograd::record("NllLossBackward", {log_probs, target}, {out}, {tg},
                   [l, cd, out_dtype, red, count, bounds, positions, in_shape](
                       const autograd::variable_list& saved, const autograd::variable_list& grads) {
                     autograd::variable_list result(2);
                     if (!grads[0].defined()) return result;
                     Tensor gp = position_grads(grads[0], count, positions, red);
                     const Device dev = saved[0].device();
                     Tensor dx = zeros(in_shape, TensorOptions(cd, dev));
                     kernels(dev).nll_loss_backward(dx, saved[0], gp, l, bounds);
                     result[0] = functional::to_result_dtype(dx, out_dtype);
                     return result;
                   });
  return out;
}

}  // namespace fsdp
