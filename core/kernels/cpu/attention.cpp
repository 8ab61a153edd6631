// The CPU attention kernels: split_heads' moves between the packed projection and per-head
// tensors (moved from core/ops/attention_heads.cpp) and blocked attention's forward and backward,
// the one kernel of blocked_attention and scaled_dot_product_attention (scale, causal blocks
// skipped, grouped-query heads, strided operands).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/dtype_convert.h"
#include "core/functional/functional_common.h"
#include "core/functional/vec_math.h"
#include "core/kernels/cpu/blas_gemm.h"
#include "core/kernels/cpu/cpu_kernels.h"
#include "core/kernels/cpu/row_kernels.h"
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

constexpr std::int64_t kQueryBlock = 64;
constexpr std::int64_t kKeyBlock = 128;

using Dims = AttentionDims;

// One (batch, query head)'s operands: its kv head's k and v (grouped-query attention), its mask
// rows (null: none) and the row strides of each.
template <typename T>
struct Head {
  const T *q, *k, *v, *mask;
};

template <typename T>
Head<T> head_of(const Dims& d, const T* q, const T* k, const T* v, const T* mask, std::int64_t b,
                std::int64_t h) {
  const std::int64_t kv = h / (d.H / d.KV);
  return {q + b * d.q.batch + h * d.q.head, k + b * d.k.batch + kv * d.k.head,
          v + b * d.v.batch + kv * d.v.head,
          mask ? mask + b * d.mask.batch + h * d.mask.head : nullptr};
}

// The keys queries [i0, i0 + nq) may see: all of them, or up to the last query's position
// (causal), so the blocks above the diagonal are never computed.
std::int64_t key_end(const Dims& d, std::int64_t i0, std::int64_t nq) {
  return d.causal ? std::min(d.S, i0 + nq) : d.S;
}

// True when the mask removes every score of the block (a causal mask's upper blocks): its
// probabilities are all zero, so forward and backward skip it.
template <typename T>
bool block_masked(const Dims& d, const T* mask, std::int64_t i0, std::int64_t nq, std::int64_t j0,
                  std::int64_t nk) {
  if (!mask) return false;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  for (std::int64_t i = 0; i < nq; ++i) {
    const T* mr = mask + (i0 + i) * d.mask.row + j0;
    for (std::int64_t j = 0; j < nk; ++j)
      if (mr[j] != neg_inf) return false;
  }
  return true;
}

// Scores of queries [i0, i0 + nq) against keys [j0, j0 + nk): scale q k^T + mask, -inf above
// the causal diagonal.
template <typename T>
void block_scores(const Dims& d, const Head<T>& hd, std::int64_t i0, std::int64_t nq,
                  std::int64_t j0, std::int64_t nk, T* s) {
  blas_gemm<T>(false, true, nq, nk, d.D, hd.q + i0 * d.q.row, d.q.row, hd.k + j0 * d.k.row, d.k.row,
               T(0), s, nk);
  const T scale = static_cast<T>(d.scale);
  const bool diagonal = d.causal && j0 + nk - 1 > i0;
  if (scale == T(1) && !hd.mask && !diagonal) return;
  for (std::int64_t i = 0; i < nq; ++i) {
    T* sr = s + i * nk;
    if (scale != T(1))
      for (std::int64_t j = 0; j < nk; ++j) sr[j] *= scale;
    if (hd.mask) {
      const T* mr = hd.mask + (i0 + i) * d.mask.row + j0;
      for (std::int64_t j = 0; j < nk; ++j) sr[j] += mr[j];
    }
    if (diagonal)
      for (std::int64_t j = std::max<std::int64_t>(0, i0 + i + 1 - j0); j < nk; ++j)
        sr[j] = -std::numeric_limits<T>::infinity();
  }
}

