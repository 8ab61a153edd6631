// Comparisons, logical_not, selection by a mask (where, masked_fill) and allclose.
#include <cmath>

#include "core/dispatch/intercept.h"
#include "core/ops/elementwise_kernels.h"

namespace fsdp {
using namespace ops_detail;

namespace {

template <typename F>
Tensor compare(const char* op, const Tensor& a, const Tensor& b, F f) {
  bool meta = check_devices(op, {&a, &b});
  Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = new_tensor(shape, DType::Bool, meta);
  if (meta || out.numel() == 0) return out;
  DType dt = result_type(a, b);
  Tensor ac = as_dtype(a, dt), bc = as_dtype(b, dt);
  dispatch_all(dt, [&]<typename T>() { map2<bool, T>(out, ac, bc, f); });
  return out;
}

void check_mask(const char* op, const Tensor& mask) {
  FSDP_CHECK(mask.dtype() == DType::Bool || mask.dtype() == DType::UInt8, TypeError,
             "{}: expected a mask of dtype bool or uint8, got {} (shape {})", op,
             dtype_name(mask.dtype()), shape_str(mask.shape()));
}

}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) {
  FSDP_DISPATCH("eq", eq, a, b);
  return compare("eq", a, b, [](auto x, auto y) { return x == y; });
}
Tensor ne(const Tensor& a, const Tensor& b) {
  FSDP_DISPATCH("ne", ne, a, b);
  return compare("ne", a, b, [](auto x, auto y) { return x != y; });
}
Tensor lt(const Tensor& a, const Tensor& b) {
  FSDP_DISPATCH("lt", lt, a, b);
  return compare("lt", a, b, [](auto x, auto y) { return x < y; });
}
Tensor le(const Tensor& a, const Tensor& b) {
  FSDP_DISPATCH("le", le, a, b);
  return compare("le", a, b, [](auto x, auto y) { return x <= y; });
}
Tensor gt(const Tensor& a, const Tensor& b) {
  FSDP_DISPATCH("gt", gt, a, b);
  return compare("gt", a, b, [](auto x, auto y) { return x > y; });
}
Tensor ge(const Tensor& a, const Tensor& b) {
  FSDP_DISPATCH("ge", ge, a, b);
  return compare("ge", a, b, [](auto x, auto y) { return x >= y; });
}

Tensor eq(const Tensor& a, double b) {
  FSDP_DISPATCH("eq.Scalar", eq, a, b);
  bool meta = check_devices("eq", a);
  Tensor out = new_tensor(a.shape(), DType::Bool, meta);
  if (meta || out.numel() == 0) return out;
  dispatch_all(a.dtype(), [&]<typename T>() {
    map1<bool, T>(out, a, [b](auto x) { return static_cast<double>(x) == b; });
  });
  return out;
}

Tensor logical_not(const Tensor& a) {
  FSDP_DISPATCH("logical_not", logical_not, a);
  bool meta = check_devices("logical_not", a);
  Tensor out = new_tensor(a.shape(), DType::Bool, meta);
  if (meta || out.numel() == 0) return out;
  dispatch_all(a.dtype(), [&]<typename T>() {
    map1<bool, T>(out, a, [](auto x) { return x == decltype(x)(0); });
  });
  return out;
}

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  FSDP_DISPATCH("where", where, condition, a, b);
  check_mask("where", condition);
  bool meta = check_devices("where", {&condition, &a, &b});
  Shape shape =
      broadcast_shapes(broadcast_shapes(condition.shape(), a.shape(), "where"), b.shape(), "where");
  DType dt = result_type(a, b);
  Tensor out = new_tensor(shape, dt, meta);
  if (!meta && out.numel() > 0) {
    Tensor ac = as_dtype(a, dt), bc = as_dtype(b, dt);
    Tensor cc = as_dtype(condition, DType::Bool);
    const Shape so = out.strides();
    const Shape sc = broadcast_strides(cc, shape);
    const Shape sa = broadcast_strides(ac, shape);
    const Shape sb = broadcast_strides(bc, shape);
    dispatch_all(dt, [&]<typename T>() {
      T* o = out.data<T>();
      const bool* pc = cc.data<bool>();
      const T* pa = ac.data<T>();
      const T* pb = bc.data<T>();
      for_each_run<4>(shape, {&so, &sc, &sa, &sb},
                      [&](const auto& off, std::int64_t n, const auto& in) {
                        T* op = o + off[0];
                        const bool* cp = pc + off[1];
                        const T* ap = pa + off[2];
                        const T* bp = pb + off[3];
                        if (in[0] == 1 && in[1] == 1 && in[2] == 1 && in[3] == 1) {
                          for (std::int64_t i = 0; i < n; ++i) op[i] = cp[i] ? ap[i] : bp[i];
                        } else {
                          for (std::int64_t i = 0; i < n; ++i)
                            op[i * in[0]] = cp[i * in[1]] ? ap[i * in[2]] : bp[i * in[3]];
                        }
                      });
    });
  }
  bool ra = a.requires_grad(), rb = b.requires_grad();
  autograd::record("WhereBackward0", {a, b}, {out}, {condition},
                   [sa = a.shape(), da = a.dtype(), sb = b.shape(), db = b.dtype(), ra, rb](
                       const variable_list& s, const variable_list& g) -> variable_list {
                     Tensor ga, gb;
                     if (ra) ga = reduce_grad(masked_fill(g[0], logical_not(s[0]), 0.0), sa, da);
                     if (rb) gb = reduce_grad(masked_fill(g[0], s[0], 0.0), sb, db);
                     return {ga, gb};
                   });
  return out;
}

