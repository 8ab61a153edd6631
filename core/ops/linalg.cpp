// Matrix products: mm, bmm, matmul (torch.matmul's rules) and linear; the products themselves
// are the device's kernels (on CPU, OpenBLAS with transposed views passed by their strides).
#include <optional>

#include "core/dispatch/intercept.h"
#include "core/ops/op_utils.h"

namespace fsdp {

using namespace ops_detail;

namespace {

void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  FSDP_CHECK(a.dtype() == b.dtype(), RuntimeError,
             "{}: expected both operands to have the same dtype, but got {} (shape {}) and {} "
             "(shape {})",
             op, dtype_name(a.dtype()), shape_str(a.shape()), dtype_name(b.dtype()),
             shape_str(b.shape()));
  FSDP_CHECK(is_floating(a.dtype()), TypeError,
             "{}: not implemented for dtype {} (shapes {} and {}); expected a floating dtype", op,
             dtype_name(a.dtype()), shape_str(a.shape()), shape_str(b.shape()));
}

bool is_16bit(DType t) {
  return t == DType::Float16 || t == DType::BFloat16;
}

// Batched product of [B, m, k] and [B, k, n] into a fresh [B, m, n] tensor (no autograd).
Tensor batched_product(const Tensor& a, const Tensor& b, Device dev) {
  Tensor out = new_tensor({a.size(0), a.size(1), b.size(2)}, a.dtype(), dev);
  kernels(dev).bmm(out, a, b);
  return out;
}

// Linear's backward for 16-bit tensors in one pass over the output gradient
// (ops_detail::linear_backward_16bit), when nothing needs a graph of the backward itself and the
// weight is small enough; nothing otherwise (the caller then runs the separate products).
std::optional<variable_list> linear_backward_fused16(const variable_list& saved, const Tensor& g,
                                                     bool ri, bool rw, bool rb, std::int64_t rows,
                                                     std::int64_t in, std::int64_t outf,
                                                     const Shape& ishape) {
  const DType dt = g.dtype();
  if (!is_16bit(dt) || autograd::is_grad_enabled() || g.is_meta() ||
      in * outf > kernels(g.device()).linear_backward16_max_weight)
    return std::nullopt;
  const Tensor& x = saved[0];
  const Tensor& w = saved[1];
  if ((rw && (!x.defined() || x.dtype() != dt)) || (ri && (!w.defined() || w.dtype() != dt)))
    return std::nullopt;
  Tensor g2 = reshape(g, {rows, outf}).contiguous();
  const Device dev = g.device();
  Tensor x2 = rw ? reshape(x, {rows, in}).contiguous() : Tensor();
  Tensor gx = ri ? new_tensor({rows, in}, dt, dev) : Tensor();
  Tensor gw = rw ? new_tensor({outf, in}, dt, dev) : Tensor();
  Tensor gb = rb ? new_tensor({outf}, dt, dev) : Tensor();
  kernels(dev).linear_backward16(gx, gw, gb, g2, x2, ri ? w : Tensor(), in);
  return variable_list{ri ? reshape(gx, ishape) : Tensor(), gw, gb};
}

}  // namespace

