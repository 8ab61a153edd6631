// The ops of the Hugging Face models (rms_norm, silu, gelu's tanh form as gelu_new, apply_rotary
// and its tables, scaled_dot_product_attention) against PyTorch (gen_transformer_fixtures.py):
// forward and gradients in float64 and float32, bfloat16 as transformers rounds it, finite
// differences, long sequences against the op-by-op attention, exact error messages.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <functional>
#include <limits>

#include "core/parallel.h"
#include "tests/core/functional/functional_check.h"
#include "tests/support/error_message.h"

using namespace fsdp;
using namespace fsdp::testing;

namespace {

const char* kFixture = "functional_transformer.json";

// The fixture's bfloat16 output against ours: the same bits, or one bfloat16 step apart where a
// float32 mean rounds differently (torch sums in float32, we in double).
void check_bf16(const Tensor& ours, const Tensor& expected, const std::string& what) {
  BOOST_TEST(ours.dtype() == DType::BFloat16);
  const auto a = ours.to_vector(), e = expected.to_vector();
  BOOST_TEST_REQUIRE(a.size() == e.size());
  std::size_t differ = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] == e[i]) continue;
    ++differ;
    BOOST_TEST(std::abs(a[i] - e[i]) <= std::abs(e[i]) / 128.0,
               what << "[" << i << "]: " << a[i] << " vs " << e[i]);
  }
  BOOST_TEST(differ * 20 <= a.size(), what << ": " << differ << " of " << a.size() << " differ");
}

Tensor bf16(const Tensor& t) {
  return converted(t, DType::BFloat16);
}

}  // namespace

