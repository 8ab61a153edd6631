#include "core/ops/attention_heads.h"

#include <algorithm>
#include <cstring>

#include "core/dispatch/intercept.h"
#include "core/ops/op_utils.h"
#include "core/parallel.h"

namespace fsdp {
using namespace ops_detail;

namespace {

struct HeadsLayout {
  std::int64_t L, N, parts, heads, hd;
  std::int64_t row() const { return parts * heads * hd; }  // one (l, n) row of packed
};

// Forward: heads[p][(n*H + h), l, :] = packed[l, n, p, h, :] (/ divisor for p == 0).
// Backward runs the same loop the other way (kToPacked), undefined parts giving zeros. T is the
// storage type (16-bit floats divide in float and round once).
template <typename T, bool kToPacked>
void move_heads_rows(T* packed, const std::vector<T*>& heads, const HeadsLayout& s,
                     compute_t<T> divisor, std::int64_t l0, std::int64_t l1) {
  const std::int64_t hd = s.hd;
  const auto bytes = static_cast<std::size_t>(hd) * sizeof(T);
  auto divide = [&](T* dst, const T* src) {
    for (std::int64_t d = 0; d < hd; ++d) dst[d] = store<T>(load(src[d]) / divisor);
  };
  for (std::int64_t l = l0; l < l1; ++l)
    for (std::int64_t n = 0; n < s.N; ++n) {
      T* row = packed + (l * s.N + n) * s.row();
      for (std::int64_t p = 0; p < s.parts; ++p)
        for (std::int64_t h = 0; h < s.heads; ++h) {
          T* pk = row + (p * s.heads + h) * hd;
          T* hp = heads[static_cast<std::size_t>(p)];
          if constexpr (kToPacked) {
            if (!hp) {
              std::memset(pk, 0, bytes);
              continue;
            }
            const T* src = hp + ((n * s.heads + h) * s.L + l) * hd;
            if (p == 0 && divisor != compute_t<T>(1))
              divide(pk, src);
            else
              std::memcpy(pk, src, bytes);
          } else {
            T* dst = hp + ((n * s.heads + h) * s.L + l) * hd;
            if (p == 0 && divisor != compute_t<T>(1))
              divide(dst, pk);
            else
              std::memcpy(dst, pk, bytes);
          }
        }
    }
}

// Positions [0, L) split across the intra-op threads.
template <typename T, bool kToPacked>
void move_heads(T* packed, const std::vector<T*>& heads, const HeadsLayout& s,
                compute_t<T> divisor) {
  const std::int64_t grain =
      std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(1, s.N * s.row()));
  parallel_for(0, s.L, grain, [&](std::int64_t l0, std::int64_t l1) {
    move_heads_rows<T, kToPacked>(packed, heads, s, divisor, l0, l1);
  });
}

// f.template operator()<T>() for the storage types split_heads takes.
template <typename F>
void dispatch_heads(DType dt, F&& f) {
  switch (dt) {
    case DType::BFloat16:
      f.template operator()<BFloat16>();
      return;
    case DType::Float16:
      f.template operator()<Half>();
      return;
    default:
      dispatch_float(dt, "split_heads", f);
  }
}

}  // namespace

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
  if (check_devices("split_heads", packed)) {  // meta: shapes only (fake-mode propagation)
    std::vector<Tensor> out;
    for (std::int64_t p = 0; p < parts; ++p)
      out.push_back(empty({s.N * heads, s.L, s.hd}, TensorOptions(dt, kMeta)));
    return out;
  }
  Tensor src = packed.contiguous();
  std::vector<Tensor> out;
  for (std::int64_t p = 0; p < parts; ++p)
    out.push_back(empty({s.N * heads, s.L, s.hd}, TensorOptions(dt, kCPU)));
  dispatch_heads(dt, [&]<typename T>() {
    std::vector<T*> dst;
    for (auto& t : out) dst.push_back(t.data<T>());
    move_heads<T, false>(src.data<T>(), dst, s, static_cast<compute_t<T>>(first_divisor));
  });
  autograd::record("SplitHeadsBackward", {packed}, out, {},
                   [s, dt, first_divisor, shape = packed.shape()](
                       const variable_list&, const variable_list& g) -> variable_list {
                     Tensor grad = empty(shape, TensorOptions(dt, kCPU));
                     std::vector<Tensor> parts_in;
                     for (const auto& gi : g)
                       parts_in.push_back(gi.defined() ? gi.contiguous() : Tensor());
                     dispatch_heads(dt, [&]<typename T>() {
                       std::vector<T*> src;
                       for (auto& t : parts_in) src.push_back(t.defined() ? t.data<T>() : nullptr);
                       move_heads<T, true>(grad.data<T>(), src, s,
                                           static_cast<compute_t<T>>(first_divisor));
                     });
                     return {grad};
                   });
  return out;
}

}  // namespace fsdp
