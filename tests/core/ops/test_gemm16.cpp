// 16-bit matrix products (core/kernels/cpu/gemm16.h through mm, bmm, matmul and linear) against the
// product of float32 copies of the operands rounded once, for bfloat16 and float16, contiguous,
// transposed and strided operands, sizes that cross the conversion blocks, degenerate sizes,
// bias, and the gradients of linear.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/random.h"

namespace fsdp::testing {
namespace {

// Blocking changes which OpenBLAS kernel (a full or an edge tile) sums an element, so its float32
// sum may differ from the reference's within float32's summation error, k * 2^-24 * sum |a b|,
// and then round to another 16-bit value: each element must be within that error plus one
// 16-bit ulp of the reference, and almost all must be equal.
void require_close(const Tensor& got, const Tensor& want, const Tensor& abs_sum, std::int64_t k) {
  BOOST_REQUIRE(got.shape() == want.shape());
  BOOST_REQUIRE(got.dtype() == want.dtype());
  const int mantissa = got.dtype() == DType::BFloat16 ? 7 : 10;
  auto g = got.to_vector(), w = want.to_vector(), bound = abs_sum.to_vector();
  std::int64_t differ = 0, beyond = 0, first = -1;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (g[i] == w[i]) continue;
    ++differ;
    const double ulp = std::ldexp(1.0, std::ilogb(std::max(std::abs(w[i]), 1e-30)) - mantissa);
    if (std::abs(g[i] - w[i]) > ulp + double(k) * std::ldexp(bound[i], -24)) {
      ++beyond;
      if (first < 0) first = std::int64_t(i);
    }
  }
  BOOST_TEST(beyond == 0, beyond << " of " << g.size() << " elements beyond the error bound, "
                                 << "first at " << first);
  BOOST_TEST(differ * 1000 <= std::int64_t(g.size()), differ << " of " << g.size() << " differ");
}

Tensor f64(const Tensor& t) {
  return t.to(DType::Float64);
}

// `got` is a . b in 16 bits.
void check_mm(const Tensor& got, const Tensor& a, const Tensor& b) {
  Tensor want = mm(a.to(DType::Float32), b.to(DType::Float32)).to(a.dtype());
  require_close(got, want, mm(abs(f64(a)), abs(f64(b))), a.size(1));
}

Tensor random(const Shape& shape, DType dt, Generator& g) {
  return randn(shape, TensorOptions(DType::Float32), &g).to(dt);
}

const DType kDtypes[] = {DType::BFloat16, DType::Float16};

}  // namespace

BOOST_AUTO_TEST_SUITE(gemm16)

