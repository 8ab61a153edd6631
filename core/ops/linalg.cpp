// Matrix products through OpenBLAS: mm, bmm, matmul (torch.matmul's rules) and linear.
// Operands are passed to gemm with transpose flags where their strides allow, so transposed
// views (weights, backward products) are never copied.
#include <cblas.h>

#include <cstring>
#include <optional>

#include "core/dispatch/intercept.h"
#include "core/ops/blas_gemm.h"
#include "core/ops/gemm16.h"
#include "core/ops/op_utils.h"
#include "core/parallel.h"

namespace fsdp {
using namespace ops_detail;

namespace {

struct BlasMatrix {
  CBLAS_TRANSPOSE trans = CblasNoTrans;
  blasint ld = 1;
};

// A row-major gemm operand for a rows x cols matrix with strides (s0, s1), or nothing if the
// layout needs a copy first.
std::optional<BlasMatrix> blas_layout(std::int64_t rows, std::int64_t cols, std::int64_t s0,
                                      std::int64_t s1) {
  if ((s1 == 1 || cols <= 1) && (s0 >= std::max<std::int64_t>(cols, 1) || rows <= 1))
    return BlasMatrix{CblasNoTrans,
                      static_cast<blasint>(rows <= 1 ? std::max<std::int64_t>(cols, 1) : s0)};
  if ((s0 == 1 || rows <= 1) && (s1 >= std::max<std::int64_t>(rows, 1) || cols <= 1))
    return BlasMatrix{CblasTrans,
                      static_cast<blasint>(cols <= 1 ? std::max<std::int64_t>(rows, 1) : s1)};
  return std::nullopt;
}

// The last two dims of t in a gemm-compatible layout (copied if needed).
Tensor blas_ready(const Tensor& t) {
  const auto nd = t.dim();
  auto l = blas_layout(t.size(nd - 2), t.size(nd - 1), t.stride(nd - 2), t.stride(nd - 1));
  if (l) return t;
  autograd::NoGradGuard ng;
  return clone(t.detach());
}

template <typename T>
void gemm(std::int64_t m, std::int64_t n, std::int64_t k, const T* a, std::int64_t as0,
          std::int64_t as1, const T* b, std::int64_t bs0, std::int64_t bs1, T* c, T beta) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (beta == T(0))
      for (std::int64_t i = 0; i < m * n; ++i) c[i] = T(0);
    return;
  }
  BlasMatrix la = *blas_layout(m, k, as0, as1);
  BlasMatrix lb = *blas_layout(k, n, bs0, bs1);
  blas_gemm<T>(la.trans == CblasTrans, lb.trans == CblasTrans, m, n, k, a, la.ld, b, lb.ld, beta, c,
               n);
}

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

// Batched product of [B, m, k] and [B, k, n] into a fresh [B, m, n] tensor (no autograd);
// 16-bit floats multiply in float32, block by block (gemm16.h).
Tensor batched_product(const Tensor& a_in, const Tensor& b_in) {
  DType dt = a_in.dtype();
  if (is_16bit(dt)) {
    const std::int64_t B = a_in.size(0), m = a_in.size(1), k = a_in.size(2), n = b_in.size(2);
    Tensor out = empty({B, m, n}, TensorOptions(dt, kCPU));
    const auto* pa = a_in.data<std::uint16_t>();
    const auto* pb = b_in.data<std::uint16_t>();
    auto* pc = out.data<std::uint16_t>();
    for (std::int64_t i = 0; i < B; ++i)
      gemm_16bit(dt, m, n, k, pa + i * a_in.stride(0), a_in.stride(1), a_in.stride(2),
                 pb + i * b_in.stride(0), b_in.stride(1), b_in.stride(2), nullptr, pc + i * m * n,
                 n);
    return out;
  }
  Tensor a = blas_ready(a_in), b = blas_ready(b_in);
  const std::int64_t B = a.size(0), m = a.size(1), k = a.size(2), n = b.size(2);
  Tensor out = empty({B, m, n}, TensorOptions(dt, kCPU));
  dispatch_float(dt, "bmm", [&]<typename T>() {
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* pc = out.data<T>();
    auto products = [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i)
        gemm<T>(m, n, k, pa + i * a.stride(0), a.stride(1), a.stride(2), pb + i * b.stride(0),
                b.stride(1), b.stride(2), pc + i * m * n, T(0));
    };
    // Small products (attention's per-head ones) run on the calling thread inside OpenBLAS, so
    // the batch is split across the intra-op pool; larger ones keep OpenBLAS's own threads.
    // A chunk gets at least 64K multiply-adds (tens of microseconds), worth waking a worker for.
    constexpr std::int64_t kMinChunkMacs = 65536;
    const std::int64_t macs = std::max<std::int64_t>(m * n * k, 1);
    if (B > 1 && macs <= kBlasSerialMacs)
      parallel_for(0, B, std::max<std::int64_t>(1, kMinChunkMacs / macs), products);
    else
      products(0, B);
  });
  return out;
}