Tensor masked_fill(const Tensor& a, const Tensor& mask, double value) {
  FSDP_DISPATCH("masked_fill", masked_fill, a, mask, value);
  check_mask("masked_fill", mask);
  bool meta = check_devices("masked_fill", {&a, &mask});
  Shape shape = broadcast_shapes(a.shape(), mask.shape(), "masked_fill");
  Tensor out = new_tensor(shape, a.dtype(), meta);
  if (!meta && out.numel() > 0) {
    Tensor mc = as_dtype(mask, DType::Bool);
    const Shape so = out.strides();
    const Shape sa = broadcast_strides(a, shape);
    const Shape sm = broadcast_strides(mc, shape);
    dispatch_all(a.dtype(), [&]<typename T>() {
      const T v = from_double<T>(value);
      T* o = out.data<T>();
      const T* pa = a.data<T>();
      const bool* pm = mc.data<bool>();
      for_each_run<3>(shape, {&so, &sa, &sm}, [&](const auto& off, std::int64_t n, const auto& in) {
        T* op = o + off[0];
        const T* ap = pa + off[1];
        const bool* mp = pm + off[2];
        if (in[0] == 1 && in[1] == 1 && in[2] == 1) {
          for (std::int64_t i = 0; i < n; ++i) op[i] = mp[i] ? v : ap[i];
        } else if (in[0] == 1 && in[1] == 1 && in[2] == 0) {
          if (mp[0]) {
            for (std::int64_t i = 0; i < n; ++i) op[i] = v;
          } else {
            for (std::int64_t i = 0; i < n; ++i) op[i] = ap[i];
          }
        } else {
          for (std::int64_t i = 0; i < n; ++i) op[i * in[0]] = mp[i * in[2]] ? v : ap[i * in[1]];
        }
      });
    });
  }
  autograd::record("MaskedFillBackward0", {a}, {out}, {mask},
                   [sa = a.shape(), da = a.dtype()](const variable_list& s,
                                                    const variable_list& g) -> variable_list {
                     return {reduce_grad(masked_fill(g[0], s[0], 0.0), sa, da)};
                   });
  return out;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  FSDP_CHECK(a.shape() == b.shape(), ValueError,
             "allclose: shapes {} and {} differ (allclose needs equal shapes)",
             shape_str(a.shape()), shape_str(b.shape()));
  check_cpu(a, "allclose");
  check_cpu(b, "allclose");
  std::vector<double> va = a.to_vector(), vb = b.to_vector();
  for (std::size_t i = 0; i < va.size(); ++i) {
    double x = va[i], y = vb[i];
    if (x == y) continue;  // also equal infinities
    if (std::isnan(x) || std::isnan(y) || std::isinf(x) || std::isinf(y)) return false;
    if (std::fabs(x - y) > atol + rtol * std::fabs(y)) return false;
  }
  return true;
}

}  // namespace fsdp