BOOST_AUTO_TEST_CASE(mm_equals_float32_then_one_rounding_for_every_layout) {
  Generator g(7);
  for (DType dt : kDtypes) {
    // k = 1024: 256 rows per block, so m = 600 and n = 300 cross blocks.
    for (auto [m, k, n] : {std::tuple{600, 1024, 300}, {5, 3, 7}, {1, 64, 1}, {33, 1, 17}}) {
      BOOST_TEST_CONTEXT(dtype_name(dt) << " m " << m << " k " << k << " n " << n) {
        Tensor a = random({m, k}, dt, g), b = random({k, n}, dt, g);
        Tensor at = transpose(random({k, m}, dt, g), 0, 1);  // column-major a
        Tensor bt = transpose(random({n, k}, dt, g), 0, 1);  // column-major b (a weight^T)
        // Strided both ways: every other row and column of a bigger matrix.
        Tensor big = random({2 * m, 2 * k}, dt, g);
        Tensor as = make_view(big, {m, k}, {4 * k, 2}, 0);
        check_mm(mm(a, b), a, b);
        check_mm(mm(at, b), at, b);
        check_mm(mm(a, bt), a, bt);
        check_mm(mm(at, bt), at, bt);
        check_mm(mm(as, bt), as, bt);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(small_products_are_exactly_the_rounded_float32_product) {
  // One block: the same sgemm call as converting first, so the same bits.
  Generator g(5);
  for (DType dt : kDtypes) {
    Tensor a = random({20, 24}, dt, g), bt = transpose(random({12, 24}, dt, g), 0, 1);
    Tensor want = mm(a.to(DType::Float32), bt.to(DType::Float32)).to(dt);
    BOOST_TEST(mm(a, bt).to_vector() == want.to_vector(), boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE(an_empty_inner_dimension_gives_zeros) {
  for (DType dt : kDtypes) {
    Tensor a = zeros({3, 0}, TensorOptions(dt)), b = zeros({0, 4}, TensorOptions(dt));
    Tensor c = mm(a, b);
    BOOST_TEST(c.shape() == (Shape{3, 4}));
    for (double v : c.to_vector()) BOOST_TEST(v == 0.0);
  }
}

BOOST_AUTO_TEST_CASE(bmm_and_matmul_with_transposed_batches) {
  Generator g(11);
  for (DType dt : kDtypes) {
    Tensor a = random({3, 40, 24}, dt, g), b = random({3, 24, 56}, dt, g);
    Tensor bt = transpose(random({3, 56, 24}, dt, g), 1, 2);
    auto check = [](const Tensor& got, const Tensor& x, const Tensor& y) {
      Tensor want = bmm(x.to(DType::Float32), y.to(DType::Float32)).to(x.dtype());
      require_close(got, want, bmm(abs(f64(x)), abs(f64(y))), x.size(2));
    };
    check(bmm(a, b), a, b);
    check(bmm(a, bt), a, bt);
    check(matmul(a, bt), a, bt);
  }
}

BOOST_AUTO_TEST_CASE(linear_with_bias_and_its_gradients) {
  Generator g(13);
  for (DType dt : kDtypes) {
    Tensor x = random({4, 50, 96}, dt, g), w = random({130, 96}, dt, g);
    Tensor bias = random({130}, dt, g);
    Tensor want =
        linear(x.to(DType::Float32), w.to(DType::Float32), bias.to(DType::Float32)).to(dt);
    Tensor abs_sum = add(matmul(abs(f64(x)), transpose(abs(f64(w)), 0, 1)), abs(f64(bias)));
    require_close(linear(x, w, bias), want, abs_sum, 96);
    Tensor x2 = reshape(x, {-1, 96});
    check_mm(reshape(linear(x, w, Tensor()), {-1, 130}), x2, transpose(w, 0, 1));
    // Gradients: the backward products are 16-bit mms of transposed views.
    Tensor xr = x.clone().requires_grad_(), wr = w.clone().requires_grad_();
    Tensor gout = random({4, 50, 130}, dt, g);
    linear(xr, wr, bias).backward(gout);
    Tensor g2 = reshape(gout, {-1, 130});
    check_mm(reshape(xr.grad(), {-1, 96}), g2, w);
    check_mm(wr.grad(), transpose(g2, 0, 1), x2);
  }
}

// The input's gradient reads the weight through its strides: a transposed weight (a tied or
// transposed parameter) and an expanded one (stride 0) give the contiguous weight's gradient.
BOOST_AUTO_TEST_CASE(linear_input_gradient_of_a_transposed_or_expanded_weight) {
  Generator g(17);
  for (DType dt : kDtypes) {
    Tensor x = random({3, 40}, dt, g), gout = random({3, 24}, dt, g);
    Tensor col = random({24, 1}, dt, g);
    for (Tensor w : {transpose(random({40, 24}, dt, g), 0, 1), expand(col, {24, 40})}) {
      BOOST_TEST_REQUIRE(!w.is_contiguous());
      Tensor xr = x.clone().requires_grad_();
      linear(xr, w, Tensor()).backward(gout);
      Tensor want = x.clone().requires_grad_();
      linear(want, contiguous(w), Tensor()).backward(gout);
      BOOST_TEST(xr.grad().to_vector() == want.grad().to_vector());
      check_mm(xr.grad(), gout, w);
    }
  }
}

// Tensor::copy_ between float32 and a 16-bit dtype converts row by row when the rows are
// contiguous (every other row of a matrix here) and element by element otherwise: same values.
BOOST_AUTO_TEST_CASE(strided_casts_convert_like_the_scalar_converters) {
  Generator g(17);
  Tensor big = randn({8, 6}, TensorOptions(DType::Float32), &g);
  Tensor rows = make_view(big, {4, 6}, {12, 1}, 0);  // rows 0, 2, 4, 6
  Tensor cols = make_view(big, {8, 3}, {6, 2}, 1);   // columns 1, 3, 5
  for (DType dt : kDtypes)
    for (const Tensor& src : {rows, cols}) {
      Tensor half = empty(src.shape(), TensorOptions(dt));
      half.copy_(src);
      auto want = src.to_vector();
      auto got = half.to_vector();
      for (std::size_t i = 0; i < want.size(); ++i) {
        const float f = float(want[i]);
        const double rounded = dt == DType::BFloat16 ? bf16_to_float(float_to_bf16(f))
                                                     : half_to_float(float_to_half(f));
        BOOST_TEST(got[i] == rounded);
      }
      Tensor back = empty(src.shape(), TensorOptions(DType::Float32));
      make_view(back, back.shape(), back.strides(), 0).copy_(half);
      BOOST_TEST(back.to_vector() == got, boost::test_tools::per_element());
    }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace fsdp::testing
