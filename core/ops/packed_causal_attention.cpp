#include "core/ops/packed_causal_attention.h"

#include "core/dispatch/intercept.h"
#include "core/functional/functional_common.h"
#include "core/kernels/kernel_table.h"
#include "core/ops/op_utils.h"

namespace fsdp {
using namespace ops_detail;

namespace {

constexpr const char* kOp = "packed_causal_attention";

// Part `part` of a contiguous (L, N, parts * H * hd) tensor as (N, H, L, hd) heads, a view.
Tensor heads_of(const Tensor& packed, std::int64_t parts, std::int64_t part, std::int64_t heads) {
  const std::int64_t L = packed.size(0), N = packed.size(1), hd = packed.size(2) / (parts * heads);
  return packed.view({L, N, parts, heads, hd}).select(2, part).permute({1, 2, 0, 3});
}

}  // namespace

Tensor packed_causal_attention(const Tensor& proj, std::int64_t heads, double scale) {
  FSDP_DISPATCH(kOp, packed_causal_attention, proj, heads, scale);
  FSDP_CHECK(proj.dim() == 3 && heads > 0 && proj.size(2) % (3 * heads) == 0, RuntimeError,
             "{}: expected proj (L, N, 3 * heads * head_dim), got shape {} for {} heads", kOp,
             shape_str(proj.shape()), heads);
  FSDP_CHECK(is_floating(proj.dtype()), TypeError,
             "{}: not implemented for dtype {} (shape {}); expected a floating dtype", kOp,
             dtype_name(proj.dtype()), shape_str(proj.shape()));
  const std::int64_t L = proj.size(0), N = proj.size(1), E = proj.size(2) / 3;
  const DType dt = proj.dtype();
  const Device dev = common_device(kOp, {&proj});
  Tensor out = new_tensor({L, N, E}, dt, dev);
  if (dev.is_meta()) return out;  // shapes only (fake-mode propagation)

  AttentionDims d{N, L, L, E / heads, E / heads};
  d.H = d.KV = heads;
  d.scale = scale;
  d.causal = true;
  d.masked_rows_zero = true;
  const Tensor packed = proj.detach().contiguous();
  const Tensor q = heads_of(packed, 3, 0, heads), k = heads_of(packed, 3, 1, heads),
               v = heads_of(packed, 3, 2, heads), o = heads_of(out, 1, 0, heads);
  d.q = attention_strides(q);
  d.k = attention_strides(k);
  d.v = attention_strides(v);
  const Tensor lse = new_tensor({N, heads, L}, functional::compute_dtype(dt), dev);
  if (out.numel() > 0) kernels(dev).blocked_attention(o, lse, q, k, v, Tensor(), d);
  autograd::record(
      "PackedCausalAttentionBackward", {proj}, {out}, {packed, out.detach(), lse},
      [d, dt, heads](const autograd::variable_list& s,
                     const autograd::variable_list& g) -> autograd::variable_list {
        if (!g[0].defined()) return {Tensor()};
        const Device dev = common_device("packed_causal_attention backward", {&g[0], &s[0]});
        // One gradient buffer: the kernels write dq, dk and dv into its three parts.
        Tensor dproj = new_tensor(s[0].shape(), dt, dev);
        const Tensor dout = functional::contiguous_as(g[0], dt);
        if (dproj.numel() > 0)
          kernels(dev).blocked_attention_backward(
              heads_of(dproj, 3, 0, heads), heads_of(dproj, 3, 1, heads),
              heads_of(dproj, 3, 2, heads), heads_of(s[0], 3, 0, heads),
              heads_of(s[0], 3, 1, heads), heads_of(s[0], 3, 2, heads), Tensor(),
              heads_of(s[1], 1, 0, heads), s[2], heads_of(dout, 1, 0, heads), d);
        return {dproj};
      });
  return out;
}

}  // namespace fsdp
