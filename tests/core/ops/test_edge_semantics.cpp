// Edge cases the fixtures miss, each found by a differential probe of core/ops.h against PyTorch
// 2.15 (seeded random cases: broadcasting of every rank pair, size-0 and size-1 dims, strided
// views, every dtype, NaN and infinities): the expected values are torch 2.15's.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/ops.h"

namespace fsdp::testing {
namespace {

using V = std::vector<double>;
const double kNaN = std::nan("");

// Element-wise equality where NaN equals NaN.
bool same(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  return true;
}

// f throws E and its message contains `part`.
template <typename E, typename F>
void expect_error(F&& f, const std::string& part) {
  try {
    f();
    BOOST_FAIL("expected an exception containing: " << part);
  } catch (const E& e) {
    BOOST_TEST(std::string(e.what()).find(part) != std::string::npos, e.what());
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ops_edges)

// An empty inner dimension folds no rows away: torch gives zeros of the product's shape.
BOOST_AUTO_TEST_CASE(products_with_an_empty_inner_or_output_dimension) {
  for (DType dt : {DType::Float32, DType::BFloat16, DType::Float16}) {
    BOOST_TEST_CONTEXT(dtype_name(dt)) {
      Tensor p = matmul(ones({3, 1, 0}, dt), ones({0, 2}, dt));
      BOOST_TEST(p.shape() == (Shape{3, 1, 2}));
      BOOST_TEST(p.to_vector() == V(6, 0.0));
      BOOST_TEST(matmul(ones({2, 1, 0}, dt), ones({0}, dt)).shape() == (Shape{2, 1}));
      // linear with in_features 0: the bias alone; its gradients have the empty shapes.
      Tensor x = ones({2, 0}, dt).requires_grad_(), w = ones({3, 0}, dt).requires_grad_();
      Tensor b = from_vector({1, 2, 3}, {3}, dt).requires_grad_();
      Tensor y = linear(x, w, b);
      BOOST_TEST(y.to_vector() == (V{1, 2, 3, 1, 2, 3}));
      y.backward(ones({2, 3}, dt));
      BOOST_TEST(x.grad().shape() == (Shape{2, 0}));
      BOOST_TEST(w.grad().shape() == (Shape{3, 0}));
      BOOST_TEST(b.grad().to_vector() == (V{2, 2, 2}));
      // out_features 0: an empty output, and zeros for the input's gradient.
      Tensor x2 = ones({2, 4}, dt).requires_grad_(), w2 = ones({0, 4}, dt).requires_grad_();
      Tensor y2 = linear(x2, w2);
      BOOST_TEST(y2.shape() == (Shape{2, 0}));
      y2.backward(ones({2, 0}, dt));
      BOOST_TEST(x2.grad().to_vector() == V(8, 0.0));
      BOOST_TEST(w2.grad().shape() == (Shape{0, 4}));
    }
  }
}

// A NaN maximum: max() gives the gradient to the NaN elements, split evenly (torch's
// evenly_distribute_backward); amax scales by the count of elements equal to the result, none
// when it is NaN, so that slice's gradient is NaN (0 * (g / 0)), as torch's amax backward.
BOOST_AUTO_TEST_CASE(gradients_of_a_nan_maximum) {
  for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16}) {
    BOOST_TEST_CONTEXT(dtype_name(dt)) {
      Tensor a = from_vector({1, kNaN, 3, kNaN}, {4}, dt).requires_grad_();
      max(a).backward();
      BOOST_TEST(a.grad().to_vector() == (V{0, 0.5, 0, 0.5}));
      Tensor b = from_vector({1, kNaN, 2, 3}, {2, 2}, dt).requires_grad_();
      amax(b, {1}).backward(ones({2}, dt));
      BOOST_TEST(same(b.grad().to_vector(), V{kNaN, kNaN, 0, 1}));
    }
  }
}

// relu's backward passes the gradient where the output is not <= 0, NaN included (torch's
// threshold_backward(grad, result, 0)).
BOOST_AUTO_TEST_CASE(relu_passes_the_gradient_of_a_nan) {
  for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16}) {
    BOOST_TEST_CONTEXT(dtype_name(dt)) {
      Tensor x = from_vector({-1, kNaN, 2, 0}, {4}, dt).requires_grad_();
      relu(x).backward(ones({4}, dt));
      BOOST_TEST(x.grad().to_vector() == (V{0, 1, 1, 0}));
    }
  }
}