// Linear's backward for 16-bit tensors in one pass over the output gradient
// (ops_detail::linear_backward_16bit), when nothing needs a graph of the backward itself and the
// weight is small enough; nothing otherwise (the caller then runs the separate products).
std::optional<variable_list> linear_backward_fused16(const variable_list& saved, const Tensor& g,
                                                     bool ri, bool rw, bool rb, std::int64_t in,
                                                     std::int64_t outf, const Shape& ishape) {
  const DType dt = g.dtype();
  if (!is_16bit(dt) || autograd::is_grad_enabled() || g.is_meta() ||
      in * outf > kLinearBackward16MaxWeight)
    return std::nullopt;
  const Tensor& x = saved[0];
  const Tensor& w = saved[1];
  if ((rw && (!x.defined() || x.dtype() != dt)) || (ri && (!w.defined() || w.dtype() != dt)))
    return std::nullopt;
  Tensor g2 = reshape(g, {-1, outf}).contiguous();
  const std::int64_t rows = g2.size(0);
  Tensor x2 = rw ? reshape(x, {-1, in}).contiguous() : Tensor();
  Tensor gx = ri ? empty({rows, in}, TensorOptions(dt, kCPU)) : Tensor();
  Tensor gw = rw ? empty({outf, in}, TensorOptions(dt, kCPU)) : Tensor();
  Tensor gb = rb ? empty({outf}, TensorOptions(dt, kCPU)) : Tensor();
  linear_backward_16bit(
      dt, rows, in, outf, g2.data<std::uint16_t>(), rw ? x2.data<std::uint16_t>() : nullptr,
      ri ? w.data<std::uint16_t>() : nullptr, ri ? w.stride(0) : 0, ri ? w.stride(1) : 0,
      ri ? gx.data<std::uint16_t>() : nullptr, rw ? gw.data<std::uint16_t>() : nullptr,
      rb ? gb.data<std::uint16_t>() : nullptr);
  return variable_list{ri ? reshape(gx, ishape) : Tensor(), gw, gb};
}

}  // namespace

