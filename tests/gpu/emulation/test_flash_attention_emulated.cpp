// core/cuda/flash_attention.cu's kernels, compiled by the host compiler under emu_cuda.h (CTAs
// as fibers, the warp-level matrix instructions by their PTX layouts: emu_mma.h), against a
// double loop: the tiles' indexing, fragment layouts, masks, loop bounds, the double-buffered
// loads and synchronisation checked on any machine with the CUDA headers, before a device runs
// them. Batch 2 (the batch offsets), t of 1, under a tile, one tile, a partial last tile, two
// whole tiles, three tiles, five (the load stages alternating); bf16 and fp16 tiles; dense
// operands, and MultiheadAttention's layout (q, k, v, dq, dk, dv views of packed (L, N, 3E)
// buffers, o and dO of (L, N, E) ones, L-major and, as with batch_first, N-major); grouped-query
// heads (2 and 4 query heads a kv head) in the Hugging Face models' (B, t, heads, hd) layout;
// each at head dims 64, 96 and 128 (the wider tiles in more than 48 KiB of dynamic shared memory,
// their backward's resident operands read from it per product).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "core/cuda/flash_attention.h"
#include "core/cuda/kernels.h"
#include "tests/gpu/emulation/emu_test_runtime.h"
#include "tests/gpu/storage16.h"

using namespace fsdp::cuda;
using fsdp::cuda::testing::from_storage;
using fsdp::cuda::testing::to_storage;

namespace {

// The tolerance on a 16-bit result (storage: tests/gpu/storage16.h): bf16's 1e-2 (8 significant
// bits), fp16's 1e-3 (11: one rounding is at most 2^-11 relative).
template <typename T>
constexpr double kTol16 = std::is_same_v<T, __half> ? 1e-3 : 1e-2;
template <typename T>
constexpr const char* kName16 = std::is_same_v<T, __half> ? "fp16" : "bf16";

template <typename T>
std::vector<T> to_16bit(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = to_storage<T>(v[i]);
  return out;
}

// ||got - ref|| / max(||ref||, 1), infinity on a NaN (the outputs start as NaN).
template <typename Get>
double relative_error(Get got, const std::vector<double>& ref) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double g = got(i);
    if (!std::isfinite(g)) return INFINITY;
    diff += (g - ref[i]) * (g - ref[i]);
    norm += ref[i] * ref[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1.0);
}

struct Reference {
  std::vector<double> o, lse, dq, dk, dv;
};

// Causal softmax attention and its gradients in double, row by row.
Reference reference(const std::vector<float>& q, const std::vector<float>& k,
                    const std::vector<float>& v, const std::vector<float>& dout, std::int64_t batch,
                    std::int64_t t, std::int64_t hd, double scale) {
  const std::int64_t n = batch * t * hd;
  Reference r{std::vector<double>(n), std::vector<double>(batch * t), std::vector<double>(n),
              std::vector<double>(n), std::vector<double>(n)};
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t base = b * t * hd;
    std::vector<std::vector<double>> p(t);
    for (std::int64_t i = 0; i < t; ++i) {
      std::vector<double> s(i + 1, 0.0);
      double m = -INFINITY, l = 0;
      for (std::int64_t j = 0; j <= i; ++j) {
        for (std::int64_t d = 0; d < hd; ++d)
          s[j] += double(q[base + i * hd + d]) * k[base + j * hd + d];
        s[j] *= scale;
        m = std::max(m, s[j]);
      }
      for (double x : s) l += std::exp(x - m);
      r.lse[b * t + i] = m + std::log(l);
      p[i].resize(i + 1);
      for (std::int64_t j = 0; j <= i; ++j) p[i][j] = std::exp(s[j] - m) / l;
      for (std::int64_t d = 0; d < hd; ++d)
        for (std::int64_t j = 0; j <= i; ++j)
          r.o[base + i * hd + d] += p[i][j] * v[base + j * hd + d];
    }
    for (std::int64_t i = 0; i < t; ++i) {
      double dsum = 0;
      for (std::int64_t d = 0; d < hd; ++d)
        dsum += double(dout[base + i * hd + d]) * r.o[base + i * hd + d];
      for (std::int64_t j = 0; j <= i; ++j) {
        double dp = 0;
        for (std::int64_t d = 0; d < hd; ++d)
          dp += double(dout[base + i * hd + d]) * v[base + j * hd + d];
        const double ds = p[i][j] * (dp - dsum);
        for (std::int64_t d = 0; d < hd; ++d) {
          r.dq[base + i * hd + d] += scale * ds * k[base + j * hd + d];
          r.dk[base + j * hd + d] += scale * ds * q[base + i * hd + d];
          r.dv[base + j * hd + d] += p[i][j] * dout[base + i * hd + d];
        }
      }
    }
  }
  return r;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(emulated_flash_attention)