// One block of queries of one head: the online softmax over its key blocks. s, row_max and
// row_sum are the caller's scratch.
template <typename T>
void forward_block(const Dims& d, const Head<T>& hd, std::int64_t i0, T* o, T* lse, T* s,
                   T* row_max, T* row_sum) {
  const std::int64_t nq = std::min(kQueryBlock, d.L - i0);
  std::fill(o, o + nq * d.Dv, T(0));
  std::fill(row_max, row_max + nq, -std::numeric_limits<T>::infinity());
  std::fill(row_sum, row_sum + nq, T(0));
  const std::int64_t end = key_end(d, i0, nq);
  for (std::int64_t j0 = 0; j0 < end; j0 += kKeyBlock) {
    const std::int64_t nk = std::min(kKeyBlock, end - j0);
    if (block_masked(d, hd.mask, i0, nq, j0, nk)) continue;
    block_scores(d, hd, i0, nq, j0, nk, s);
    for (std::int64_t i = 0; i < nq; ++i) {
      T* sr = s + i * nk;
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
    blas_gemm<T>(false, false, nq, d.Dv, nk, s, nk, hd.v + j0 * d.v.row, d.v.row, T(1), o, d.Dv);
  }
  for (std::int64_t i = 0; i < nq; ++i) {
    // A row with no key left: nan as softmax gives, or 0 as torch's attention does.
    const T inv = d.masked_rows_zero && row_sum[i] == T(0) ? T(0) : T(1) / row_sum[i];
    T* orow = o + i * d.Dv;
    for (std::int64_t c = 0; c < d.Dv; ++c) orow[c] *= inv;
    lse[i] = row_max[i] + std::log(row_sum[i]);
  }
}

// (batch, head, query block) triples across the intra-op threads.
template <typename T>
void forward(const Dims& d, const T* q, const T* k, const T* v, const T* mask, T* out, T* lse) {
  const std::int64_t blocks = (d.L + kQueryBlock - 1) / kQueryBlock;
  parallel_for(0, d.B * d.H * blocks, 1, [&](std::int64_t t0, std::int64_t t1) {
    std::vector<T> s(static_cast<std::size_t>(kQueryBlock * kKeyBlock));
    std::vector<T> row_max(kQueryBlock), row_sum(kQueryBlock);
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t bh = t / blocks, i0 = (t % blocks) * kQueryBlock;
      const Head<T> hd = head_of(d, q, k, v, mask, bh / d.H, bh % d.H);
      forward_block(d, hd, i0, out + (bh * d.L + i0) * d.Dv, lse + bh * d.L + i0, s.data(),
                    row_max.data(), row_sum.data());
    }
  });
}

// Scratch of one backward task.
template <typename T>
struct BackwardScratch {
  std::vector<T> p, dp, drow;
  BackwardScratch(const Dims& d)
      : p(static_cast<std::size_t>(kQueryBlock * kKeyBlock)),
        dp(p.size()),
        drow(static_cast<std::size_t>(d.L)) {}
};

// One query head: with P = exp(S - lse) and Drow = sum(dO * O) per row,
//   dV = P^T dO,  dS = P * (dO V^T - Drow),  dQ = scale dS K,  dK = scale dS^T Q,
// dK and dV added into the head's kv head.
template <typename T>
void backward_head(const Dims& d, const Head<T>& hd, const T* out, const T* lse, const T* dout,
                   T* dq, T* dk, T* dv, BackwardScratch<T>& w) {
  const T scale = static_cast<T>(d.scale);
  for (std::int64_t i = 0; i < d.L; ++i) {
    const T* o = out + i * d.Dv;
    const T* g = dout + i * d.Dv;
    w.drow[static_cast<std::size_t>(i)] = static_cast<T>(
        functional::row_sum<T>(d.Dv, [o, g](std::int64_t c) { return o[c] * g[c]; }));
  }
  T* p = w.p.data();
  T* dp = w.dp.data();
  for (std::int64_t i0 = 0; i0 < d.L; i0 += kQueryBlock) {
    const std::int64_t nq = std::min(kQueryBlock, d.L - i0);
    const T* gb = dout + i0 * d.Dv;
    const std::int64_t end = key_end(d, i0, nq);
    for (std::int64_t j0 = 0; j0 < end; j0 += kKeyBlock) {
      const std::int64_t nk = std::min(kKeyBlock, end - j0);
      if (block_masked(d, hd.mask, i0, nq, j0, nk)) continue;
      block_scores(d, hd, i0, nq, j0, nk, p);
      for (std::int64_t i = 0; i < nq; ++i) {
        T* pr = p + i * nk;
        const T l = lse[i0 + i];
        if (d.masked_rows_zero && std::isinf(l))  // a row with no key: no gradient
          std::fill(pr, pr + nk, T(0));
        else
          for (std::int64_t j = 0; j < nk; ++j) pr[j] = functional::fast_exp(pr[j] - l);
      }
      const T* kb = hd.k + j0 * d.k.row;
      const T* vb = hd.v + j0 * d.v.row;
      blas_gemm<T>(true, false, nk, d.Dv, nq, p, nk, gb, d.Dv, T(1), dv + j0 * d.Dv, d.Dv);
      blas_gemm<T>(false, true, nq, nk, d.Dv, gb, d.Dv, vb, d.v.row, T(0), dp, nk);
      for (std::int64_t i = 0; i < nq; ++i) {
        const T dr = w.drow[static_cast<std::size_t>(i0 + i)];
        T* pr = p + i * nk;
        const T* dpr = dp + i * nk;
        for (std::int64_t j = 0; j < nk; ++j) pr[j] = pr[j] * (dpr[j] - dr) * scale;  // dS
      }
      blas_gemm<T>(false, false, nq, d.D, nk, p, nk, kb, d.k.row, T(1), dq + i0 * d.D, d.D);
      blas_gemm<T>(true, false, nk, d.D, nq, p, nk, hd.q + i0 * d.q.row, d.q.row, T(1),
                   dk + j0 * d.D, d.D);
    }
  }
}