Tensor mm(const Tensor& a, const Tensor& b) {
  FSDP_DISPATCH("mm", mm, a, b);
  const Device dev = common_device("mm", {&a, &b});
  FSDP_CHECK(a.dim() == 2 && b.dim() == 2, RuntimeError,
             "mm: expected 2-D tensors, got shapes {} and {}", shape_str(a.shape()),
             shape_str(b.shape()));
  FSDP_CHECK(a.size(1) == b.size(0), RuntimeError,
             "mm: shapes {} and {} cannot be multiplied ({} != {})", shape_str(a.shape()),
             shape_str(b.shape()), a.size(1), b.size(0));
  check_same_dtype("mm", a, b);
  Tensor out;
  if (dev.is_meta()) {
    out = new_tensor({a.size(0), b.size(1)}, a.dtype(), dev);
  } else {
    Tensor a3 =
        make_view(a, {1, a.size(0), a.size(1)}, {0, a.stride(0), a.stride(1)}, a.storage_offset());
    Tensor b3 =
        make_view(b, {1, b.size(0), b.size(1)}, {0, b.stride(0), b.stride(1)}, b.storage_offset());
    Tensor r = batched_product(a3, b3, dev);
    out = make_view(r, {a.size(0), b.size(1)}, {b.size(1), 1}, r.storage_offset());
  }
  bool ra = a.requires_grad(), rb = b.requires_grad();
  autograd::record("MmBackward0", {a, b}, {out}, {rb ? a : Tensor(), ra ? b : Tensor()},
                   [ra, rb](const variable_list& s, const variable_list& g) -> variable_list {
                     Tensor ga = ra ? mm(g[0], transpose(s[1], 0, 1)) : Tensor();
                     Tensor gb = rb ? mm(transpose(s[0], 0, 1), g[0]) : Tensor();
                     return {ga, gb};
                   });
  return out;
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  FSDP_DISPATCH("bmm", bmm, a, b);
  const Device dev = common_device("bmm", {&a, &b});
  FSDP_CHECK(a.dim() == 3 && b.dim() == 3, RuntimeError,
             "bmm: expected 3-D tensors, got shapes {} and {}", shape_str(a.shape()),
             shape_str(b.shape()));
  FSDP_CHECK(a.size(0) == b.size(0), RuntimeError,
             "bmm: batch sizes of shapes {} and {} differ ({} != {})", shape_str(a.shape()),
             shape_str(b.shape()), a.size(0), b.size(0));
  FSDP_CHECK(a.size(2) == b.size(1), RuntimeError,
             "bmm: shapes {} and {} cannot be multiplied ({} != {})", shape_str(a.shape()),
             shape_str(b.shape()), a.size(2), b.size(1));
  check_same_dtype("bmm", a, b);
  Tensor out = dev.is_meta() ? new_tensor({a.size(0), a.size(1), b.size(2)}, a.dtype(), dev)
                             : batched_product(a, b, dev);
  bool ra = a.requires_grad(), rb = b.requires_grad();
  autograd::record("BmmBackward0", {a, b}, {out}, {rb ? a : Tensor(), ra ? b : Tensor()},
                   [ra, rb](const variable_list& s, const variable_list& g) -> variable_list {
                     Tensor ga = ra ? bmm(g[0], transpose(s[1], 1, 2)) : Tensor();
                     Tensor gb = rb ? bmm(transpose(s[0], 1, 2), g[0]) : Tensor();
                     return {ga, gb};
                   });
  return out;
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  FSDP_DISPATCH("matmul", matmul, a, b);
  common_device("matmul", {&a, &b});
  const std::int64_t da = a.dim(), db = b.dim();
  FSDP_CHECK(da >= 1 && db >= 1, RuntimeError,
             "matmul: both arguments to matmul need to be at least 1D, but they are {}D and {}D "
             "(shapes {} and {})",
             da, db, shape_str(a.shape()), shape_str(b.shape()));
  const std::int64_t ka = a.size(-1), kb = db == 1 ? b.size(0) : b.size(-2);
  FSDP_CHECK(ka == kb, RuntimeError, "matmul: shapes {} and {} cannot be multiplied ({} != {})",
             shape_str(a.shape()), shape_str(b.shape()), ka, kb);
  if (da == 1 && db == 1) return reshape(mm(unsqueeze(a, 0), unsqueeze(b, 1)), {});
  if (da == 2 && db == 1) return squeeze(mm(a, unsqueeze(b, 1)), 1);
  if (da == 1 && db == 2) return squeeze(mm(unsqueeze(a, 0), b), 0);
  if (da == 2 && db == 2) return mm(a, b);
  if (da >= 3 && db <= 2) {
    // Fold a's batch dims into rows: one gemm. The row count is explicit: with ka == 0 a -1
    // could not be inferred.
    Shape out_shape(a.shape().begin(), a.shape().end() - 1);
    Tensor rows = reshape(a, {shape_numel(out_shape), ka});
    if (db == 1) return reshape(mm(rows, unsqueeze(b, 1)), out_shape);
    out_shape.push_back(b.size(1));
    return reshape(mm(rows, b), out_shape);
  }
  // Batched with broadcasting of the batch dims.
  Tensor am = da == 1 ? unsqueeze(a, 0) : a;
  Tensor bm = db == 1 ? unsqueeze(b, 1) : b;
  Shape ab(am.shape().begin(), am.shape().end() - 2), bb(bm.shape().begin(), bm.shape().end() - 2);
  Shape batch = broadcast_shapes(ab, bb, "matmul");
  const std::int64_t n = am.size(-2), p = bm.size(-1), nb = shape_numel(batch);
  Shape ae = batch, be = batch;
  ae.insert(ae.end(), {n, ka});
  be.insert(be.end(), {ka, p});
  Tensor r = bmm(reshape(expand(am, ae), {nb, n, ka}), reshape(expand(bm, be), {nb, ka, p}));
  Shape out_shape = batch;
  if (da > 1) out_shape.push_back(n);
  if (db > 1) out_shape.push_back(p);
  return reshape(r, out_shape);
}

Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  FSDP_DISPATCH("linear", linear, input, weight, bias);
  const Device dev = common_device("linear", {&input, &weight, &bias});
  FSDP_CHECK(input.dim() >= 1 && weight.dim() == 2, RuntimeError,
             "linear: expected input of at least 1 dimension and a 2-D weight, got shapes {} "
             "and {}",
             shape_str(input.shape()), shape_str(weight.shape()));
  const std::int64_t in = weight.size(1), outf = weight.size(0);
  FSDP_CHECK(input.size(-1) == in, RuntimeError,
             "linear: input of shape {} and weight of shape {} cannot be multiplied "
             "(in_features {} != {})",
             shape_str(input.shape()), shape_str(weight.shape()), input.size(-1), in);
  check_same_dtype("linear", input, weight);
  if (bias.defined()) {
    // One value, 0-d or (1), is added to every feature (torch's addmm broadcasts it).
    const bool one_value = bias.dim() <= 1 && bias.numel() == 1;
    FSDP_CHECK((bias.dim() == 1 && bias.size(0) == outf) || one_value, RuntimeError,
               "linear: bias of shape {} does not match out_features {} (weight shape {}; "
               "expected ({}), (1) or ())",
               shape_str(bias.shape()), outf, shape_str(weight.shape()), outf);
    check_same_dtype("linear", input, bias);
  }
  Shape out_shape(input.shape().begin(), input.shape().end() - 1);
  // The rows as a count, not -1: with in_features 0 or out_features 0 a -1 cannot be inferred.
  const std::int64_t rows = shape_numel(out_shape);
  out_shape.push_back(outf);
  Tensor out;
  const DType dt = input.dtype();
  if (dev.is_meta()) {
    out = new_tensor(out_shape, dt, dev);
  } else {
    autograd::NoGradGuard ng;
    Tensor x = reshape(input.detach(), {rows, in});
    Tensor bc = bias.defined() ? bias.detach().expand({outf}).contiguous() : Tensor();
    Tensor o = new_tensor({x.size(0), outf}, dt, dev);
    kernels(dev).linear(o, x, weight.detach(), bc);
    out = reshape(o, out_shape);
  }
  bool ri = input.requires_grad(), rw = weight.requires_grad();
  bool rb = bias.defined() && bias.requires_grad();
  autograd::record(
      "LinearBackward0", {input, weight, bias}, {out},
      {rw ? input : Tensor(), ri ? weight : Tensor()},
      [ri, rw, rb, rows, in, outf, ishape = input.shape(),
       bshape = bias.defined() ? bias.shape() : Shape{}](const variable_list& s,
                                                         const variable_list& g) -> variable_list {
        variable_list grads;
        if (auto fused = linear_backward_fused16(s, g[0], ri, rw, rb, rows, in, outf, ishape)) {
          grads = *fused;
        } else {
          Tensor g2 = reshape(g[0], {rows, outf});
          grads = {ri ? reshape(mm(g2, s[1]), ishape) : Tensor(),
                   rw ? mm(transpose(g2, 0, 1), reshape(s[0], {rows, in})) : Tensor(),
                   rb ? sum(g2, {0}) : Tensor()};
        }
        if (rb) grads[2] = sum_to(grads[2], bshape);  // a one-value bias sums the features
        return grads;
      });
  return out;
}

}  // namespace fsdp