using Tile16 = std::tuple<__nv_bfloat16, __half>;

BOOST_AUTO_TEST_CASE_TEMPLATE(tiled_attention_forward_and_backward_match_a_double_loop, T, Tile16) {
  std::mt19937 gen(20261127);
  std::normal_distribution<float> normal;
  const std::int64_t batch = 2;
  const float scale = 0.125f;
  for (const std::int64_t hd : kFlashHeadDims)
    for (std::int64_t t : {1, 7, 64, 65, 128, 130, 300}) {
      const std::int64_t n = batch * t * hd;
      std::vector<float> q(n), k(n), v(n), dout(n);
      for (auto* x : {&q, &k, &v, &dout})
        for (float& e : *x) e = from_storage(to_storage<T>(normal(gen)));
      const std::vector<T> qb = to_16bit<T>(q), kb = to_16bit<T>(k), vb = to_16bit<T>(v),
                           db = to_16bit<T>(dout);
      std::vector<T> o(n, to_storage<T>(NAN)), dq(n, to_storage<T>(NAN)), dk(n, to_storage<T>(NAN)),
          dv(n, to_storage<T>(NAN));
      std::vector<float> lse(batch * t, NAN);
      const FlashGeometry g = dense_flash_geometry(batch, t, scale, hd);
      flash_attention_forward(qb.data(), kb.data(), vb.data(), o.data(), lse.data(), g, nullptr);
      flash_attention_backward(qb.data(), kb.data(), vb.data(), o.data(), db.data(), lse.data(),
                               dq.data(), dk.data(), dv.data(), g, nullptr);
      const Reference ref = reference(q, k, v, dout, batch, t, hd, scale);
      const std::string shape = kName16<T> + std::string(" ") + std::to_string(batch) + "x" +
                                std::to_string(t) + "x" + std::to_string(hd);
      auto bf = [](const std::vector<T>& x) {
        return [&x](std::size_t i) { return double(from_storage(x[i])); };
      };
      auto fl = [](const std::vector<float>& x) {
        return [&x](std::size_t i) { return double(x[i]); };
      };
      const double e_o = relative_error(bf(o), ref.o), e_lse = relative_error(fl(lse), ref.lse),
                   e_dq = relative_error(bf(dq), ref.dq), e_dk = relative_error(bf(dk), ref.dk),
                   e_dv = relative_error(bf(dv), ref.dv);
      const double tol = kTol16<T>;
      BOOST_TEST(e_o <= tol, "emulated attention o " << shape << ": relative error " << e_o);
      BOOST_TEST(e_lse <= 1e-4, "emulated attention lse " << shape << ": relative error " << e_lse);
      BOOST_TEST(e_dq <= tol, "emulated attention dq " << shape << ": relative error " << e_dq);
      BOOST_TEST(e_dk <= tol, "emulated attention dk " << shape << ": relative error " << e_dk);
      BOOST_TEST(e_dv <= tol, "emulated attention dv " << shape << ": relative error " << e_dv);
      BOOST_TEST(fsdp::emu::test::take_fault() == "");
    }
}