// tanh and sigmoid of integer and bool tensors compute in the default float dtype, as exp does.
BOOST_AUTO_TEST_CASE(tanh_and_sigmoid_of_integers_are_float32) {
  Tensor t = tanh(from_vector({0, 1}, {2}, DType::Int32));
  BOOST_TEST(t.dtype() == DType::Float32);
  BOOST_TEST(t.to_vector()[1] == std::tanh(1.0f));
  Tensor s = sigmoid(from_vector({1, 0}, {2}, DType::Bool));
  BOOST_TEST(s.dtype() == DType::Float32);
  BOOST_TEST(s.to_vector() == (V{1 / (1 + std::exp(-1.0f)), 0.5}),
             boost::test_tools::tolerance(1e-7));
}

// What torch refuses on bool tensors: a subtraction with a bool operand (not only two), abs and
// argmax (max along a dim takes bools).
BOOST_AUTO_TEST_CASE(bool_operands_torch_refuses) {
  Tensor b = from_vector({1, 0}, {2}, DType::Bool);
  expect_error<TypeError>([&] { sub(ones({2}), b); }, "sub: subtraction with a bool tensor");
  expect_error<TypeError>([&] { sub(b, ones({2}, DType::Int64)); },
                          "(shapes [2] and [2], dtypes bool and int64)");
  expect_error<TypeError>([&] { ones({2}) - b; }, "to invert a mask use logical_not");
  expect_error<TypeError>([&] { abs(b); }, "abs: not implemented for bool tensors");
  expect_error<TypeError>([&] { argmax(b, 0); }, "argmax(): does not support bool input");
  BOOST_TEST(max(b, 0).second.item() == 0);
}

// masked_fill refuses a value its tensor's dtype cannot hold, as torch ("value cannot be
// converted to type int without overflow"): no integer holds NaN or an infinity, and a finite
// value beyond a float dtype's range is refused too; NaN and infinities fill float tensors.
BOOST_AUTO_TEST_CASE(masked_fill_refuses_a_value_the_dtype_cannot_hold) {
  Tensor m = from_vector({1, 0}, {2}, DType::Bool);
  const double inf = std::numeric_limits<double>::infinity();
  expect_error<RuntimeError>([&] { masked_fill(zeros({2}, DType::Int32), m, -inf); },
                             "masked_fill: value -inf cannot be converted to int32 without "
                             "overflow (tensor shape [2])");
  expect_error<RuntimeError>([&] { masked_fill(zeros({2}, DType::Int64), m, kNaN); }, "int64");
  expect_error<RuntimeError>([&] { masked_fill(zeros({2}, DType::Int32), m, 2147483648.0); },
                             "value 2147483648 cannot");
  expect_error<RuntimeError>([&] { masked_fill(zeros({2}, DType::UInt8), m, 300); }, "uint8");
  expect_error<RuntimeError>([&] { masked_fill(zeros({2}, DType::Float16), m, 65536); }, "float16");
  expect_error<RuntimeError>([&] { masked_fill(zeros({2}), m, 1e39); }, "float32");
  BOOST_TEST(masked_fill(zeros({2}, DType::Int32), m, 2147483647.0).to_vector()[0] == 2147483647);
  BOOST_TEST(masked_fill(zeros({2}, DType::Int64), m, 2147483648.0).to_vector()[0] == 2147483648);
  BOOST_TEST(std::isinf(masked_fill(zeros({2}, DType::Float16), m, -inf).to_vector()[0]));
  BOOST_TEST(std::isnan(masked_fill(zeros({2}, DType::BFloat16), m, kNaN).to_vector()[0]));
  BOOST_TEST(masked_fill(zeros({2}, DType::Bool), m, kNaN).to_vector() == (V{1, 0}));
  BOOST_TEST(masked_fill(zeros({2}, DType::Float64), m, 1e300).to_vector()[0] == 1e300);
}