// (batch, kv head) pairs across the intra-op threads: each owns its kv head's dk and dv and the
// dq of the query heads that share it, so no two threads write one gradient.
template <typename T>
void backward(const Dims& d, const T* q, const T* k, const T* v, const T* mask, const T* out,
              const T* lse, const T* dout, T* dq, T* dk, T* dv) {
  const std::int64_t group = d.H / d.KV;
  parallel_for(0, d.B * d.KV, 1, [&](std::int64_t t0, std::int64_t t1) {
    BackwardScratch<T> w(d);
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t b = t / d.KV, kv = t % d.KV;
      // The loops add into the gradients: this task's parts start at zero.
      std::fill_n(dk + t * d.S * d.D, d.S * d.D, T(0));
      std::fill_n(dv + t * d.S * d.Dv, d.S * d.Dv, T(0));
      for (std::int64_t h = kv * group; h < (kv + 1) * group; ++h) {
        const std::int64_t bh = b * d.H + h;
        std::fill_n(dq + bh * d.L * d.D, d.L * d.D, T(0));
        backward_head(d, head_of(d, q, k, v, mask, b, h), out + bh * d.L * d.Dv, lse + bh * d.L,
                      dout + bh * d.L * d.Dv, dq + bh * d.L * d.D, dk + t * d.S * d.D,
                      dv + t * d.S * d.Dv, w);
      }
    }
  });
}

}  // namespace

void split_heads(const std::vector<Tensor>& out, const Tensor& src, const HeadsLayout& s,
                 double first_divisor) {
  functional::dispatch_floating(src.dtype(), "split_heads", [&]<typename T>() {
    std::vector<T*> dst;
    for (auto& t : out) dst.push_back(t.data<T>());
    move_heads<T, false>(src.data<T>(), dst, s, static_cast<compute_t<T>>(first_divisor));
  });
}

void merge_heads(const Tensor& grad, const std::vector<Tensor>& parts_in, const HeadsLayout& s,
                 double first_divisor) {
  functional::dispatch_floating(grad.dtype(), "merge_heads", [&]<typename T>() {
    std::vector<T*> src;
    for (auto& t : parts_in) src.push_back(t.defined() ? t.data<T>() : nullptr);
    move_heads<T, true>(grad.data<T>(), src, s, static_cast<compute_t<T>>(first_divisor));
  });
}

