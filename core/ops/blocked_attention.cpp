#include "core/ops/blocked_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/functional/vec_math.h"
#include "core/ops/blas_gemm.h"
#include "core/ops/op_utils.h"

namespace fsdp {
using namespace ops_detail;

namespace {

constexpr std::int64_t kQueryBlock = 64;
constexpr std::int64_t kKeyBlock = 128;

struct Dims {
  std::int64_t B, L, S, D, Dv;
  std::int64_t mask_batch_stride;  // 0 when one (L, S) mask serves every batch entry
};

// True when the mask removes every score of the block (a causal mask's upper blocks): its
// probabilities are all zero, so forward and backward skip it.
template <typename T>
bool block_masked(const Dims& d, const T* mask, std::int64_t b, std::int64_t i0, std::int64_t nq,
                  std::int64_t j0, std::int64_t nk) {
  if (!mask) return false;
  const T* mb = mask + b * d.mask_batch_stride;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  for (std::int64_t i = 0; i < nq; ++i) {
    const T* mr = mb + (i0 + i) * d.S + j0;
    for (std::int64_t j = 0; j < nk; ++j)
      if (mr[j] != neg_inf) return false;
  }
  return true;
}

// Scores of queries [i0, i0 + nq) against keys [j0, j0 + nk) of batch entry b, mask added.
template <typename T>
void block_scores(const Dims& d, const T* q, const T* k, const T* mask, std::int64_t b,
                  std::int64_t i0, std::int64_t nq, std::int64_t j0, std::int64_t nk, T* s) {
  blas_gemm<T>(false, true, nq, nk, d.D, q + (b * d.L + i0) * d.D, d.D, k + (b * d.S + j0) * d.D,
               d.D, T(0), s, nk);
  if (!mask) return;
  const T* mb = mask + b * d.mask_batch_stride;
  for (std::int64_t i = 0; i < nq; ++i) {
    const T* mr = mb + (i0 + i) * d.S + j0;
    T* sr = s + i * nk;
    for (std::int64_t j = 0; j < nk; ++j) sr[j] += mr[j];
  }
}

template <typename T>
void forward(const Dims& d, const T* q, const T* k, const T* v, const T* mask, T* out, T* lse) {
  std::vector<T> s(static_cast<std::size_t>(kQueryBlock * kKeyBlock));
  std::vector<T> row_max(kQueryBlock), row_sum(kQueryBlock);
  for (std::int64_t b = 0; b < d.B; ++b)
    for (std::int64_t i0 = 0; i0 < d.L; i0 += kQueryBlock) {
      const std::int64_t nq = std::min(kQueryBlock, d.L - i0);
      T* o = out + (b * d.L + i0) * d.Dv;
      std::fill(o, o + nq * d.Dv, T(0));
      std::fill(row_max.begin(), row_max.end(), -std::numeric_limits<T>::infinity());
      std::fill(row_sum.begin(), row_sum.end(), T(0));
      for (std::int64_t j0 = 0; j0 < d.S; j0 += kKeyBlock) {
        const std::int64_t nk = std::min(kKeyBlock, d.S - j0);
        if (block_masked(d, mask, b, i0, nq, j0, nk)) continue;
        block_scores(d, q, k, mask, b, i0, nq, j0, nk, s.data());
        for (std::int64_t i = 0; i < nq; ++i) {
          T* sr = s.data() + i * nk;
          const T m_new = std::max(row_max[i], functional::row_max(sr, nk));
          // A row masked so far keeps shift 0: exp(-inf) = 0, no inf - inf.
          const T shift = std::isinf(m_new) && m_new < 0 ? T(0) : m_new;
          for (std::int64_t j = 0; j < nk; ++j) sr[j] = functional::fast_exp(sr[j] - shift);
          const T part =
              static_cast<T>(functional::row_sum<T>(nk, [sr](std::int64_t j) { return sr[j]; }));
          const T alpha = functional::fast_exp(row_max[i] - shift);
          row_sum[i] = row_sum[i] * alpha + part;
          row_max[i] = m_new;
          T* orow = o + i * d.Dv;
          for (std::int64_t c = 0; c < d.Dv; ++c) orow[c] *= alpha;
        }
        blas_gemm<T>(false, false, nq, d.Dv, nk, s.data(), nk, v + (b * d.S + j0) * d.Dv, d.Dv,
                     T(1), o, d.Dv);
      }
      for (std::int64_t i = 0; i < nq; ++i) {
        const T inv = T(1) / row_sum[i];  // a fully masked row gives nan, as softmax does
        T* orow = o + i * d.Dv;
        for (std::int64_t c = 0; c < d.Dv; ++c) orow[c] *= inv;
        lse[b * d.L + i0 + i] = row_max[i] + std::log(row_sum[i]);
      }
    }
}

// With P = exp(S - lse) and Drow = sum(dO * O) per row:
//   dV = P^T dO,  dS = P * (dO V^T - Drow),  dQ = dS K,  dK = dS^T Q.
template <typename T>
void backward(const Dims& d, const T* q, const T* k, const T* v, const T* mask, const T* out,
              const T* lse, const T* dout, T* dq, T* dk, T* dv) {
  std::vector<T> p(static_cast<std::size_t>(kQueryBlock * kKeyBlock)), dp(p.size());
  std::vector<T> drow(static_cast<std::size_t>(d.L));
  for (std::int64_t b = 0; b < d.B; ++b) {
    for (std::int64_t i = 0; i < d.L; ++i) {
      const T* o = out + (b * d.L + i) * d.Dv;
      const T* g = dout + (b * d.L + i) * d.Dv;
      drow[i] = static_cast<T>(
          functional::row_sum<T>(d.Dv, [o, g](std::int64_t c) { return o[c] * g[c]; }));
    }
    for (std::int64_t i0 = 0; i0 < d.L; i0 += kQueryBlock) {
      const std::int64_t nq = std::min(kQueryBlock, d.L - i0);
      const T* qb = q + (b * d.L + i0) * d.D;
      const T* gb = dout + (b * d.L + i0) * d.Dv;
      for (std::int64_t j0 = 0; j0 < d.S; j0 += kKeyBlock) {
        const std::int64_t nk = std::min(kKeyBlock, d.S - j0);
        if (block_masked(d, mask, b, i0, nq, j0, nk)) continue;
        block_scores(d, q, k, mask, b, i0, nq, j0, nk, p.data());
        for (std::int64_t i = 0; i < nq; ++i) {
          T* pr = p.data() + i * nk;
          const T l = lse[b * d.L + i0 + i];
          for (std::int64_t j = 0; j < nk; ++j) pr[j] = functional::fast_exp(pr[j] - l);
        }
        const T* kb = k + (b * d.S + j0) * d.D;
        const T* vb = v + (b * d.S + j0) * d.Dv;
        blas_gemm<T>(true, false, nk, d.Dv, nq, p.data(), nk, gb, d.Dv, T(1),
                     dv + (b * d.S + j0) * d.Dv, d.Dv);
        blas_gemm<T>(false, true, nq, nk, d.Dv, gb, d.Dv, vb, d.Dv, T(0), dp.data(), nk);
        for (std::int64_t i = 0; i < nq; ++i) {
          const T dr = drow[i0 + i];
          T* pr = p.data() + i * nk;
          const T* dpr = dp.data() + i * nk;
          for (std::int64_t j = 0; j < nk; ++j) pr[j] = pr[j] * (dpr[j] - dr);  // dS in p
        }
        blas_gemm<T>(false, false, nq, d.D, nk, p.data(), nk, kb, d.D, T(1),
                     dq + (b * d.L + i0) * d.D, d.D);
        blas_gemm<T>(true, false, nk, d.D, nq, p.data(), nk, qb, d.D, T(1),
                     dk + (b * d.S + j0) * d.D, d.D);
      }
    }
  }
}

}  // namespace

Tensor blocked_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                         const Tensor& mask_in) {
  const char* op = "blocked_attention";
  FSDP_CHECK(q_in.dim() == 3 && k_in.dim() == 3 && v_in.dim() == 3 &&
                 q_in.size(0) == k_in.size(0) && k_in.size(0) == v_in.size(0) &&
                 q_in.size(2) == k_in.size(2) && k_in.size(1) == v_in.size(1),
             RuntimeError,
             "{}: expected q (B, L, D), k (B, S, D) and v (B, S, Dv), got shapes {}, {} and {}", op,
             shape_str(q_in.shape()), shape_str(k_in.shape()), shape_str(v_in.shape()));
  const DType dt = q_in.dtype();
  FSDP_CHECK((dt == DType::Float32 || dt == DType::Float64) && k_in.dtype() == dt &&
                 v_in.dtype() == dt && (!mask_in.defined() || mask_in.dtype() == dt),
             TypeError,
             "{}: expected q, k, v (and mask) of one dtype, float32 or float64; got {}, {}, {} "
             "(q shape {})",
             op, dtype_name(dt), dtype_name(k_in.dtype()), dtype_name(v_in.dtype()),
             shape_str(q_in.shape()));
  FSDP_CHECK(!check_devices(op, {&q_in, &k_in, &v_in, &mask_in}), NotImplementedError,
             "{}: meta tensors are not supported (q shape {})", op, shape_str(q_in.shape()));
  Dims d{q_in.size(0), q_in.size(1), k_in.size(1), q_in.size(2), v_in.size(2), 0};
  Tensor mask;
  if (mask_in.defined()) {
    const bool ok = (mask_in.dim() == 2 && mask_in.size(0) == d.L && mask_in.size(1) == d.S) ||
                    (mask_in.dim() == 3 && (mask_in.size(0) == 1 || mask_in.size(0) == d.B) &&
                     mask_in.size(1) == d.L && mask_in.size(2) == d.S);
    FSDP_CHECK(ok, RuntimeError,
               "{}: mask of shape {} does not fit scores of shape ({}, {}, {}); expected (L, S), "
               "(1, L, S) or (B, L, S)",
               op, shape_str(mask_in.shape()), d.B, d.L, d.S);
    mask = mask_in.detach().contiguous();
    d.mask_batch_stride = mask.dim() == 3 && mask.size(0) == d.B && d.B > 1 ? d.L * d.S : 0;
  }
  Tensor q = q_in.detach().contiguous(), k = k_in.detach().contiguous();
  Tensor v = v_in.detach().contiguous();
  Tensor out = empty({d.B, d.L, d.Dv}, TensorOptions(dt, kCPU));
  Tensor lse = empty({d.B, d.L}, TensorOptions(dt, kCPU));
  dispatch_float(dt, op, [&]<typename T>() {
    forward<T>(d, q.data<T>(), k.data<T>(), v.data<T>(), mask.defined() ? mask.data<T>() : nullptr,
               out.data<T>(), lse.data<T>());
  });
  autograd::record(
      "BlockedAttentionBackward", {q_in, k_in, v_in}, {out}, {q, k, v, out, lse},
      [d, dt, mask, op](const variable_list& s, const variable_list& g) -> variable_list {
        if (!g[0].defined()) return {Tensor(), Tensor(), Tensor()};
        Tensor dout = g[0].contiguous();
        Tensor dq = zeros(s[0].shape(), TensorOptions(dt, kCPU));
        Tensor dk = zeros(s[1].shape(), TensorOptions(dt, kCPU));
        Tensor dv = zeros(s[2].shape(), TensorOptions(dt, kCPU));
        dispatch_float(dt, op, [&]<typename T>() {
          backward<T>(d, s[0].data<T>(), s[1].data<T>(), s[2].data<T>(),
                      mask.defined() ? mask.data<T>() : nullptr, s[3].data<T>(), s[4].data<T>(),
                      dout.data<T>(), dq.data<T>(), dk.data<T>(), dv.data<T>());
        });
        return {dq, dk, dv};
      });
  return out;
}

}  // namespace fsdp
