#include "core/ops/packed_causal_attention.h"

#include "core/dispatch/intercept.h"
#include "core/functional/functional_common.h"
#include "core/kernels/kernel_table.h"
#include "core/ops/op_utils.h"

namespace fsdp {
using namespace ops_detail;

namespace {

constexpr const char* kOp = "packed_causal_attention";

// Whether the kernels can read (L, N, C) rows in place: each row dense, any L and N strides.
bool rows_dense(const Tensor& t) {
  return t.stride(2) == 1;
}

// Whether t's (l, n) rows lie with n outermost (batch_first's (N, L, C) memory seen as (L, N, C)).
bool n_major(const Tensor& t) {
  return t.stride(1) > t.stride(0);
}

// A fresh (L, N, C) tensor, dense in L-major order or, for `n_major_order`, N-major.
Tensor new_rows(std::int64_t L, std::int64_t N, std::int64_t C, bool n_major_order, DType dt,
                Device dev) {
  if (!n_major_order) return new_tensor({L, N, C}, dt, dev);
  const Tensor t = new_tensor({N, L, C}, dt, dev);
  return make_view(t, {L, N, C}, {C, L * C, 1}, t.storage_offset());
}

// Part `part` of packed (L, N, parts * heads * hd), rows dense, as (N, heads, L, hd) heads: a
// view through packed's own L and N strides.
Tensor heads_of(const Tensor& packed, std::int64_t parts, std::int64_t part, std::int64_t heads) {
  const std::int64_t L = packed.size(0), N = packed.size(1), hd = packed.size(2) / (parts * heads);
  return make_view(packed, {N, heads, L, hd}, {packed.stride(1), hd, packed.stride(0), 1},
                   packed.storage_offset() + part * heads * hd);
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
  Tensor out = new_rows(L, N, E, n_major(proj), dt, dev);
  if (dev.is_meta()) return out;  // shapes only (fake-mode propagation)

  AttentionDims d{N, L, L, E / heads, E / heads};
  d.H = d.KV = heads;
  d.scale = scale;
  d.causal = true;
  d.masked_rows_zero = true;
  const Tensor packed = rows_dense(proj) ? proj.detach() : proj.detach().contiguous();
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
        // One gradient buffer in the projection's dim order: the kernels write dq, dk and dv
        // into its three parts.
        const Tensor& packed = s[0];
        Tensor dproj =
            new_rows(packed.size(0), packed.size(1), packed.size(2), n_major(packed), dt, dev);
        const Tensor dout = g[0].dtype() == dt && rows_dense(g[0])
                                ? g[0].detach()
                                : functional::contiguous_as(g[0], dt);
        if (dproj.numel() > 0)
          kernels(dev).blocked_attention_backward(
              heads_of(dproj, 3, 0, heads), heads_of(dproj, 3, 1, heads),
              heads_of(dproj, 3, 2, heads), heads_of(packed, 3, 0, heads),
              heads_of(packed, 3, 1, heads), heads_of(packed, 3, 2, heads), Tensor(),
              heads_of(s[1], 1, 0, heads), s[2], heads_of(dout, 1, 0, heads), d);
        return {dproj};
      });
  return out;
}

}  // namespace fsdp