// MultiheadAttention's layout: q, k and v are views of one packed (L, N, 3E) projection (head h
// of part p at column p * E + h * 64), o and dO of (L, N, E) buffers, dq, dk and dv views of one
// (L, N, 3E) gradient, every buffer L-major or, as with batch_first, N-major ((N, L, *) memory);
// the tiles read and write them in place, every element of the gradient written (it starts as
// NaN), the results those of the dense layout.
BOOST_AUTO_TEST_CASE_TEMPLATE(tiled_attention_reads_and_writes_packed_heads_in_place, T, Tile16) {
  for (const std::int64_t hd : kFlashHeadDims)
    for (bool n_major : {false, true}) {
      std::mt19937 gen(20261130);
      std::normal_distribution<float> normal;
      const std::int64_t N = 2, H = 3, E = H * hd, L = 130;
      const float scale = 0.125f;
      // Where row (l, n) of a buffer of C columns starts, and the buffer's strides.
      auto row_at = [&](std::int64_t l, std::int64_t n, std::int64_t C) {
        return n_major ? (n * L + l) * C : (l * N + n) * C;
      };
      auto strides = [&](std::int64_t C) {
        return AttentionOperandStrides{
            .batch = n_major ? L * C : C, .head = hd, .row = n_major ? C : N * C};
      };
      std::vector<float> proj(L * N * 3 * E), dout(L * N * E);
      for (auto* x : {&proj, &dout})
        for (float& e : *x) e = from_storage(to_storage<T>(normal(gen)));
      const std::vector<T> pb = to_16bit<T>(proj), db = to_16bit<T>(dout);
      std::vector<T> o(L * N * E, to_storage<T>(NAN)), dproj(L * N * 3 * E, to_storage<T>(NAN));
      std::vector<float> lse(N * H * L, NAN);
      const AttentionOperandStrides packed = strides(3 * E), merged = strides(E);
      const FlashGeometry g{.B = N,
                            .H = H,
                            .t = L,
                            .hd = hd,
                            .scale = scale,
                            .q = packed,
                            .k = packed,
                            .v = packed,
                            .o = merged,
                            .dout = merged,
                            .dq = packed,
                            .dk = packed,
                            .dv = packed};
      const T* p = pb.data();
      BOOST_TEST_CONTEXT((n_major ? "N-major" : "L-major") << " hd=" << hd) {
        BOOST_TEST(flash_attention_applies(g, {p, p + E, p + 2 * E, o.data(), db.data()}));
        flash_attention_forward(p, p + E, p + 2 * E, o.data(), lse.data(), g, nullptr);
        flash_attention_backward(p, p + E, p + 2 * E, o.data(), db.data(), lse.data(), dproj.data(),
                                 dproj.data() + E, dproj.data() + 2 * E, g, nullptr);
        BOOST_TEST(fsdp::emu::test::take_fault() == "");

        // The (n, h) heads gathered densely (batch n * H + h) for the double loop.
        auto gather = [&](const std::vector<float>& src, std::int64_t C, std::int64_t col0) {
          std::vector<float> out(N * H * L * hd);
          for (std::int64_t n = 0; n < N; ++n)
            for (std::int64_t h = 0; h < H; ++h)
              for (std::int64_t l = 0; l < L; ++l)
                for (std::int64_t c = 0; c < hd; ++c)
                  out[((n * H + h) * L + l) * hd + c] = src[row_at(l, n, C) + col0 + h * hd + c];
          return out;
        };
        const Reference ref =
            reference(gather(proj, 3 * E, 0), gather(proj, 3 * E, E), gather(proj, 3 * E, 2 * E),
                      gather(dout, E, 0), N * H, L, hd, scale);
        auto at = [&](const std::vector<T>& x, std::int64_t C, std::int64_t col0) {
          return [&x, &row_at, C, col0, hd, L, H](std::size_t i) {
            const std::int64_t c = std::int64_t(i) % hd, l = std::int64_t(i) / hd % L,
                               bh = std::int64_t(i) / (hd * L), n = bh / H, h = bh % H;
            return double(from_storage(x[row_at(l, n, C) + col0 + h * hd + c]));
          };
        };
        const double tol = kTol16<T>;
        BOOST_TEST(relative_error(at(o, E, 0), ref.o) <= tol);
        BOOST_TEST(relative_error([&](std::size_t i) { return double(lse[i]); }, ref.lse) <= 1e-4);
        BOOST_TEST(relative_error(at(dproj, 3 * E, 0), ref.dq) <= tol);
        BOOST_TEST(relative_error(at(dproj, 3 * E, E), ref.dk) <= tol);
        BOOST_TEST(relative_error(at(dproj, 3 * E, 2 * E), ref.dv) <= tol);
        for (std::size_t i = 0; i < dproj.size(); ++i)
          if (!std::isfinite(from_storage(dproj[i]))) {
            BOOST_TEST(false, "dproj element " << i << " not written");
            break;
          }
      }
    }
}

