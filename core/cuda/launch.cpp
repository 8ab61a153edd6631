#include "core/cuda/launch.h"

#include <fmt/ranges.h>

#include "core/error.h"

namespace fsdp::cuda {

namespace {
// shape_str's spelling ("[2, 3]") without linking the tensor library, which links this one.
std::string shape_text(const std::vector<std::int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}
}  // namespace

BroadcastGeometry broadcast_geometry(const std::vector<std::int64_t>& a,
                                     const std::vector<std::int64_t>& b, const char* op) {
  const int nd = static_cast<int>(std::max(a.size(), b.size()));
  FSDP_CHECK(nd <= kMaxDims, ValueError, "{}: shapes {} and {} have more than {} dims", op,
             shape_text(a), shape_text(b), kMaxDims);
  BroadcastGeometry g;
  g.ndim = nd;
  std::int64_t sa = 1, sb = 1;  // contiguous strides, built from the last dim
  for (int d = nd - 1; d >= 0; --d) {
    const int ia = d - (nd - static_cast<int>(a.size()));
    const int ib = d - (nd - static_cast<int>(b.size()));
    const std::int64_t na = ia >= 0 ? a[ia] : 1, nb = ib >= 0 ? b[ib] : 1;
    FSDP_CHECK(na == nb || na == 1 || nb == 1, ValueError,
               "{}: shapes {} and {} do not broadcast (dim {}: {} vs {})", op, shape_text(a),
               shape_text(b), d, na, nb);
    g.size[d] = na == 1 ? nb : na;  // a size 0 broadcasts against 1, as in torch
    g.a_stride[d] = na == 1 ? 0 : sa;
    g.b_stride[d] = nb == 1 ? 0 : sb;
    sa *= na;
    sb *= nb;
    g.numel *= g.size[d];
  }
  return g;
}

}  // namespace fsdp::cuda