// pow with exponent -0.5 is torch's rsqrt (as 0.5 is its sqrt): NaN for -inf, where the C
// library's pow gives 0; so is the gradient of pow(x, 0.5) there.
BOOST_AUTO_TEST_CASE(pow_minus_one_half_is_rsqrt) {
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dt : {DType::Float32, DType::Float64}) {
    BOOST_TEST_CONTEXT(dtype_name(dt)) {
      Tensor x = from_vector({-inf, 4, 0}, {3}, dt).requires_grad_();
      Tensor y = pow(x, -0.5);
      BOOST_TEST(same(y.to_vector(), V{kNaN, 0.5, inf}));
      y.backward(ones({3}, dt));
      BOOST_TEST(same(x.grad().to_vector(), V{-0.0, -0.0625, -inf}));
      Tensor z = from_vector({-inf, 4}, {2}, dt).requires_grad_();
      pow(z, 0.5).backward(ones({2}, dt));
      BOOST_TEST(same(z.grad().to_vector(), V{kNaN, 0.25}));
    }
  }
}

// index_select of a 0-d tensor is 0-d and takes exactly one index (torch: "Index to scalar can
// have only 1 value").
BOOST_AUTO_TEST_CASE(index_select_of_a_scalar) {
  Tensor a = scalar_tensor(5.0);
  for (Shape s : {Shape{}, Shape{1}}) {
    Tensor r = index_select(a, 0, zeros(s, DType::Int64));
    BOOST_TEST(r.shape() == Shape{});
    BOOST_TEST(r.item() == 5.0);
  }
  expect_error<IndexError>([&] { index_select(a, 0, zeros({2}, DType::Int64)); },
                           "index_select(): Index to scalar can have only 1 value, got 2 value(s)");
  expect_error<IndexError>([&] { index_select(a, 0, zeros({0}, DType::Int64)); }, "got 0 value(s)");
  BOOST_TEST(index_select(ones({1}), 0, zeros({}, DType::Int64)).shape() == Shape{1});
  Tensor leaf = scalar_tensor(5.0).requires_grad_();
  index_select(leaf, 0, zeros({1}, DType::Int64)).backward(scalar_tensor(3.0));
  BOOST_TEST(leaf.grad().shape() == Shape{});
  BOOST_TEST(leaf.grad().item() == 3.0);
}

// A size-1 dim's stride is never stepped, so a view may carry any (is_contiguous ignores it): q,
// k and v of one query or key, viewed from (.., D, 1) tensors transposed, have row stride 1,
// which BLAS refused as a leading dimension (the output was zeros). Torch's values are the
// dense tensors'.
BOOST_AUTO_TEST_CASE(attention_of_single_rows_viewed_with_any_row_stride) {
  Generator gen(3);
  for (DType dt : {DType::Float64, DType::Float32, DType::BFloat16}) {
    BOOST_TEST_CONTEXT(dtype_name(dt)) {
      for (std::int64_t kv : {1, 4}) {
        Tensor q0 = randn({1, 4, 8, 1}, dt, &gen), k0 = randn({1, kv, 8, 1}, dt, &gen);
        Tensor v0 = randn({1, kv, 8, 1}, dt, &gen), gout = randn({1, 4, 1, 8}, dt, &gen);
        std::vector<Tensor> grads[2], outs;
        for (int dense = 0; dense < 2; ++dense) {
          std::vector<Tensor> leaves = {q0.clone().requires_grad_(), k0.clone().requires_grad_(),
                                        v0.clone().requires_grad_()};
          std::vector<Tensor> in;
          for (const Tensor& l : leaves) {
            Tensor t = l.transpose(2, 3);  // (1, heads, 1, 8) with strides (.., 8, 1, 1)
            in.push_back(dense ? contiguous(t.reshape({-1})).view(t.shape()) : t);
          }
          BOOST_TEST_REQUIRE((dense || in[0].stride(2) == 1));
          Tensor out = scaled_dot_product_attention(in[0], in[1], in[2], {}, false, {}, kv == 1);
          out.backward(gout);
          outs.push_back(out);
          for (const Tensor& l : leaves) grads[dense].push_back(l.grad());
        }
        BOOST_TEST(outs[0].to_vector() == outs[1].to_vector());
        BOOST_TEST(std::abs(outs[1].to_vector()[0]) > 0);
        for (int i = 0; i < 3; ++i) BOOST_TEST(grads[0][i].to_vector() == grads[1][i].to_vector());
      }
    }
  }
}