Tensor mm(const Tensor& a, const Tensor& b) {
  FSDP_DISPATCH("mm", mm, a, b);
  bool meta = check_devices("mm", {&a, &b});
  FSDP_CHECK(a.dim() == 2 && b.dim() == 2, RuntimeError,
             "mm: expected 2-D tensors, got shapes {} and {}", shape_str(a.shape()),
             shape_str(b.shape()));
  FSDP_CHECK(a.size(1) == b.size(0), RuntimeError,
             "mm: shapes {} and {} cannot be multiplied ({} != {})", shape_str(a.shape()),
             shape_str(b.shape()), a.size(1), b.size(0));
  check_same_dtype("mm", a, b);
  Tensor out;
  if (meta) {
    out = empty({a.size(0), b.size(1)}, TensorOptions(a.dtype(), kMeta));
  } else {
    Tensor a3 =
        make_view(a, {1, a.size(0), a.size(1)}, {0, a.stride(0), a.stride(1)}, a.storage_offset());
    Tensor b3 =
        make_view(b, {1, b.size(0), b.size(1)}, {0, b.stride(0), b.stride(1)}, b.storage_offset());
    Tensor r = batched_product(a3, b3);
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
  bool meta = check_devices("bmm", {&a, &b});
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
  Tensor out = meta ? empty({a.size(0), a.size(1), b.size(2)}, TensorOptions(a.dtype(), kMeta))
                    : batched_product(a, b);
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
  check_devices("matmul", {&a, &b});
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
    // Fold a's batch dims into rows: one gemm.
    Shape out_shape(a.shape().begin(), a.shape().end() - 1);
    Tensor rows = reshape(a, {-1, ka});
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
  bool meta = check_devices("linear", {&input, &weight, &bias});
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
    FSDP_CHECK(bias.dim() == 1 && bias.size(0) == outf, RuntimeError,
               "linear: bias of shape {} does not match out_features {} (weight shape {})",
               shape_str(bias.shape()), outf, shape_str(weight.shape()));
    check_same_dtype("linear", input, bias);
  }
  Shape out_shape(input.shape().begin(), input.shape().end() - 1);
  out_shape.push_back(outf);
  Tensor out;
  const DType dt = input.dtype();
  if (meta) {
    out = empty(out_shape, TensorOptions(dt, kMeta));
  } else if (is_16bit(dt)) {
    autograd::NoGradGuard ng;
    Tensor x = reshape(input.detach(), {-1, in});
    Tensor bc = bias.defined() ? bias.detach().contiguous() : Tensor();
    Tensor o = empty({x.size(0), outf}, TensorOptions(dt, kCPU));
    // out = x @ weight^T (+ bias): weight^T is read through its strides.
    gemm_16bit(dt, x.size(0), outf, in, x.data<std::uint16_t>(), x.stride(0), x.stride(1),
               weight.data<std::uint16_t>(), weight.stride(1), weight.stride(0),
               bc.defined() ? bc.data<std::uint16_t>() : nullptr, o.data<std::uint16_t>(), outf);
    out = reshape(o, out_shape);
  } else {
    autograd::NoGradGuard ng;
    DType ct = dt;
    Tensor x = blas_ready(reshape(input.detach(), {-1, in}));
    Tensor w = blas_ready(weight.detach());
    const std::int64_t rows = x.size(0);
    Tensor o = empty({rows, outf}, TensorOptions(ct, kCPU));
    Tensor bc = bias.defined() ? bias.detach().contiguous() : Tensor();
    dispatch_float(ct, "linear", [&]<typename T>() {
      // The bias in every row (a row copy: the generic broadcasting copy_ was 2% of a step).
      if (bc.defined())
        for (std::int64_t r = 0; r < rows; ++r)
          std::memcpy(o.data<T>() + r * outf, bc.data<T>(),
                      sizeof(T) * static_cast<std::size_t>(outf));
      // out = x @ w^T (+ bias already in out, beta = 1): w^T is read through its strides.
      gemm<T>(rows, outf, in, x.data<T>(), x.stride(0), x.stride(1), w.data<T>(), w.stride(1),
              w.stride(0), o.data<T>(), bias.defined() ? T(1) : T(0));
    });
    out = reshape(o, out_shape);
  }
  bool ri = input.requires_grad(), rw = weight.requires_grad();
  bool rb = bias.defined() && bias.requires_grad();
  autograd::record(
      "LinearBackward0", {input, weight, bias}, {out},
      {rw ? input : Tensor(), ri ? weight : Tensor()},
      [ri, rw, rb, in, outf, ishape = input.shape()](const variable_list& s,
                                                     const variable_list& g) -> variable_list {
        if (auto fused = linear_backward_fused16(s, g[0], ri, rw, rb, in, outf, ishape))
          return *fused;
        Tensor g2 = reshape(g[0], {-1, outf});
        Tensor gi = ri ? reshape(mm(g2, s[1]), ishape) : Tensor();
        Tensor gw = rw ? mm(transpose(g2, 0, 1), reshape(s[0], {-1, in})) : Tensor();
        Tensor gb = rb ? sum(g2, {0}) : Tensor();
        return {gi, gw, gb};
      });
  return out;
}

}  // namespace fsdp