namespace {

// Forward and input gradients of `fn` on 16-bit inputs against the same maths in float32 on the
// inputs rounded to 16 bits: the 16-bit paths compute in float32 and round their results once
// (or as transformers rounds), so they differ by a few 16-bit steps at most.
void check_16bit(const std::string& what, const std::vector<Tensor>& inputs,
                 const std::function<Tensor(const std::vector<Tensor>&)>& fn, double tol) {
  for (DType d : {DType::BFloat16, DType::Float16}) {
    BOOST_TEST_CONTEXT(what << " in " << dtype_name(d)) {
      std::vector<Tensor> low, ref;
      for (const Tensor& t : inputs) {
        low.push_back(converted(t, d).requires_grad_(true));
        ref.push_back(converted(converted(t, d), DType::Float32).requires_grad_(true));
      }
      Tensor y = fn(low), y_ref = fn(ref);
      BOOST_TEST(y.dtype() == d);
      BOOST_TEST(close(converted(y, DType::Float32), y_ref, tol, tol, what) == "");
      Tensor gy = det_values(y.shape(), 1.0, 0.7);
      y.backward(converted(gy, d));
      y_ref.backward(converted(gy, DType::Float32));
      for (std::size_t i = 0; i < low.size(); ++i) {
        if (!ref[i].grad().defined()) {  // an input fn does not differentiate (rotary's tables)
          BOOST_TEST(!low[i].grad().defined());
          continue;
        }
        BOOST_TEST(low[i].grad().dtype() == d);
        BOOST_TEST(close(converted(low[i].grad(), DType::Float32), ref[i].grad(), tol, tol,
                         what + " grad " + std::to_string(i)) == "");
      }
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(sixteen_bit_forward_and_gradients_follow_float32) {
  check_16bit(
      "rms_norm", {det_values({6, 16}, 2.0), det_values({16}, 0.5, 1.0)},
      [](const std::vector<Tensor>& t) { return rms_norm(t[0], t[1], 1e-6); }, 0.03);
  check_16bit(
      "silu", {det_values({5, 9}, 4.0)}, [](const std::vector<Tensor>& t) { return silu(t[0]); },
      0.03);
  check_16bit(
      "apply_rotary", {det_values({1, 2, 5, 8}), det_values({5, 8}, 1.0, 0.2), det_values({5, 8})},
      [](const std::vector<Tensor>& t) { return apply_rotary(t[0], t[1].detach(), t[2].detach()); },
      0.03);
  check_16bit(
      "sdpa",
      {det_values({1, 4, 70, 8}), det_values({1, 2, 70, 8}, 1.0, 0.3),
       det_values({1, 2, 70, 8}, 1.0, 0.6)},
      [](const std::vector<Tensor>& t) {
        return scaled_dot_product_attention(t[0], t[1], t[2], {}, true, {}, true);
      },
      0.03);
}

BOOST_AUTO_TEST_SUITE(rms_norm_op)

BOOST_AUTO_TEST_CASE(matches_llama_rms_norm) {
  Fixture fx(kFixture);
  for (auto [c, eps] : {std::pair{"rms_norm_2d", 1e-6}, std::pair{"rms_norm_3d", 1e-5}}) {
    check_case_both(fx, c, {"x", "w"}, {"x", "w"},
                    [eps](const Inputs& in) { return rms_norm(in.at("x"), in.at("w"), eps); });
    check_bf16(rms_norm(bf16(fx.tensor(c, "x")), bf16(fx.tensor(c, "w")), eps),
               fx.tensor(c, "out_bf16"), c);
  }
}

BOOST_AUTO_TEST_CASE(finite_differences) {
  Inputs in{{"x", det_values({3, 2, 6}, 1.3, 0.2)}, {"w", det_values({6}, 0.8, 1.0)}};
  gradcheck("rms_norm", in, {"x", "w"},
            [](const Inputs& i) { return rms_norm(i.at("x"), i.at("w"), 1e-6); });
  gradcheck("rms_norm without weight", {{"x", det_values({4, 5}, 2.0)}}, {"x"},
            [](const Inputs& i) { return rms_norm(i.at("x"), Tensor(), 1e-3); });
}

// Llama's `weight * y.to(input_dtype)`: a float32 weight on bfloat16 rows gives float32, the
// rows rounded to bfloat16 first.
BOOST_AUTO_TEST_CASE(weight_of_another_dtype_promotes_after_rounding) {
  Tensor x = bf16(det_values({3, 8}, 2.0));
  Tensor w = converted(det_values({8}, 0.7, 0.3), DType::Float32);
  Tensor y = rms_norm(x, w, 1e-6);
  BOOST_TEST(y.dtype() == DType::Float32);
  Tensor rounded = converted(rms_norm(x, Tensor(), 1e-6), DType::Float32);
  BOOST_TEST(y.to_vector() == mul(w, rounded).to_vector());
}

BOOST_AUTO_TEST_CASE(errors_and_meta) {
  BOOST_TEST(error_message([] {
               rms_norm(zeros({2, 3}), zeros({4}), 1e-6);
             }) ==
             "rms_norm: expected weight of shape [3] (the input's last dim), but got weight of "
             "shape [4] and input of shape [2, 3]");
  BOOST_TEST(error_message([] { rms_norm(zeros({}), Tensor(), 1e-6); }) ==
             "rms_norm: expected an input with a last dim, got a 0-d tensor");
  Tensor m = rms_norm(empty({2, 5, 8}, TensorOptions(DType::BFloat16, kMeta)),
                      empty({8}, TensorOptions(DType::BFloat16, kMeta)), 1e-6);
  BOOST_TEST(m.is_meta());
  BOOST_TEST(m.shape() == (Shape{2, 5, 8}));
  BOOST_TEST(m.dtype() == DType::BFloat16);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(silu_op)

BOOST_AUTO_TEST_CASE(matches_pytorch_and_finite_differences) {
  Fixture fx(kFixture);
  check_case_both(fx, "silu", {"x"}, {"x"}, [](const Inputs& in) { return silu(in.at("x")); });
  gradcheck("silu", {{"x", det_values({3, 7}, 5.0)}}, {"x"},
            [](const Inputs& i) { return silu(i.at("x")); });
  Tensor x = det_values({4, 9}, 6.0);
  Tensor y16 = silu(bf16(x));
  BOOST_TEST(y16.dtype() == DType::BFloat16);
  BOOST_TEST(close(converted(y16, DType::Float64), silu(x), 1.0 / 128, 1e-3, "silu bf16") == "");
}

// gelu_new (GPT-2's default) is 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))): gelu's
// "tanh" form computes it within 4 float32 ulps of the formula evaluated in double where |y| >=
// 0.1 and within 1e-7 absolute below (its vectorised tanh's error near y = 0; torch's own
// gelu_pytorch_tanh differs from gelu_new by up to 2.4e-7, hf-models.md).
BOOST_AUTO_TEST_CASE(gelu_tanh_is_gpt2_gelu_new) {
  std::vector<double> xs;
  for (int i = -4000; i <= 4000; ++i) xs.push_back(static_cast<float>(i * 0.0025));
  Tensor x = from_vector(xs, {static_cast<std::int64_t>(xs.size())}, TensorOptions(DType::Float32));
  const auto ours = gelu(x, "tanh").to_vector();
  double worst_ulps = 0, worst_abs = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double v = xs[i];
    const double ref = static_cast<float>(
        0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))));
    const double err = std::abs(ours[i] - ref);
    if (std::abs(ref) < 0.1)
      worst_abs = std::max(worst_abs, err);
    else
      worst_ulps =
          std::max(worst_ulps, err / (std::abs(ref) * std::numeric_limits<float>::epsilon()));
  }
  BOOST_TEST_MESSAGE("gelu tanh vs gelu_new: " << worst_ulps << " ulps where |y| >= 0.1, "
                                               << worst_abs << " absolute below");
  BOOST_TEST(worst_ulps <= 4.0);
  BOOST_TEST(worst_abs <= 1e-7);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(rotary_op)

// Bit for bit where glibc's powf and torch's vectorised pow agree (every entry of Llama 2's and
// 3's head dim 128 at theta 1e4 and 5e5); at theta 1e6 one entry of 64 is a float32 ulp apart.
BOOST_AUTO_TEST_CASE(inv_freq_is_transformers_bit_for_bit) {
  Fixture fx(kFixture);
  for (auto [key, dim, theta] : {std::tuple{"d8_t10000", 8, 1e4}, std::tuple{"d64_t10000", 64, 1e4},
                                 std::tuple{"d128_t500000", 128, 5e5}}) {
    Tensor f = rotary_inv_freq(dim, theta);
    BOOST_TEST(f.dtype() == DType::Float32);
    BOOST_TEST(f.to_vector() == fx.tensor("rotary_inv_freq", key).to_vector(), key);
  }
  const auto ours = rotary_inv_freq(128, 1e6).to_vector();
  const auto theirs = fx.tensor("rotary_inv_freq", "d128_t1e+06").to_vector();
  int differ = 0;
  for (std::size_t i = 0; i < ours.size(); ++i) {
    if (ours[i] == theirs[i]) continue;
    ++differ;
    BOOST_TEST(std::abs(ours[i] - theirs[i]) <= theirs[i] * 1.2e-7, "entry " << i);
  }
  BOOST_TEST(differ <= 1);
}

BOOST_AUTO_TEST_CASE(tables_match_llama_rotary_embedding) {
  Fixture fx(kFixture);
  auto [c, s] = rotary_cos_sin(rotary_inv_freq(8, 1e4), 3, 5, DType::Float32);
  BOOST_TEST(c.shape() == (Shape{5, 8}));
  // cos and sin of the same float32 arguments (torch's vectorised cos may differ by an ulp).
  BOOST_TEST(close(c, fx.tensor("rotary_shared", "cos"), 2e-7, 0, "cos") == "");
  BOOST_TEST(close(s, fx.tensor("rotary_shared", "sin"), 2e-7, 1e-7, "sin") == "");
  // On meta (a model built before it is materialised): shapes and dtypes only.
  Tensor meta_inv = rotary_inv_freq(8, 1e4, kMeta);
  BOOST_TEST(meta_inv.is_meta());
  BOOST_TEST(meta_inv.shape() == (Shape{4}));
  auto [mc, ms] = rotary_cos_sin(meta_inv, 0, 5, DType::BFloat16);
  BOOST_TEST((mc.is_meta() && ms.is_meta() && mc.shape() == (Shape{5, 8})));
  BOOST_TEST(ms.dtype() == DType::BFloat16);
  auto [c16, s16] = rotary_cos_sin(rotary_inv_freq(8, 1e4), 3, 5, DType::BFloat16);
  BOOST_TEST(c16.dtype() == DType::BFloat16);
  BOOST_TEST(c16.to_vector() == converted(c, DType::BFloat16).to_vector());
}

BOOST_AUTO_TEST_CASE(matches_apply_rotary_pos_emb) {
  Fixture fx(kFixture);
  for (const char* c : {"rotary_shared", "rotary_per_batch"}) {
    check_case_both(fx, c, {"x", "cos", "sin"}, {"x"}, [](const Inputs& in) {
      return apply_rotary(in.at("x"), in.at("cos"), in.at("sin"));
    });
    check_bf16(
        apply_rotary(bf16(fx.tensor(c, "x")), bf16(fx.tensor(c, "cos")), bf16(fx.tensor(c, "sin"))),
        fx.tensor(c, "out_bf16"), c);
  }
}

BOOST_AUTO_TEST_CASE(finite_differences_and_strided_input) {
  Tensor c = det_values({2, 4, 6}, 0.9), s = det_values({2, 4, 6}, 0.8, 1.0);
  gradcheck("apply_rotary", {{"x", det_values({2, 3, 4, 6}, 1.1)}}, {"x"},
            [&](const Inputs& i) { return apply_rotary(i.at("x"), c, s); });
  // A (B, S, H, D) projection read as (B, H, S, D) without a copy gives the contiguous result.
  Tensor packed = det_values({2, 4, 3, 6}, 1.2);
  Tensor strided = transpose(packed, 1, 2);
  BOOST_TEST(!strided.is_contiguous());
  BOOST_TEST(apply_rotary(strided, c, s).to_vector() ==
             apply_rotary(contiguous(strided), c, s).to_vector());
}

BOOST_AUTO_TEST_CASE(errors) {
  Tensor x = zeros({1, 2, 3, 4});
  BOOST_TEST(error_message([&] {
               apply_rotary(x, zeros({3, 6}), zeros({3, 6}));
             }) ==
             "apply_rotary: expected cos of shape [3, 4] or [1, 3, 4] for x of shape [1, 2, 3, "
             "4], got [3, 6]");
  BOOST_TEST(error_message([&] {
               apply_rotary(zeros({2, 3, 4}), zeros({3, 4}), zeros({3, 4}));
             }) == "apply_rotary: expected x of shape (B, H, S, D) with D even, got [2, 3, 4]");
  BOOST_TEST(error_message([&] {
               apply_rotary(x, zeros({3, 4}), converted(zeros({3, 4}), DType::Float64));
             }) ==
             "apply_rotary: expected sin of x's dtype float32, got float64 (cast the tables "
             "with rotary_cos_sin's dtype)");
  BOOST_TEST(error_message([] { rotary_inv_freq(7, 1e4); }) ==
             "rotary_inv_freq: the head dim must be positive and even, got 7");
}

BOOST_AUTO_TEST_SUITE_END()

namespace {

// softmax(scale q k^T + mask) v op by op, kv heads repeated (repeat_kv), causal top-left: the
// reference the blocked kernel is checked against on sequences longer than its blocks.
Tensor reference_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  const std::int64_t B = q.size(0), H = q.size(1), L = q.size(2), KV = k.size(1), S = k.size(2);
  auto repeat = [&](const Tensor& t) {
    return reshape(expand(unsqueeze(t, 2), {B, KV, H / KV, S, t.size(3)}), {B, H, S, t.size(3)});
  };
  Tensor scores = mul(matmul(q, transpose(repeat(k), 2, 3)), 1.0 / std::sqrt(double(q.size(3))));
  if (causal) {
    std::vector<double> m(static_cast<std::size_t>(L * S));
    for (std::int64_t i = 0; i < L; ++i)
      for (std::int64_t j = 0; j < S; ++j)
        m[static_cast<std::size_t>(i * S + j)] = j <= i ? 0.0 : -1e300;
    scores = add(scores, from_vector(m, {L, S}, TensorOptions(q.dtype())));
  }
  return matmul(softmax(scores, -1), repeat(v));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(scaled_dot_product_attention_op)

BOOST_AUTO_TEST_CASE(matches_pytorch) {
  Fixture fx(kFixture);
  struct Case {
    const char* name;
    bool causal, gqa;
    std::optional<double> scale;
  };
  for (const Case& c :
       {Case{"sdpa_plain", false, false, {}}, Case{"sdpa_causal_l_lt_s", true, false, {}},
        Case{"sdpa_causal_l_gt_s", true, false, {}}, Case{"sdpa_gqa_causal", true, true, {}},
        Case{"sdpa_bool_padding", false, false, {}}, Case{"sdpa_bool_rows_empty", false, false, {}},
        Case{"sdpa_additive_scale", false, false, 0.3}}) {
    std::vector<std::string> names{"q", "k", "v"};
    if (fx.has(c.name, "mask")) names.push_back("mask");
    if (fx.has(c.name, "mask01")) names.push_back("mask01");
    check_case_both(fx, c.name, names, {"q", "k", "v"}, [&](const Inputs& in) {
      Tensor mask = in.count("mask")     ? in.at("mask")
                    : in.count("mask01") ? eq(in.at("mask01"), 1.0)
                                         : Tensor();
      return scaled_dot_product_attention(in.at("q"), in.at("k"), in.at("v"), mask, c.causal,
                                          c.scale, c.gqa);
    });
  }
}

// Longer than the kernel's blocks (64 queries, 128 keys): causal blocks skipped, GQA, L != S.
BOOST_AUTO_TEST_CASE(long_sequences_match_the_op_by_op_attention) {
  for (auto [L, S, H, KV] :
       {std::tuple{200, 200, 4, 2}, std::tuple{150, 300, 2, 1}, std::tuple{300, 140, 2, 2}}) {
    BOOST_TEST_CONTEXT("L " << L << " S " << S << " H " << H << " KV " << KV) {
      Tensor q = det_values({1, H, L, 16}, 1.0), k = det_values({1, KV, S, 16}, 1.0, 0.5);
      Tensor v = det_values({1, KV, S, 8}, 1.0, 1.5), gy = det_values({1, H, L, 8}, 1.0, 2.0);
      for (bool causal : {false, true}) {
        Inputs a{{"q", clone(q)}, {"k", clone(k)}, {"v", clone(v)}};
        Inputs b{{"q", clone(q)}, {"k", clone(k)}, {"v", clone(v)}};
        for (auto* in : {&a, &b})
          for (auto& [n, t] : *in) t.requires_grad_(true);
        Tensor ours = scaled_dot_product_attention(a["q"], a["k"], a["v"], {}, causal, {}, true);
        Tensor ref = reference_attention(b["q"], b["k"], b["v"], causal);
        BOOST_TEST(close(ours, ref, 1e-10, 1e-12, "out") == "");
        ours.backward(gy);
        ref.backward(gy);
        for (const char* n : {"q", "k", "v"})
          BOOST_TEST(close(a[n].grad(), b[n].grad(), 1e-9, 1e-11, n) == "");
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(finite_differences) {
  Tensor mask = from_vector({1, 1, 0, 1, 0, 1, 1, 1, 1, 0, 1, 1}, {3, 4}, {});
  Inputs in{{"q", det_values({1, 4, 3, 5}, 1.0)},
            {"k", det_values({1, 2, 4, 5}, 1.0, 0.4)},
            {"v", det_values({1, 2, 4, 3}, 1.0, 0.9)}};
  gradcheck("sdpa gqa masked", in, {"q", "k", "v"}, [&](const Inputs& i) {
    return scaled_dot_product_attention(i.at("q"), i.at("k"), i.at("v"), eq(mask, 1.0), false, 0.7,
                                        true);
  });
  gradcheck("sdpa causal", in, {"q", "k", "v"}, [&](const Inputs& i) {
    return scaled_dot_product_attention(i.at("q"), i.at("k"), i.at("v"), {}, true, {}, true);
  });
}

BOOST_AUTO_TEST_CASE(strided_and_16bit_inputs) {
  // q, k, v as HF makes them: (B, S, H, D) projections transposed to (B, H, S, D), no copy.
  Tensor qp = det_values({2, 70, 4, 8}, 1.0), kp = det_values({2, 70, 2, 8}, 1.0, 0.3);
  Tensor vp = det_values({2, 70, 2, 8}, 1.0, 0.6);
  Tensor q = transpose(qp, 1, 2), k = transpose(kp, 1, 2), v = transpose(vp, 1, 2);
  Tensor strided = scaled_dot_product_attention(q, k, v, {}, true, {}, true);
  Tensor dense =
      scaled_dot_product_attention(contiguous(q), contiguous(k), contiguous(v), {}, true, {}, true);
  BOOST_TEST(strided.to_vector() == dense.to_vector());
  Tensor y16 = scaled_dot_product_attention(bf16(q), bf16(k), bf16(v), {}, true, {}, true);
  BOOST_TEST(y16.dtype() == DType::BFloat16);
  BOOST_TEST(close(converted(y16, DType::Float64), dense, 0.02, 0.02, "bf16") == "");
}

// The backward overwrites its gradients (no zero fill before it): with no queries the keys' and
// values' gradients are zeros, and with no keys the queries' (and the output is zeros, as torch's).
BOOST_AUTO_TEST_CASE(empty_queries_or_keys_give_zero_gradients) {
  for (auto [L, S] : {std::pair<std::int64_t, std::int64_t>{0, 3}, {3, 0}}) {
    Tensor q = det_values({1, 2, L, 8}, 1.0).requires_grad_();
    Tensor k = det_values({1, 2, S, 8}, 1.0, 0.3).requires_grad_();
    Tensor v = det_values({1, 2, S, 8}, 1.0, 0.6).requires_grad_();
    Tensor out = scaled_dot_product_attention(q, k, v);
    BOOST_TEST(out.to_vector() == std::vector<double>(out.numel(), 0.0));
    sum(out).backward();
    for (const Tensor* t : {&q, &k, &v})
      BOOST_TEST(t->grad().to_vector() == std::vector<double>(t->numel(), 0.0),
                 "L " << L << " S " << S);
    // 16 bits, q, k and v views (the CPU widens copies of them).
    Tensor q16 = transpose(bf16(det_values({1, L, 2, 8}, 1.0)), 1, 2).requires_grad_();
    Tensor k16 = transpose(bf16(det_values({1, S, 2, 8}, 1.0, 0.3)), 1, 2).requires_grad_();
    Tensor v16 = transpose(bf16(det_values({1, S, 2, 8}, 1.0, 0.6)), 1, 2).requires_grad_();
    sum(scaled_dot_product_attention(q16, k16, v16)).backward();
    for (const Tensor* t : {&q16, &k16, &v16})
      BOOST_TEST(t->grad().to_vector() == std::vector<double>(t->numel(), 0.0),
                 "bf16 L " << L << " S " << S);
  }
}

// The kernels split (batch, head, query block) and (batch, kv head) across the intra-op threads,
// and rms_norm's rows and weight columns: the values do not depend on the thread count.
BOOST_AUTO_TEST_CASE(threads_give_the_serial_values) {
  auto run = [] {
    Tensor q = det_values({2, 4, 150, 8}, 1.0), k = det_values({2, 2, 150, 8}, 1.0, 0.3);
    Tensor v = det_values({2, 2, 150, 8}, 1.0, 0.6), x = det_values({300, 64}, 2.0);
    Tensor w = det_values({64}, 1.0, 0.2);
    for (Tensor* t : {&q, &k, &v, &x, &w}) t->requires_grad_(true);
    Tensor a = scaled_dot_product_attention(q, k, v, {}, true, {}, true);
    Tensor n = rms_norm(x, w, 1e-6);
    add(sum(mul(a, a)), sum(mul(n, n))).backward();
    std::vector<std::vector<double>> out;
    for (const Tensor& t : {a, n, q.grad(), k.grad(), v.grad(), x.grad(), w.grad()})
      out.push_back(t.to_vector());
    return out;
  };
  const int before = get_num_threads();
  set_num_threads(1);
  const auto serial = run();
  set_num_threads(2);
  const auto threaded = run();
  set_num_threads(before);
  BOOST_TEST((threaded == serial));
}

BOOST_AUTO_TEST_CASE(errors_name_the_shapes) {
  Tensor q = zeros({1, 4, 3, 8}), k = zeros({1, 2, 5, 8}), v = zeros({1, 2, 5, 8});
  BOOST_TEST(error_message([&] { scaled_dot_product_attention(q, k, v); }) ==
             "scaled_dot_product_attention: query has 4 heads and key and value 2; they must be "
             "equal unless enable_gqa=true (query [1, 4, 3, 8], key [1, 2, 5, 8], value [1, 2, "
             "5, 8])");
  Tensor k3 = zeros({1, 3, 5, 8});
  BOOST_TEST(error_message([&] { scaled_dot_product_attention(q, k3, k3, {}, false, {}, true); }) ==
             "scaled_dot_product_attention: Number of heads in key and value must divide the "
             "number of heads in query (query [1, 4, 3, 8], key [1, 3, 5, 8], value [1, 3, 5, 8])");
  BOOST_TEST(error_message([&] {
               scaled_dot_product_attention(q, k, converted(v, DType::Float64), {}, false, {},
                                            true);
             }) ==
             "scaled_dot_product_attention: Expected query, key, and value to have the same "
             "dtype, but got query.dtype: float32 key.dtype: float32 and value.dtype: "
             "float64 instead.");
  Tensor mask = eq(zeros({3, 5}), 0.0);
  BOOST_TEST(error_message([&] { scaled_dot_product_attention(q, k, v, mask, true, {}, true); }) ==
             "scaled_dot_product_attention: Explicit attn_mask should not be set when "
             "is_causal=True");
  BOOST_TEST(error_message([&] {
               scaled_dot_product_attention(q, k, v, eq(zeros({3, 4}), 0.0), false, {}, true);
             }) ==
             "scaled_dot_product_attention: attn_mask of shape [3, 4] is not broadcastable "
             "to the scores' shape (B, H, L, S) = [1, 4, 3, 5] (query [1, 4, 3, 8], key [1, "
             "2, 5, 8], value [1, 2, 5, 8])");
  BOOST_TEST(error_message([&] {
               scaled_dot_product_attention(q, k, v, zeros({3, 5}, TensorOptions(DType::Int64)),
                                            false, {}, true);
             }) ==
             "scaled_dot_product_attention: Expected attn_mask dtype to be bool or float or "
             "to match query dtype, but got attn_mask.dtype: int64 and query.dtype: float32 "
             "instead.");
  BOOST_TEST(error_message([&] {
               scaled_dot_product_attention(zeros({4, 3, 8}), k, v);
             }) ==
             "scaled_dot_product_attention: expected query (B, H, L, D), key (B, KV, S, D) and "
             "value (B, KV, S, Dv) of 4 dims, got query [4, 3, 8], key [1, 2, 5, 8], value [1, 2, "
             "5, 8]");
  BOOST_TEST(error_message([&] {
               scaled_dot_product_attention(q, zeros({1, 2, 5, 6}), v, {}, false, {}, true);
             }) ==
             "scaled_dot_product_attention: expected query and key of one head dim, got "
             "query [1, 4, 3, 8], key [1, 2, 5, 6], value [1, 2, 5, 8]");
  Tensor m = scaled_dot_product_attention(
      empty({2, 4, 3, 8}, TensorOptions(DType::BFloat16, kMeta)),
      empty({2, 2, 5, 8}, TensorOptions(DType::BFloat16, kMeta)),
      empty({2, 2, 5, 6}, TensorOptions(DType::BFloat16, kMeta)), {}, true, {}, true);
  BOOST_TEST(m.is_meta());
  BOOST_TEST(m.shape() == (Shape{2, 4, 3, 6}));
}

BOOST_AUTO_TEST_SUITE_END()
