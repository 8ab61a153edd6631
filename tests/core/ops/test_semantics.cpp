// Semantics beyond the fixtures: views, dtypes and promotion, 16-bit accumulation, meta shapes,
// autograd safety (in-place on saved tensors, double backward), random ops.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "core/autograd.h"
#include "core/kernels/kernel_table.h"
#include "core/ops.h"
#include "tests/support/fixture.h"

namespace fsdp::testing {
namespace {

using V = std::vector<double>;

Tensor seq(const Shape& shape, DType dt = DType::Float32) {
  return arange(0.0, static_cast<double>(shape_numel(shape)), 1.0, dt).reshape(shape);
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

BOOST_AUTO_TEST_SUITE(ops_views)

BOOST_AUTO_TEST_CASE(view_ops_share_storage) {
  Tensor a = seq({2, 3, 4});
  std::vector<Tensor> views = {a.view({6, 4}),
                               a.transpose(0, 2),
                               a.permute({1, 2, 0}),
                               a.narrow(1, 1, 2),
                               a.select(2, 3),
                               a.unsqueeze(0),
                               a.flatten(),
                               a.reshape({4, 6}),
                               split(a, 1, 1)[1],
                               chunk(a, 2, 2)[1],
                               a.select(0, 0).expand({2, 3, 4})};
  for (const auto& v : views) BOOST_TEST(v.storage() == a.storage());
  Tensor s = a.select(2, 3);
  s.fill_(-1.0);
  BOOST_TEST(a.to_vector()[3] == -1.0);
  BOOST_TEST(a.to_vector()[7] == -1.0);
  BOOST_TEST(a.narrow(1, 1, 2).storage_offset() == 4);
}

BOOST_AUTO_TEST_CASE(reshape_copies_only_when_needed) {
  Tensor a = seq({3, 4});
  Tensor t = a.t();
  BOOST_TEST(!t.is_contiguous());
  Tensor r = t.reshape({12});
  BOOST_TEST(r.storage() != a.storage());
  BOOST_TEST(r.to_vector() == (V{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  // Transposed back to row-major order views again without a copy.
  BOOST_TEST(t.t().reshape({2, 6}).storage() == a.storage());
  // Views of non-contiguous layouts that keep dims together work.
  Tensor b = seq({2, 3, 4}).permute({1, 0, 2});  // [3, 2, 4], strides [4, 12, 1]
  BOOST_TEST(b.view({3, 2, 2, 2}).storage() == b.storage());
}

BOOST_AUTO_TEST_CASE(view_error_matches_pytorch) {
  Tensor t = seq({3, 4}).t();
  try {
    t.view({12});
    BOOST_FAIL("expected an error");
  } catch (const RuntimeError& e) {
    BOOST_TEST(contains(e.what(),
                        "view size is not compatible with input tensor's size and "
                        "stride"));
    BOOST_TEST(contains(e.what(), "Use .reshape(...) instead."));
  }
  BOOST_CHECK_THROW(seq({3, 4}).view({5, -1}), RuntimeError);
  BOOST_CHECK_THROW(seq({3, 4}).view({-1, -1}), RuntimeError);
  BOOST_TEST(seq({3, 4}).view({-1}).shape() == Shape{12});
  BOOST_TEST(seq({3, 4}).view({2, -1, 2}).shape() == (Shape{2, 3, 2}));
}

BOOST_AUTO_TEST_CASE(shape_ops_edge_cases) {
  Tensor a = seq({3, 1, 4});
  BOOST_TEST(a.squeeze(0).shape() == (Shape{3, 1, 4}));  // size != 1: unchanged
  BOOST_TEST(a.squeeze(-2).shape() == (Shape{3, 4}));
  BOOST_TEST(a.unsqueeze(3).shape() == (Shape{3, 1, 4, 1}));
  BOOST_TEST(a.unsqueeze(-1).shape() == (Shape{3, 1, 4, 1}));
  BOOST_TEST(scalar_tensor(2.0).flatten().shape() == Shape{1});
  BOOST_TEST(a.flatten(0, 1).shape() == (Shape{3, 4}));
  BOOST_TEST(a.expand({2, -1, 5, -1}).shape() == (Shape{2, 3, 5, 4}));
  BOOST_TEST(a.expand({2, -1, 5, -1}).strides() == (Shape{0, 4, 0, 1}));
  auto parts = chunk(seq({7}), 3);
  BOOST_TEST(parts.size() == 3u);
  BOOST_TEST(parts[2].to_vector() == (V{6}));
  BOOST_TEST(chunk(seq({5}), 4).size() == 3u);  // PyTorch: chunks of ceil(5/4) = 2
  auto sw = split_with_sizes(seq({2, 5}), {2, 0, 3}, -1);
  BOOST_TEST(sw[1].shape() == (Shape{2, 0}));
  BOOST_TEST(sw[2].to_vector() == (V{2, 3, 4, 7, 8, 9}));
  BOOST_TEST(contiguous(a).is_same(a));
  BOOST_TEST(!clone(a).is_same(a));
}

BOOST_AUTO_TEST_CASE(cat_stack_index_select_values) {
  Tensor a = seq({2, 2}), b = seq({2, 1}, DType::Float64);
  Tensor c = cat({a, b}, -1);
  BOOST_TEST(c.dtype() == DType::Float64);
  BOOST_TEST(c.to_vector() == (V{0, 1, 0, 2, 3, 1}));
  // Legacy: 1-D empty tensors are skipped.
  BOOST_TEST(cat({a, empty({0})}, 0).shape() == (Shape{2, 2}));
  BOOST_TEST(stack({a, a}, -1).shape() == (Shape{2, 2, 2}));
  Tensor idx = from_vector(std::vector<std::int64_t>{1, 1, 0}, {3});
  BOOST_TEST(index_select(a, 1, idx).to_vector() == (V{1, 1, 0, 3, 3, 2}));
  Tensor i32 = from_vector(std::vector<std::int64_t>{1}, {1}, DType::Int32);
  BOOST_TEST(index_select(a, 0, i32).to_vector() == (V{2, 3}));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(ops_dtypes)

BOOST_AUTO_TEST_CASE(type_promotion) {
  Tensor f = ones({3}), d = ones({3}, DType::Float64), i = ones({3}, DType::Int64);
  Tensor b = ones({3}, DType::Bool), h = ones({3}, DType::Float16);
  BOOST_TEST(dtype_name((f + d).dtype()) == "float64");
  BOOST_TEST(dtype_name((i + f).dtype()) == "float32");
  BOOST_TEST(dtype_name((i + i).dtype()) == "int64");
  BOOST_TEST(dtype_name((i + b).dtype()) == "int64");
  BOOST_TEST(dtype_name((h + f).dtype()) == "float32");
  BOOST_TEST(dtype_name((h + ones({3}, DType::BFloat16)).dtype()) == "float32");
  // 0-d tensors do not raise the dtype within a category, but do across categories.
  BOOST_TEST(dtype_name((f + scalar_tensor(1.0, DType::Float64)).dtype()) == "float32");
  BOOST_TEST(dtype_name((i + scalar_tensor(1.0, DType::Float64)).dtype()) == "float64");
  BOOST_TEST(dtype_name((i / i).dtype()) == "float32");
  BOOST_TEST((i / i).to_vector() == (V{1, 1, 1}));
  // A scalar keeps its kind, as torch's: a floating one makes an integral tensor float32.
  BOOST_TEST(dtype_name((i * 2).dtype()) == "int64");
  BOOST_TEST(dtype_name((i * 2.0).dtype()) == "float32");
  BOOST_TEST(dtype_name((i * 2.5).dtype()) == "float32");
  BOOST_TEST(dtype_name(exp(i).dtype()) == "float32");
  BOOST_TEST(dtype_name(sum(i).dtype()) == "int64");
  BOOST_TEST(dtype_name(sum(b).dtype()) == "int64");
  BOOST_TEST(dtype_name(lt(f, d).dtype()) == "bool");
  BOOST_TEST(add(i, i, 3).to_vector() == (V{4, 4, 4}));
  BOOST_CHECK_THROW(mean(i), RuntimeError);
  BOOST_CHECK_THROW(-b, TypeError);
}

BOOST_AUTO_TEST_CASE(sixteen_bit_floats_accumulate_in_float32) {
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    BOOST_TEST_CONTEXT(dtype_name(dt)) {
      // 4096 ones: a 16-bit running sum would stop growing at 2048 (float16) or 256 (bfloat16).
      Tensor s = sum(ones({4096}, dt));
      BOOST_TEST(s.dtype() == dt);
      BOOST_TEST(s.item() == 4096.0);
      BOOST_TEST(mean(full({4096}, 0.5, dt)).item() == 0.5);
      Tensor a = full({2, 300}, 1.0, dt), w = full({3, 300}, 1.0, dt);
      Tensor y = linear(a, w);
      BOOST_TEST(y.dtype() == dt);
      BOOST_TEST(y.to_vector() == V(6, 300.0));
      Tensor m = matmul(a, w.t());
      BOOST_TEST(m.dtype() == dt);
      BOOST_TEST(m.to_vector() == V(6, 300.0));
      Tensor e = exp(full({2}, 1.0, dt));
      BOOST_TEST(e.dtype() == dt);
      BOOST_TEST(std::abs(e.to_vector()[0] - std::exp(1.0)) < 2e-2);
      BOOST_TEST(max(from_vector({1, 5, 2}, {3}, dt)).item() == 5.0);
    }
  }
}

BOOST_AUTO_TEST_CASE(float32_exp_is_accurate_everywhere) {
  std::vector<double> xs;
  for (double x = -110.0; x <= 95.0; x += 0.0371) xs.push_back(x);
  for (double x : {0.0, -0.0, 1e-30, -1e-30, 88.5, -87.5, -103.5, 1e30, -1e30}) xs.push_back(x);
  xs.push_back(INFINITY);
  xs.push_back(-INFINITY);
  xs.push_back(NAN);
  Tensor x = from_vector(xs, {static_cast<std::int64_t>(xs.size())});
  // Strided input too: every other element of a wider tensor.
  Tensor wide = stack({x, x}, 1);
  for (const Tensor& in : {x, wide.select(1, 1)}) {
    auto got = exp(in).to_vector();
    auto v = in.to_vector();
    for (std::size_t i = 0; i < v.size(); ++i) {
      float want = std::exp(static_cast<float>(v[i]));
      if (std::isnan(want)) {
        BOOST_TEST(std::isnan(got[i]));
      } else if (std::isinf(want) || want == 0.0f) {
        BOOST_TEST(got[i] == static_cast<double>(want));
      } else {
        BOOST_TEST_CONTEXT("x = " << v[i]) {
          BOOST_TEST(std::abs(got[i] - want) <= 3e-7 * want + 1e-44);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(sixteen_bit_backward_matches_float32) {
  manual_seed(3);
  Tensor x32 = randn({4, 6}), w32 = randn({5, 6}), b32 = randn({5});
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    BOOST_TEST_CONTEXT(dtype_name(dt)) {
      // Reference: float32 on the same (rounded) values.
      Tensor xr = to_dtype(to_dtype(x32, dt), DType::Float32).requires_grad_();
      Tensor wr = to_dtype(to_dtype(w32, dt), DType::Float32).requires_grad_();
      Tensor br = to_dtype(to_dtype(b32, dt), DType::Float32).requires_grad_();
      Tensor x = to_dtype(x32, dt).requires_grad_(), w = to_dtype(w32, dt).requires_grad_();
      Tensor b = to_dtype(b32, dt).requires_grad_();
      auto f = [](const Tensor& x, const Tensor& w, const Tensor& b) {
        Tensor h = linear(x, w, b);
        return mean(mul(exp(mul(h, 0.1)), sum(mul(h, h), {-1}, true)));
      };
      Tensor y = f(x, w, b), yr = f(xr, wr, br);
      BOOST_TEST(y.dtype() == dt);
      y.backward();
      yr.backward();
      const double tol = dt == DType::Float16 ? 1e-2 : 4e-2;
      BOOST_TEST(close(to_dtype(y, DType::Float32), yr, tol, tol, "loss") == "");
      for (auto [g, gr] :
           {std::pair{x.grad(), xr.grad()}, {w.grad(), wr.grad()}, {b.grad(), br.grad()}}) {
        BOOST_TEST(g.dtype() == dt);
        BOOST_TEST(close(to_dtype(g, DType::Float32), gr, tol, tol, "grad") == "");
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(to_dtype_is_differentiable) {
  Tensor x = from_vector({1, 2, 3}, {3}).requires_grad_();
  Tensor y = to_dtype(x, DType::Float64);
  BOOST_TEST(y.dtype() == DType::Float64);
  mul(y, y).sum().backward();
  BOOST_TEST(x.grad().dtype() == DType::Float32);
  BOOST_TEST(x.grad().to_vector() == (V{2, 4, 6}));
  Tensor h = to_dtype(x, DType::BFloat16);
  BOOST_TEST(h.requires_grad());
  BOOST_TEST(!to_dtype(x, DType::Int64).requires_grad());
  BOOST_TEST(to_dtype(from_vector({1.7, -1.7}, {2}), DType::Int64).to_vector() == (V{1, -1}));
}

BOOST_AUTO_TEST_CASE(reductions_and_comparisons) {
  Tensor a = from_vector({1, 7, 3, 7, 2, 0}, {2, 3});
  auto [v, i] = max(a, 1);
  BOOST_TEST(v.to_vector() == (V{7, 7}));
  BOOST_TEST(i.to_vector() == (V{1, 0}));
  BOOST_TEST(i.dtype() == DType::Int64);
  BOOST_TEST(argmax(a, 0, true).shape() == (Shape{1, 3}));
  BOOST_TEST(argmax(a, 0).to_vector() == (V{1, 0, 0}));
  BOOST_TEST(amax(a, {0, 1}).item() == 7.0);
  BOOST_TEST(std::isnan(max(from_vector({1, NAN, 3}, {3})).item()));
  BOOST_TEST(sum(zeros({0, 3}), {0}).to_vector() == (V{0, 0, 0}));
  BOOST_TEST(std::isnan(mean(zeros({0})).item()));
  BOOST_TEST(eq(a, 7.0).to_vector() == (V{0, 1, 0, 1, 0, 0}));
  BOOST_TEST(ge(a, scalar_tensor(3.0)).to_vector() == (V{0, 1, 1, 1, 0, 0}));
  BOOST_TEST(logical_not(eq(a, 7.0)).to_vector() == (V{1, 0, 1, 0, 1, 1}));
  Tensor ia = from_vector(std::vector<std::int64_t>{4, -2}, {2});
  BOOST_TEST(masked_fill(ia, ne(ia, ia), 9).to_vector() == (V{4, -2}));
  BOOST_TEST(where(lt(ia, ia * 0.0), ia, ia * 10.0).to_vector() == (V{40, -2}));
  BOOST_TEST(abs(ia).to_vector() == (V{4, 2}));
  Tensor rows = from_vector({1, 0}, {2, 1}, DType::Bool);
  BOOST_TEST(masked_fill(a, rows, -1.0).to_vector() == (V{-1, -1, -1, 7, 2, 0}));
  BOOST_TEST(masked_fill(a.t(), rows.t(), -1.0).to_vector() == (V{-1, 7, -1, 2, -1, 0}));
  BOOST_TEST(where(rows, a, a * 10.0).to_vector() == (V{1, 7, 3, 70, 20, 0}));
  BOOST_TEST(where(rows.t(), a.t(), scalar_tensor(5.0)).to_vector() == (V{1, 5, 7, 5, 3, 5}));
  BOOST_TEST(pow(ia, 2.0).to_vector() == (V{16, 4}));
  BOOST_TEST(sum(a, {-1}, true).shape() == (Shape{2, 1}));
  BOOST_TEST(sum(scalar_tensor(3.0), {0}).item() == 3.0);
  BOOST_TEST(allclose(a, a + 1e-9));
  BOOST_TEST(!allclose(a, a + 1e-3));
  BOOST_TEST(broadcast_shapes({2, 1, 4}, {3, 1}, "op") == (Shape{2, 3, 4}));
}

BOOST_AUTO_TEST_CASE(tied_extrema_split_the_gradient) {
  Tensor a = from_vector({1, 3, 3}, {3}).requires_grad_();
  max(a).backward();
  BOOST_TEST(a.grad().to_vector() == (V{0, 0.5, 0.5}));
  Tensor x = from_vector({1, 2}, {2}).requires_grad_();
  Tensor y = from_vector({1, 1}, {2}).requires_grad_();
  maximum(x, y).sum().backward();
  BOOST_TEST(x.grad().to_vector() == (V{0.5, 1}));
  BOOST_TEST(y.grad().to_vector() == (V{0.5, 0}));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(ops_meta)

BOOST_AUTO_TEST_CASE(meta_inputs_give_meta_results) {
  TensorOptions m(DType::Float32, kMeta);
  Tensor a = empty({2, 1, 3, 4}, m), b = empty({5, 4, 2}, m);
  Tensor r = matmul(a, b);
  BOOST_TEST(r.is_meta());
  BOOST_TEST(r.shape() == (Shape{2, 5, 3, 2}));
  BOOST_TEST(add(a, empty({3, 1}, m)).shape() == (Shape{2, 1, 3, 4}));
  Tensor w = empty({7, 4}, m).requires_grad_();
  Tensor y = linear(a, w, empty({7}, m));
  BOOST_TEST(y.shape() == (Shape{2, 1, 3, 7}));
  BOOST_TEST(y.is_meta());
  BOOST_TEST(sum(a, {1, 3}).shape() == (Shape{2, 3}));
  BOOST_TEST(mean(a, {-1}, true).shape() == (Shape{2, 1, 3, 1}));
  BOOST_TEST(max(a, 2).second.shape() == (Shape{2, 1, 4}));
  BOOST_TEST(max(a, 2).second.dtype() == DType::Int64);
  BOOST_TEST(cat({a, a}, 1).shape() == (Shape{2, 2, 3, 4}));
  BOOST_TEST(exp(a).is_meta());
  BOOST_TEST(lt(a, a).dtype() == DType::Bool);
  BOOST_TEST(to_dtype(a, DType::BFloat16).dtype() == DType::BFloat16);
  BOOST_TEST(a.view({-1}).shape() == Shape{24});
  BOOST_TEST(index_select(a, 3, from_vector(std::vector<std::int64_t>{0, 1}, {2})).shape() ==
             (Shape{2, 1, 3, 2}));
  Tensor c = to_device(seq({2, 3}), kMeta);
  BOOST_TEST(c.is_meta());
  BOOST_TEST(c.shape() == (Shape{2, 3}));
  // Backward through meta tensors yields meta gradients.
  y.sum().backward();
  BOOST_TEST(w.grad().is_meta());
  BOOST_TEST(w.grad().shape() == (Shape{7, 4}));
}

BOOST_AUTO_TEST_CASE(devices_without_kernels_are_refused) {
  if (!has_kernels(Device(DeviceType::CUDA, 0)))  // else a build with the CUDA table
    BOOST_CHECK_THROW(to_device(seq({2}), Device(DeviceType::CUDA, 0)), NotImplementedError);
  BOOST_CHECK_THROW(to_device(empty({2}, TensorOptions(DType::Float32, kMeta)), kCPU),
                    NotImplementedError);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(ops_autograd)

BOOST_AUTO_TEST_CASE(inplace_change_of_a_saved_tensor_is_detected) {
  Tensor x = from_vector({1, 2}, {2}).requires_grad_();
  Tensor y = from_vector({3, 4}, {2});
  Tensor z = mul(x, y);  // saves y
  add_(y, ones({2}));
  try {
    z.sum().backward();
    BOOST_FAIL("expected an error");
  } catch (const RuntimeError& e) {
    BOOST_TEST(contains(e.what(), "modified by an inplace operation"));
  }
}

BOOST_AUTO_TEST_CASE(backward_twice_needs_retain_graph) {
  Tensor x = from_vector({1, 2}, {2}).requires_grad_();
  Tensor z = exp(x).sum();
  z.backward();
  try {
    z.backward();
    BOOST_FAIL("expected an error");
  } catch (const RuntimeError& e) {
    BOOST_TEST(contains(e.what(), "Trying to backward through the graph a second time"));
  }
  Tensor w = exp(x).sum();
  w.backward(Tensor(), true);
  w.backward();
  BOOST_TEST(std::abs(x.grad().to_vector()[0] - 3 * std::exp(1.0)) < 1e-5);
}

BOOST_AUTO_TEST_CASE(inplace_ops) {
  Tensor p = from_vector({1, 2}, {2}).requires_grad_();
  try {
    mul_(p, 2.0);
    BOOST_FAIL("expected an error");
  } catch (const RuntimeError& e) {
    BOOST_TEST(contains(e.what(),
                        "a leaf Variable that requires grad is being used in an "
                        "in-place operation."));
  }
  auto v0 = p.storage()->version();
  {
    autograd::NoGradGuard ng;
    add_(p, from_vector({1, 1}, {2}), -0.5);
    mul_(p, 2.0);
  }
  BOOST_TEST(p.storage()->version() == v0 + 2);
  BOOST_TEST(p.to_vector() == (V{1, 3}));
  Tensor h = ones({3}, DType::BFloat16);
  add_(h, scalar_tensor(0.5));
  BOOST_TEST(h.to_vector() == (V{1.5, 1.5, 1.5}));
  Tensor t = seq({2, 2});
  add_(t, t.t());  // source aliases the destination
  BOOST_TEST(t.to_vector() == (V{0, 3, 3, 6}));
  BOOST_CHECK_THROW(add_(t, ones({3})), RuntimeError);
}

BOOST_AUTO_TEST_CASE(grads_only_for_inputs_that_need_them) {
  Tensor x = from_vector({1, 2}, {2}).requires_grad_();
  Tensor c = from_vector({3, 4}, {2});
  Tensor y = mul(x, c);
  BOOST_TEST(y.requires_grad());
  BOOST_TEST(!mul(c, c).requires_grad());
  {
    autograd::NoGradGuard ng;
    BOOST_TEST(!mul(x, c).requires_grad());
  }
  y.sum().backward();
  BOOST_TEST(x.grad().to_vector() == (V{3, 4}));
  BOOST_TEST(!c.grad().defined());
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(ops_random)

BOOST_AUTO_TEST_CASE(seeded_and_replayable) {
  Generator g(42);
  auto state = g.get_state();
  Tensor a = rand({1000}, {}, &g);
  g.set_state(state);
  Tensor b = rand({1000}, {}, &g);
  BOOST_TEST(a.to_vector() == b.to_vector());
  for (double v : a.to_vector()) BOOST_TEST((v >= 0.0 && v < 1.0));
  manual_seed(7);
  Tensor c = randn({20000}, DType::Float64);
  manual_seed(7);
  BOOST_TEST(randn({20000}, DType::Float64).to_vector() == c.to_vector());
  BOOST_TEST(std::abs(mean(c).item()) < 0.03);
  BOOST_TEST(std::abs(std::sqrt(mean(mul(c, c)).item()) - 1.0) < 0.03);
  Tensor r = randint(-3, 4, {5000});
  BOOST_TEST(r.dtype() == DType::Int64);
  BOOST_TEST(amax(r, {0}).item() == 3.0);
  BOOST_TEST(amax(neg(r), {0}).item() == 3.0);
  Tensor u = empty({4000}, DType::BFloat16);
  uniform_(u, -2.0, 2.0);
  for (double v : u.to_vector()) BOOST_TEST((v >= -2.0 && v < 2.0));
  Tensor n = zeros({3, 4}).t();
  normal_(n, 5.0, 0.0);
  BOOST_TEST(n.to_vector() == V(12, 5.0));
  BOOST_TEST(rand({2}, TensorOptions(DType::Float32, kCPU, true)).requires_grad());
  BOOST_CHECK_THROW(rand({2}, DType::Int64), TypeError);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace fsdp::testing