namespace {

// 16-bit operands (contiguous) are computed in float32: widened whole, the results rounded once,
// as the float32 path of scaled_dot_product_attention did with converted copies.
std::vector<float> widened(const Tensor& t) {
  FSDP_CHECK(t.numel() == 0 || t.is_contiguous(), RuntimeError,
             "blocked_attention: a 16-bit operand must be contiguous (shape {})",
             shape_str(t.shape()));
  std::vector<float> f(static_cast<std::size_t>(t.numel()));
  convert_contiguous(f.data(), DType::Float32, t.data<std::uint16_t>(), t.dtype(), t.numel());
  return f;
}

void narrow_into(const Tensor& t, const std::vector<float>& f) {
  convert_contiguous(t.data<std::uint16_t>(), t.dtype(), f.data(), DType::Float32, t.numel());
}

const float* float_mask(const Tensor& mask) {
  return mask.defined() ? mask.data<float>() : nullptr;
}

// The loops below read and write out, dout, dq, dk and dv densely and widen 16-bit q, k and v
// whole; views (packed_causal_attention's heads of one projection) go through contiguous
// copies, q, k and v with their strides in `d` changed to match.
bool dense_operands(const Tensor& q, const Tensor& k, const Tensor& v,
                    std::initializer_list<const Tensor*> dense) {
  // An empty tensor is as good as dense (and its contiguous() may keep its strides).
  auto is_dense = [](const Tensor& t) { return t.numel() == 0 || t.is_contiguous(); };
  for (const Tensor* t : dense)
    if (t->defined() && !is_dense(*t)) return false;
  return !functional::is_16bit_float(q.dtype()) || (is_dense(q) && is_dense(k) && is_dense(v));
}

// A contiguous tensor for the loops to write in t's place.
Tensor fresh(const Tensor& t) {
  return empty(t.shape(), TensorOptions(t.dtype(), t.device()));
}

// q, k and v as the loops read them: 16-bit ones contiguous, float ones through their strides.
struct DenseOperands {
  DenseOperands(const AttentionDims& dims, const Tensor& q_in, const Tensor& k_in,
                const Tensor& v_in)
      : d(dims), q(dense(q_in)), k(dense(k_in)), v(dense(v_in)) {
    d.q = attention_strides(q);
    d.k = attention_strides(k);
    d.v = attention_strides(v);
  }
  static Tensor dense(const Tensor& t) {
    return functional::is_16bit_float(t.dtype()) ? t.contiguous() : t;
  }
  AttentionDims d;
  Tensor q, k, v;
};

}  // namespace

void blocked_attention(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                       const Tensor& v, const Tensor& mask, const AttentionDims& d) {
  if (!dense_operands(q, k, v, {&out})) {
    const DenseOperands c(d, q, k, v);
    const Tensor oc = fresh(out);
    blocked_attention(oc, lse, c.q, c.k, c.v, mask, c.d);
    copy(out, oc);
    return;
  }
  if (functional::is_16bit_float(q.dtype())) {
    const std::vector<float> qf = widened(q), kf = widened(k), vf = widened(v);
    std::vector<float> of(static_cast<std::size_t>(out.numel()));
    forward<float>(d, qf.data(), kf.data(), vf.data(), float_mask(mask), of.data(),
                   lse.data<float>());
    narrow_into(out, of);
    return;
  }
  dispatch_float(q.dtype(), "blocked_attention", [&]<typename T>() {
    forward<T>(d, q.data<T>(), k.data<T>(), v.data<T>(), mask.defined() ? mask.data<T>() : nullptr,
               out.data<T>(), lse.data<T>());
  });
}

void blocked_attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& mask, const Tensor& out, const Tensor& lse,
                                const Tensor& dout, const AttentionDims& d) {
  if (!dense_operands(q, k, v, {&dq, &dk, &dv, &out, &dout})) {
    const DenseOperands c(d, q, k, v);
    const Tensor dqc = fresh(dq), dkc = fresh(dk), dvc = fresh(dv);
    blocked_attention_backward(dqc, dkc, dvc, c.q, c.k, c.v, mask, out.contiguous(), lse,
                               dout.contiguous(), c.d);
    copy(dq, dqc);
    copy(dk, dkc);
    copy(dv, dvc);
    return;
  }
  if (functional::is_16bit_float(q.dtype())) {
    const std::vector<float> qf = widened(q), kf = widened(k), vf = widened(v), of = widened(out),
                             gf = widened(dout);
    std::vector<float> dqf(static_cast<std::size_t>(dq.numel()), 0.0f),
        dkf(static_cast<std::size_t>(dk.numel()), 0.0f),
        dvf(static_cast<std::size_t>(dv.numel()), 0.0f);
    backward<float>(d, qf.data(), kf.data(), vf.data(), float_mask(mask), of.data(),
                    lse.data<float>(), gf.data(), dqf.data(), dkf.data(), dvf.data());
    narrow_into(dq, dqf);
    narrow_into(dk, dkf);
    narrow_into(dv, dvf);
    return;
  }
  dispatch_float(q.dtype(), "blocked_attention", [&]<typename T>() {
    backward<T>(d, q.data<T>(), k.data<T>(), v.data<T>(), mask.defined() ? mask.data<T>() : nullptr,
                out.data<T>(), lse.data<T>(), dout.data<T>(), dq.data<T>(), dk.data<T>(),
                dv.data<T>());
  });
}

}  // namespace fsdp::cpu
