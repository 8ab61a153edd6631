// The CPU attention kernels: split_heads' moves between the packed projection and per-head
// tensors (moved from core/ops/attention_heads.cpp) and blocked attention's forward and backward
// (moved from core/ops/blocked_attention.cpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/functional/vec_math.h"
#include "core/kernels/cpu/blas_gemm.h"
#include "core/kernels/cpu/cpu_kernels.h"
#include "core/ops/op_utils.h"
#include "core/parallel.h"

namespace fsdp::cpu {
using namespace ops_detail;

namespace {

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

constexpr std::int64_t kQueryBlock = 64;
constexpr std::int64_t kKeyBlock = 128;

using Dims = AttentionDims;

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

void split_heads(const std::vector<Tensor>& out, const Tensor& src, const HeadsLayout& s,
                 double first_divisor) {
  dispatch_heads(src.dtype(), [&]<typename T>() {
    std::vector<T*> dst;
    for (auto& t : out) dst.push_back(t.data<T>());
    move_heads<T, false>(src.data<T>(), dst, s, static_cast<compute_t<T>>(first_divisor));
  });
}

void merge_heads(const Tensor& grad, const std::vector<Tensor>& parts_in, const HeadsLayout& s,
                 double first_divisor) {
  dispatch_heads(grad.dtype(), [&]<typename T>() {
    std::vector<T*> src;
    for (auto& t : parts_in) src.push_back(t.defined() ? t.data<T>() : nullptr);
    move_heads<T, true>(grad.data<T>(), src, s, static_cast<compute_t<T>>(first_divisor));
  });
}

void blocked_attention(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                       const Tensor& v, const Tensor& mask, const AttentionDims& d) {
  dispatch_float(q.dtype(), "blocked_attention", [&]<typename T>() {
    forward<T>(d, q.data<T>(), k.data<T>(), v.data<T>(), mask.defined() ? mask.data<T>() : nullptr,
               out.data<T>(), lse.data<T>());
  });
}

void blocked_attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& mask, const Tensor& out, const Tensor& lse,
                                const Tensor& dout, const AttentionDims& d) {
  dispatch_float(q.dtype(), "blocked_attention", [&]<typename T>() {
    backward<T>(d, q.data<T>(), k.data<T>(), v.data<T>(), mask.defined() ? mask.data<T>() : nullptr,
                out.data<T>(), lse.data<T>(), dout.data<T>(), dq.data<T>(), dk.data<T>(),
                dv.data<T>());
  });
}

}  // namespace fsdp::cpu