// linear's bias may also be one value, 0-d or (1), added to every output feature (torch's
// addmm broadcasts it); its gradient sums over the features too.
BOOST_AUTO_TEST_CASE(linear_with_a_one_value_bias) {
  for (DType dt : {DType::Float64, DType::BFloat16}) {
    for (Shape bs : {Shape{}, Shape{1}}) {
      BOOST_TEST_CONTEXT(dtype_name(dt) << " bias " << shape_str(bs)) {
        Tensor x = from_vector({1, 2, 3, 4}, {2, 2}, dt);
        Tensor w = from_vector({1, 0, 0, 1, 1, 1}, {3, 2}, dt);
        Tensor b = full(bs, 0.5, dt).requires_grad_();
        Tensor y = linear(x, w, b);
        BOOST_TEST(y.to_vector() == (V{1.5, 2.5, 3.5, 3.5, 4.5, 7.5}));
        y.backward(from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, dt));
        BOOST_TEST(b.grad().shape() == bs);
        BOOST_TEST(b.grad().to_vector() == V{21});
      }
    }
  }
  expect_error<RuntimeError>(
      [] {
        linear(ones({2, 4}), ones({3, 4}), ones({4}));
      },
      "linear: bias of shape [4] does not match out_features 3");
}

// arange refuses what torch refuses instead of returning an empty or unbounded range: bounds
// that the step moves away from, infinite or NaN bounds, an infinite step.
BOOST_AUTO_TEST_CASE(arange_refuses_a_range_its_step_cannot_walk) {
  const double inf = std::numeric_limits<double>::infinity();
  expect_error<RuntimeError>([] { arange(0.0, 5.0, -1.0); },
                             "arange: upper bound and lower bound inconsistent with step sign "
                             "(start 0, end 5, step -1)");
  expect_error<RuntimeError>([] { arange(5.0, 0.0, 1.0); }, "inconsistent with step sign");
  expect_error<RuntimeError>([&] { arange(0.0, inf, 1.0); }, "arange: unsupported range: 0 -> inf");
  expect_error<RuntimeError>([&] { arange(kNaN, 1.0, 1.0); }, "unsupported range: nan -> 1");
  expect_error<RuntimeError>([&] { arange(0.0, 5.0, inf); }, "arange: step must be finite");
  BOOST_TEST(arange(0.0, 0.0, -1.0).numel() == 0);
  BOOST_TEST(arange(1.0, 0.0, -0.3, DType::Float64).to_vector().size() == 4u);
}

// An in-place write where several elements share one memory location (an expanded tensor) is
// refused, as torch's has_internal_overlap: add_ summed into one element three times. fill_
// writes one value, which torch allows; a size-1 dim's stride 0 shares nothing.
BOOST_AUTO_TEST_CASE(inplace_writes_into_an_expanded_tensor_are_refused) {
  autograd::NoGradGuard ng;
  const std::string shared =
      "more than one element of the written-to tensor refers to a single "
      "memory location (shape [3], strides [0])";
  Tensor base = ones({1});
  Tensor e = base.expand({3});
  expect_error<RuntimeError>([&] { add_(e, ones({3})); }, "add_: unsupported operation: " + shared);
  expect_error<RuntimeError>([&] { mul_(e, 2.0); }, "mul_: unsupported operation");
  expect_error<RuntimeError>([&] { e.copy_(arange(3.0, 6.0, 1.0, DType::Float32)); },
                             "copy_: unsupported operation");
  BOOST_TEST(base.item() == 1.0);
  e.fill_(2.0);
  BOOST_TEST(base.item() == 2.0);
  Tensor one = ones({1}).expand({1, 1});
  add_(one, ones({1, 1}));
  BOOST_TEST(one.item() == 2.0);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace fsdp::testing