// Grouped-query heads as the Hugging Face models lay them out: q, o, dO and dq (B, t, H, hd),
// k, v, dk and dv (B, t, KV, hd) with KV = H / group; query head h reads kv head h / group, and
// the kv head's dk and dv sum over its group's query heads (one head per kv head: MQA).
BOOST_AUTO_TEST_CASE_TEMPLATE(tiled_attention_groups_query_heads_over_kv_heads, T, Tile16) {
  for (const std::int64_t hd : kFlashHeadDims)
    for (std::int64_t group : {2, 4}) {
      std::mt19937 gen(20261127 + group);
      std::normal_distribution<float> normal;
      const std::int64_t B = 2, H = 4, KV = H / group, t = 130;
      const float scale = 0.125f;
      std::vector<float> q(B * t * H * hd), k(B * t * KV * hd), v(k.size()), dout(q.size());
      for (auto* x : {&q, &k, &v, &dout})
        for (float& e : *x) e = from_storage(to_storage<T>(normal(gen)));
      const std::vector<T> qb = to_16bit<T>(q), kb = to_16bit<T>(k), vb = to_16bit<T>(v),
                           db = to_16bit<T>(dout);
      std::vector<T> o(q.size(), to_storage<T>(NAN)), dq(q.size(), to_storage<T>(NAN)),
          dk(k.size(), to_storage<T>(NAN)), dv(k.size(), to_storage<T>(NAN));
      std::vector<float> lse(B * H * t, NAN);
      const AttentionOperandStrides sq{.batch = t * H * hd, .head = hd, .row = H * hd},
          skv{.batch = t * KV * hd, .head = hd, .row = KV * hd};
      const FlashGeometry g{.B = B,
                            .H = H,
                            .group = group,
                            .t = t,
                            .hd = hd,
                            .scale = scale,
                            .q = sq,
                            .k = skv,
                            .v = skv,
                            .o = sq,
                            .dout = sq,
                            .dq = sq,
                            .dk = skv,
                            .dv = skv};
      BOOST_TEST_CONTEXT(kName16<T> << " H=" << H << " KV=" << KV << " hd=" << hd) {
        BOOST_TEST(flash_attention_applies(g, {qb.data(), kb.data(), o.data(), dk.data()}));
        flash_attention_forward(qb.data(), kb.data(), vb.data(), o.data(), lse.data(), g, nullptr);
        flash_attention_backward(qb.data(), kb.data(), vb.data(), o.data(), db.data(), lse.data(),
                                 dq.data(), dk.data(), dv.data(), g, nullptr);
        BOOST_TEST(fsdp::emu::test::take_fault() == "");
        // Each query head (b, h) with its kv head's k and v, densely (batch b * H + h).
        auto gather = [&](const std::vector<float>& src, std::int64_t heads, bool by_kv) {
          std::vector<float> out(B * H * t * hd);
          for (std::int64_t b = 0; b < B; ++b)
            for (std::int64_t h = 0; h < H; ++h)
              for (std::int64_t i = 0; i < t; ++i)
                for (std::int64_t c = 0; c < hd; ++c)
                  out[((b * H + h) * t + i) * hd + c] =
                      src[((b * t + i) * heads + (by_kv ? h / group : h)) * hd + c];
          return out;
        };
        const Reference ref =
            reference(gather(q, H, false), gather(k, KV, true), gather(v, KV, true),
                      gather(dout, H, false), B * H, t, hd, scale);
        // The reference's per-query-head dk and dv summed over each group.
        std::vector<double> dk_ref(k.size(), 0.0), dv_ref(k.size(), 0.0);
        for (std::int64_t b = 0; b < B; ++b)
          for (std::int64_t h = 0; h < H; ++h)
            for (std::int64_t i = 0; i < t; ++i)
              for (std::int64_t c = 0; c < hd; ++c) {
                const std::size_t from = ((b * H + h) * t + i) * hd + c,
                                  to = ((b * t + i) * KV + h / group) * hd + c;
                dk_ref[to] += ref.dk[from];
                dv_ref[to] += ref.dv[from];
              }
        auto by_query_head = [&](const std::vector<T>& x) {
          return [&x, H, t, hd](std::size_t i) {
            const std::int64_t c = std::int64_t(i) % hd, l = std::int64_t(i) / hd % t,
                               bh = std::int64_t(i) / (hd * t), b = bh / H, h = bh % H;
            return double(from_storage(x[((b * t + l) * H + h) * hd + c]));
          };
        };
        auto as_stored = [](const std::vector<T>& x) {
          return [&x](std::size_t i) { return double(from_storage(x[i])); };
        };
        const double tol = kTol16<T>;
        BOOST_TEST(relative_error(by_query_head(o), ref.o) <= tol);
        BOOST_TEST(relative_error([&](std::size_t i) { return double(lse[i]); }, ref.lse) <= 1e-4);
        BOOST_TEST(relative_error(by_query_head(dq), ref.dq) <= tol);
        BOOST_TEST(relative_error(as_stored(dk), dk_ref) <= tol);
        BOOST_TEST(relative_error(as_stored(dv), dv_ref) <= tol);
      }
    }
}

