// The CPU matrix products through OpenBLAS (moved from core/ops/linalg.cpp). Operands are passed
// to gemm with transpose flags where their strides allow, so transposed views (weights, backward
// products) are never copied; 16-bit floats multiply in float32 block by block (gemm16.h).
#include <cblas.h>

#include <cstring>
#include <optional>

#include "core/kernels/cpu/blas_gemm.h"
#include "core/kernels/cpu/cpu_kernels.h"
#include "core/kernels/cpu/gemm16.h"
#include "core/ops/op_utils.h"
#include "core/parallel.h"

namespace fsdp::cpu {
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

bool is_16bit(DType t) {
  return t == DType::Float16 || t == DType::BFloat16;
}

const std::uint16_t* bits(const Tensor& t) {
  return t.defined() ? t.data<std::uint16_t>() : nullptr;
}

}  // namespace

void bmm(const Tensor& out, const Tensor& a_in, const Tensor& b_in) {
  DType dt = a_in.dtype();
  if (is_16bit(dt)) {
    const std::int64_t B = a_in.size(0), m = a_in.size(1), k = a_in.size(2), n = b_in.size(2);
    const auto* pa = a_in.data<std::uint16_t>();
    const auto* pb = b_in.data<std::uint16_t>();
    auto* pc = out.data<std::uint16_t>();
    for (std::int64_t i = 0; i < B; ++i)
      gemm_16bit(dt, m, n, k, pa + i * a_in.stride(0), a_in.stride(1), a_in.stride(2),
                 pb + i * b_in.stride(0), b_in.stride(1), b_in.stride(2), nullptr, pc + i * m * n,
                 n);
    return;
  }
  Tensor a = blas_ready(a_in), b = blas_ready(b_in);
  const std::int64_t B = a.size(0), m = a.size(1), k = a.size(2), n = b.size(2);
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
}

void linear(const Tensor& o, const Tensor& x_in, const Tensor& weight, const Tensor& bc) {
  const DType dt = x_in.dtype();
  const std::int64_t in = weight.size(1), outf = weight.size(0);
  if (is_16bit(dt)) {
    // out = x @ weight^T (+ bias): weight^T is read through its strides.
    gemm_16bit(dt, x_in.size(0), outf, in, x_in.data<std::uint16_t>(), x_in.stride(0),
               x_in.stride(1), weight.data<std::uint16_t>(), weight.stride(1), weight.stride(0),
               bits(bc), o.data<std::uint16_t>(), outf);
    return;
  }
  Tensor x = blas_ready(x_in);
  Tensor w = blas_ready(weight);
  const std::int64_t rows = x.size(0);
  dispatch_float(dt, "linear", [&]<typename T>() {
    // The bias in every row (a row copy: the generic broadcasting copy_ was 2% of a step).
    if (bc.defined())
      for (std::int64_t r = 0; r < rows; ++r)
        std::memcpy(o.data<T>() + r * outf, bc.data<T>(),
                    sizeof(T) * static_cast<std::size_t>(outf));
    // out = x @ w^T (+ bias already in out, beta = 1): w^T is read through its strides.
    gemm<T>(rows, outf, in, x.data<T>(), x.stride(0), x.stride(1), w.data<T>(), w.stride(1),
            w.stride(0), o.data<T>(), bc.defined() ? T(1) : T(0));
  });
}

void linear_backward16(const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& g2,
                       const Tensor& x2, const Tensor& w, std::int64_t in) {
  const bool ri = gx.defined();
  auto out_bits = [](const Tensor& t) {
    return t.defined() ? t.data<std::uint16_t>() : static_cast<std::uint16_t*>(nullptr);
  };
  linear_backward_16bit(g2.dtype(), g2.size(0), in, g2.size(1), g2.data<std::uint16_t>(), bits(x2),
                        ri ? w.data<std::uint16_t>() : nullptr, ri ? w.stride(0) : 0,
                        ri ? w.stride(1) : 0, out_bits(gx), out_bits(gw), out_bits(gb));
}

}  // namespace fsdp::cpu
