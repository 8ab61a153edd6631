#include "core/ops/attention_heads.h"

#include "core/dispatch/intercept.h"
#include "core/kernels/kernel_table.h"
#include "core/ops/op_utils.h"

namespace fsdp {
using namespace ops_detail;

std::vector<Tensor> split_heads(const Tensor& packed, std::int64_t parts, std::int64_t heads,
                                double first_divisor) {
  FSDP_DISPATCH("split_heads", split_heads, packed, parts, heads, first_divisor);
  FSDP_CHECK(packed.dim() == 3 && parts > 0 && heads > 0 && packed.size(2) % (parts * heads) == 0,
             RuntimeError,
             "split_heads: expected packed (L, N, parts * heads * head_dim), got shape {} for {} "
             "parts of {} heads",
             shape_str(packed.shape()), parts, heads);
  FSDP_CHECK(is_floating(packed.dtype()), TypeError,
             "split_heads: not implemented for dtype {} (shape {}); expected a floating dtype",
             dtype_name(packed.dtype()), shape_str(packed.shape()));
  const HeadsLayout s{packed.size(0), packed.size(1), parts, heads,
                      packed.size(2) / (parts * heads)};
  const DType dt = packed.dtype();
  const Device dev = common_device("split_heads", {&packed});
  std::vector<Tensor> out;
  for (std::int64_t p = 0; p < parts; ++p)
    out.push_back(new_tensor({s.N * heads, s.L, s.hd}, dt, dev));
  if (dev.is_meta()) return out;  // shapes only (fake-mode propagation)
  kernels(dev).split_heads(out, packed.contiguous(), s, first_divisor);
  autograd::record("SplitHeadsBackward", {packed}, out, {},
                   [s, dt, dev, first_divisor, shape = packed.shape()](
                       const variable_list&, const variable_list& g) -> variable_list {
                     Tensor grad = new_tensor(shape, dt, dev);
                     std::vector<Tensor> parts_in;
                     for (const auto& gi : g)
                       parts_in.push_back(gi.defined() ? gi.contiguous() : Tensor());
                     kernels(dev).merge_heads(grad, parts_in, s, first_divisor);
                     return {grad};
                   });
  return out;
}

}  // namespace fsdp
