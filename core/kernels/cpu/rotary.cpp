// The CPU rotary embedding kernel: out = x cos + rotate_half(x) sin in one pass over x, whose
// rows may be strided (a (B, S, H, D) projection read as (B, H, S, D)), rotation pairs (j, j +
// D/2) as Hugging Face's rotate_half makes them. 16-bit values round each product to their dtype
// before the sum, as the three torch ops Llama runs do. Rows run across the intra-op threads.
#include <cstdint>

#include "core/kernels/cpu/cpu_kernels.h"
#include "core/kernels/cpu/row_kernels.h"
#include "core/ops/op_utils.h"
#include "core/parallel.h"

namespace fsdp::cpu {
using namespace ops_detail;

namespace {

// A product rounded to the storage type (a no-op for float32/float64).
template <typename T>
[[gnu::always_inline]] inline compute_t<T> rounded(compute_t<T> v) {
  if constexpr (std::is_same_v<T, compute_t<T>>)
    return v;
  else
    return load(store<T>(v));
}

// One row of D = 2h elements. Forward: out[j] = x[j] c[j] - x[j+h] s[j], out[j+h] = x[j+h]
// c[j+h] + x[j] s[j+h]. Transposed (the backward): out[j] = x[j] c[j] + x[j+h] s[j+h],
// out[j+h] = x[j+h] c[j+h] - x[j] s[j].
template <typename T, bool kTranspose>
void rotate_row(const T* __restrict x, const T* __restrict c, const T* __restrict s,
                T* __restrict out, std::int64_t h) {
  for (std::int64_t j = 0; j < h; ++j) {
    const auto x0 = load(x[j]), x1 = load(x[j + h]);
    const auto c0 = load(c[j]), c1 = load(c[j + h]);
    const auto s0 = load(s[j]), s1 = load(s[j + h]);
    if constexpr (kTranspose) {
      out[j] = store<T>(rounded<T>(x0 * c0) + rounded<T>(x1 * s1));
      out[j + h] = store<T>(rounded<T>(x1 * c1) - rounded<T>(x0 * s0));
    } else {
      out[j] = store<T>(rounded<T>(x0 * c0) - rounded<T>(x1 * s0));
      out[j + h] = store<T>(rounded<T>(x1 * c1) + rounded<T>(x0 * s1));
    }
  }
}

template <typename T, bool kTranspose>
void rotate(const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin,
            std::int64_t table_batch) {
  const std::int64_t B = out.size(0), H = out.size(1), S = out.size(2), D = out.size(3);
  const std::int64_t sb = x.stride(0), sh = x.stride(1), ss = x.stride(2);
  const T* xs = x.data<T>();
  const T* cs = cos.data<T>();
  const T* sn = sin.data<T>();
  T* os = out.data<T>();
  parallel_for(0, B * H * S, functional::row_grain(D), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t b = r / (H * S), hh = (r / S) % H, i = r % S;
      const std::int64_t t = b * table_batch + i * D;
      rotate_row<T, kTranspose>(xs + b * sb + hh * sh + i * ss, cs + t, sn + t, os + r * D, D / 2);
    }
  });
}

}  // namespace

void rotary(const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin,
            std::int64_t table_batch, bool transpose) {
  functional::dispatch_floating(x.dtype(), "apply_rotary", [&]<typename T>() {
    if (transpose)
      rotate<T, true>(out, x, cos, sin, table_batch);
    else
      rotate<T, false>(out, x, cos, sin, table_batch);
  });
}

}  // namespace fsdp::cpu
