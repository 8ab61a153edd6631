// Elementwise map kernels of the CPU table: dtype dispatch happens once per op, then tight loops
// over raw pointers, with fast paths for contiguous and scalar-broadcast operands.
#pragma once

#include "core/ops/op_utils.h"

namespace fsdp::ops_detail {

// out[i] = f(a[i]) over out's shape; a is read with broadcast strides. TO/TI storage types.
template <typename TO, typename TI, typename F>
void map1(const Tensor& out, const Tensor& a, F&& f) {
  const Shape so = out.strides();
  const Shape sa = broadcast_strides(a, out.shape());
  TO* o = out.data<TO>();
  const TI* pa = a.data<TI>();
  for_each_run<2>(out.shape(), {&so, &sa}, [&](const auto& off, std::int64_t n, const auto& in) {
    TO* op = o + off[0];
    const TI* ap = pa + off[1];
    if (in[0] == 1 && in[1] == 1) {
      for (std::int64_t i = 0; i < n; ++i) op[i] = store<TO>(f(load(ap[i])));
    } else if (in[0] == 1 && in[1] == 0) {  // broadcast value (expand, sum's backward)
      const TO v = store<TO>(f(load(ap[0])));
      for (std::int64_t i = 0; i < n; ++i) op[i] = v;
    } else {
      for (std::int64_t i = 0; i < n; ++i) op[i * in[0]] = store<TO>(f(load(ap[i * in[1]])));
    }
  });
}

// out[i] = f(a[i], b[i]) with a and b broadcast to out's shape (both of storage type TI).
template <typename TO, typename TI, typename F>
void map2(const Tensor& out, const Tensor& a, const Tensor& b, F&& f) {
  const Shape so = out.strides();
  const Shape sa = broadcast_strides(a, out.shape());
  const Shape sb = broadcast_strides(b, out.shape());
  TO* o = out.data<TO>();
  const TI* pa = a.data<TI>();
  const TI* pb = b.data<TI>();
  for_each_run<3>(out.shape(), {&so, &sa, &sb},
                  [&](const auto& off, std::int64_t n, const auto& in) {
                    TO* op = o + off[0];
                    const TI* ap = pa + off[1];
                    const TI* bp = pb + off[2];
                    if (in[0] == 1 && in[1] == 1 && in[2] == 1) {
                      for (std::int64_t i = 0; i < n; ++i)
                        op[i] = store<TO>(f(load(ap[i]), load(bp[i])));
                    } else if (in[0] == 1 && in[1] == 1 && in[2] == 0) {
                      const auto bv = load(bp[0]);
                      for (std::int64_t i = 0; i < n; ++i) op[i] = store<TO>(f(load(ap[i]), bv));
                    } else if (in[0] == 1 && in[1] == 0 && in[2] == 1) {
                      const auto av = load(ap[0]);
                      for (std::int64_t i = 0; i < n; ++i) op[i] = store<TO>(f(av, load(bp[i])));
                    } else {
                      for (std::int64_t i = 0; i < n; ++i)
                        op[i * in[0]] = store<TO>(f(load(ap[i * in[1]]), load(bp[i * in[2]])));
                    }
                  });
}

}  // namespace fsdp::ops_detail