// What the tiles cannot take, so that the kernel table sends it to the row kernels: a head dim
// other than 64, 96 and 128, a pointer or a row stride off 16 bytes.
BOOST_AUTO_TEST_CASE(flash_attention_applies_only_to_16_byte_aligned_rows_of_its_head_dims) {
  alignas(16) static std::uint16_t buf[64];
  const FlashGeometry g = dense_flash_geometry(2, 70, 0.125f);
  BOOST_TEST(flash_attention_applies(g, {buf, buf + 8}));
  for (const std::int64_t hd : kFlashHeadDims)
    BOOST_TEST(flash_attention_applies(dense_flash_geometry(2, 70, 0.125f, hd), {buf}), hd);
  for (std::int64_t hd : {32, 80, 112, 256})
    BOOST_TEST(!flash_attention_applies(dense_flash_geometry(2, 70, 0.125f, hd), {buf}), hd);
  BOOST_TEST(!flash_attention_applies(g, {buf, buf + 1}));
  FlashGeometry odd_row = g, odd_batch = g;
  odd_row.dv.row = 68;  // an operand's rows 136 bytes apart
  odd_batch.o.batch = 4;
  BOOST_TEST(!flash_attention_applies(odd_row, {buf}));
  BOOST_TEST(!flash_attention_applies(odd_batch, {buf}));
  // Past head dim 64 the tiles need more than the 48 KiB of shared memory a kernel has without
  // opting in; what the kernels take, for the launches' opt-in.
  BOOST_TEST(flash_shared_bytes(64).forward == 4u * 64 * 72 * 2);
  BOOST_TEST(flash_shared_bytes(64).backward_dq == 4u * 64 * 72 * 2 + 2 * 64 * 4);
  BOOST_TEST(flash_shared_bytes(96).backward_dkdv == 6u * 64 * 104 * 2 + 2 * 64 * 4);
  BOOST_TEST(flash_shared_bytes(128).forward == 4u * 64 * 136 * 2);
  BOOST_TEST(flash_shared_bytes(128).backward_dkdv > 48u * 1024);
  BOOST_TEST(flash_shared_bytes(32).forward == 0u);  // no tiles
}

// attention.cu's one-warp-per-row kernels (float storage, any head dim up to 128): head dims
// under a warp, between, and the largest.
BOOST_AUTO_TEST_CASE(row_attention_forward_and_backward_match_a_double_loop) {
  std::mt19937 gen(20261128);
  std::normal_distribution<float> normal;
  const std::int64_t batch = 3, t = 19;
  for (std::int64_t hd : {20, 48, 128}) {
    const std::int64_t n = batch * t * hd;
    const float scale = 1.0f / std::sqrt(float(hd));
    std::vector<float> q(n), k(n), v(n), dout(n);
    for (auto* x : {&q, &k, &v, &dout})
      for (float& e : *x) e = normal(gen);
    std::vector<float> o(n, NAN), lse(batch * t, NAN), dq(n, NAN), dk(n, NAN), dv(n, NAN);
    attention_forward<float>(q.data(), k.data(), v.data(), o.data(), lse.data(), batch, t, hd,
                             scale, nullptr);
    attention_backward<float>(q.data(), k.data(), v.data(), o.data(), dout.data(), lse.data(),
                              dq.data(), dk.data(), dv.data(), batch, t, hd, scale, nullptr);
    const Reference ref = reference(q, k, v, dout, batch, t, hd, scale);
    auto fl = [](const std::vector<float>& x) {
      return [&x](std::size_t i) { return double(x[i]); };
    };
    // dk and dv gather with float atomics: 1e-4, as the device tests' atomic sums.
    BOOST_TEST(relative_error(fl(o), ref.o) <= 1e-5, "hd " << hd);
    BOOST_TEST(relative_error(fl(lse), ref.lse) <= 1e-5, "hd " << hd);
    BOOST_TEST(relative_error(fl(dq), ref.dq) <= 1e-4, "hd " << hd);
    BOOST_TEST(relative_error(fl(dk), ref.dk) <= 1e-4, "hd " << hd);
    BOOST_TEST(relative_error(fl(dv), ref.dv) <= 1e-4, "hd " << hd);
    BOOST_TEST(fsdp::emu::test::take_fault() == "");
  }
}

BOOST_AUTO_TEST_SUITE_END()
