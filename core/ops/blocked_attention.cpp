#include "core/ops/blocked_attention.h"

#include "core/kernels/kernel_table.h"
#include "core/ops/op_utils.h"

namespace fsdp {
using namespace ops_detail;

Tensor blocked_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                         const Tensor& mask_in) {
  const char* op = "blocked_attention";
  FSDP_CHECK(q_in.dim() == 3 && k_in.dim() == 3 && v_in.dim() == 3 &&
                 q_in.size(0) == k_in.size(0) && k_in.size(0) == v_in.size(0) &&
                 q_in.size(2) == k_in.size(2) && k_in.size(1) == v_in.size(1),
             RuntimeError,
             "{}: expected q (B, L, D), k (B, S, D) and v (B, S, Dv), got shapes {}, {} and {}", op,
             shape_str(q_in.shape()), shape_str(k_in.shape()), shape_str(v_in.shape()));
  const DType dt = q_in.dtype();
  FSDP_CHECK((dt == DType::Float32 || dt == DType::Float64) && k_in.dtype() == dt &&
                 v_in.dtype() == dt && (!mask_in.defined() || mask_in.dtype() == dt),
             TypeError,
             "{}: expected q, k, v (and mask) of one dtype, float32 or float64; got {}, {}, {} "
             "(q shape {})",
             op, dtype_name(dt), dtype_name(k_in.dtype()), dtype_name(v_in.dtype()),
             shape_str(q_in.shape()));
  const Device dev = common_device(op, {&q_in, &k_in, &v_in, &mask_in});
  FSDP_CHECK(!dev.is_meta(), NotImplementedError, "{}: meta tensors are not supported (q shape {})",
             op, shape_str(q_in.shape()));
  AttentionDims d{q_in.size(0), q_in.size(1), k_in.size(1), q_in.size(2), v_in.size(2)};
  d.q = {d.L * d.D, 0, d.D};
  d.k = {d.S * d.D, 0, d.D};
  d.v = {d.S * d.Dv, 0, d.Dv};
  Tensor mask;
  if (mask_in.defined()) {
    const bool ok = (mask_in.dim() == 2 && mask_in.size(0) == d.L && mask_in.size(1) == d.S) ||
                    (mask_in.dim() == 3 && (mask_in.size(0) == 1 || mask_in.size(0) == d.B) &&
                     mask_in.size(1) == d.L && mask_in.size(2) == d.S);
    FSDP_CHECK(ok, RuntimeError,
               "{}: mask of shape {} does not fit scores of shape ({}, {}, {}); expected (L, S), "
               "(1, L, S) or (B, L, S)",
               op, shape_str(mask_in.shape()), d.B, d.L, d.S);
    mask = mask_in.detach().contiguous();
    d.mask = {mask.dim() == 3 && mask.size(0) == d.B && d.B > 1 ? d.L * d.S : 0, 0, d.S};
  }
  Tensor q = q_in.detach().contiguous(), k = k_in.detach().contiguous();
  Tensor v = v_in.detach().contiguous();
  Tensor out = new_tensor({d.B, d.L, d.Dv}, dt, dev);
  Tensor lse = new_tensor({d.B, d.L}, dt, dev);
  kernels(dev).blocked_attention(out, lse, q, k, v, mask, d);
  autograd::record(
      "BlockedAttentionBackward", {q_in, k_in, v_in}, {out}, {q, k, v, out, lse},
      [d, dt, dev, mask](const variable_list& s, const variable_list& g) -> variable_list {
        if (!g[0].defined()) return {Tensor(), Tensor(), Tensor()};
        Tensor dout = g[0].contiguous();
        Tensor dq = new_tensor(s[0].shape(), dt, dev);
        Tensor dk = new_tensor(s[1].shape(), dt, dev);
        Tensor dv = new_tensor(s[2].shape(), dt, dev);
        kernels(dev).blocked_attention_backward(dq, dk, dv, s[0], s[1], s[2], mask, s[3], s[4],
                                                dout, d);
        return {dq, dk, dv};
      });
  return out;
}

}  // namespace fsdp
