// torch's scalar and index semantics in core's ops, found silently different by a probe against
// torch 2.15 (each expected value and dtype below is torch 2.15's): a scalar keeps its kind
// (bool, integral, floating) and only raises the result's category (the "wrapped number"
// rule); an index outside [0, size) is refused, never wrapped; embedding's negative padding_idx
// counts from the end.
#include <boost/test/unit_test.hpp>
#include <string>

#include "core/autograd.h"
#include "core/ops.h"

namespace fsdp::testing {
namespace {

using V = std::vector<double>;

Tensor ints(std::initializer_list<double> v, DType dt = DType::Int32) {
  return from_vector(v, {static_cast<std::int64_t>(v.size())}, dt);
}

// f throws E whose message is exactly `message`.
template <typename E, typename F>
void expect_message(F&& f, const std::string& message) {
  try {
    f();
    BOOST_FAIL("expected an exception: " << message);
  } catch (const E& e) {
    BOOST_TEST(std::string(e.what()) == message);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(scalar_semantics)

BOOST_AUTO_TEST_CASE(a_scalar_keeps_its_kind) {
  BOOST_TEST(Scalar(2).is_integral());
  BOOST_TEST(Scalar(std::int64_t{1} << 40).to_int() == std::int64_t{1} << 40);
  BOOST_TEST(Scalar(2u).is_integral());
  BOOST_TEST(Scalar(2.0).is_floating_point());
  BOOST_TEST(Scalar(2.0f).is_floating_point());
  BOOST_TEST(Scalar(true).is_bool());
  BOOST_TEST(Scalar(2).str() == "2");
  BOOST_TEST(Scalar(2.0).str() == "2.0");
  BOOST_TEST(Scalar(0.5).str() == "0.5");
  BOOST_TEST(Scalar(true).str() == "True");
  BOOST_TEST((-Scalar(true)).str() == "-1");
  BOOST_TEST((-Scalar(2.5)).str() == "-2.5");
}

// torch: int32 * 2.0 is float32, int32 * 2 int32; bool * 2 int64, bool * 2.0 float32, bool * True
// bool; float16 * 2.0 float16.
BOOST_AUTO_TEST_CASE(a_floating_scalar_makes_an_integral_tensor_float32) {
  const Tensor i = ints({1, 2, 3}), b = ints({1, 0}, DType::Bool);
  struct Case {
    const char* what;
    Tensor got;
    DType dtype;
    V values;
  };
  const Case cases[] = {
      {"i * 2.0", i * 2.0, DType::Float32, {2, 4, 6}},
      {"i * 2", i * 2, DType::Int32, {2, 4, 6}},
      {"2.0 * i", 2.0 * i, DType::Float32, {2, 4, 6}},
      {"i + 0.5", i + 0.5, DType::Float32, {1.5, 2.5, 3.5}},
      {"i + 1", i + 1, DType::Int32, {2, 3, 4}},
      {"i + 1.0", i + 1.0, DType::Float32, {2, 3, 4}},
      {"i + True", i + true, DType::Int32, {2, 3, 4}},
      {"i - 1", i - 1, DType::Int32, {0, 1, 2}},
      {"i - 0.5", i - 0.5, DType::Float32, {0.5, 1.5, 2.5}},
      {"i * True", i * true, DType::Int32, {1, 2, 3}},
      {"div(i, 2)", div(i, 2), DType::Float32, {0.5, 1, 1.5}},
      {"i / 2.0", i / 2.0, DType::Float32, {0.5, 1, 1.5}},
      {"b / True", b / true, DType::Float32, {1, 0}},
      {"pow(i, 2)", pow(i, 2), DType::Int32, {1, 4, 9}},
      {"pow(i, 3)", pow(i, 3), DType::Int32, {1, 8, 27}},
      {"pow(i, 2.0)", pow(i, 2.0), DType::Float32, {1, 4, 9}},
      {"pow(i, True)", pow(i, true), DType::Int32, {1, 2, 3}},
      {"pow(b, 2)", pow(b, 2), DType::Int64, {1, 0}},
      {"pow(b, 0.5)", pow(b, 0.5), DType::Float32, {1, 0}},
      {"b * 2", b * 2, DType::Int64, {2, 0}},
      {"b * 2.0", b * 2.0, DType::Float32, {2, 0}},
      {"b * True", b * true, DType::Bool, {1, 0}},
      {"b + 1", b + 1, DType::Int64, {2, 1}},
      {"b + True", b + true, DType::Bool, {1, 1}},
      {"l * (2^40 + 1)",
       ints({1, 2}, DType::Int64) * ((std::int64_t{1} << 40) + 1),
       DType::Int64,
       {1099511627777.0, 2199023255554.0}},
      {"h * 2.0", ints({1.5}, DType::Float16) * 2.0, DType::Float16, {3}},
      {"h * 2", ints({1.5}, DType::Float16) * 2, DType::Float16, {3}},
      {"masked_fill(i, 2.5)",
       masked_fill(i, ints({1, 0, 0}, DType::Bool), 2.5),
       DType::Int32,
       {2, 2, 3}},
      {"masked_fill(b, 2)", masked_fill(b, ints({1, 0}, DType::Bool), 2), DType::Bool, {1, 0}},
  };
  for (const Case& c : cases) {
    BOOST_TEST_CONTEXT(c.what) {
      BOOST_TEST(c.got.dtype() == c.dtype);
      BOOST_TEST(c.got.to_vector() == c.values);
    }
  }
}

// Comparisons with a scalar run in the promoted dtype: int32 == 2.5 is false everywhere, a
// float32 tensor compares against the scalar rounded to float32 (0.1f == 0.1).
BOOST_AUTO_TEST_CASE(comparisons_with_a_scalar_use_the_promoted_dtype) {
  const Tensor i = ints({1, 2, 3}), b = ints({1, 0}, DType::Bool);
  BOOST_TEST(eq(i, 2.5).to_vector() == (V{0, 0, 0}));
  BOOST_TEST(eq(i, 2).to_vector() == (V{0, 1, 0}));
  BOOST_TEST(lt(i, 2.5).to_vector() == (V{1, 1, 0}));
  BOOST_TEST(ge(i, 2).to_vector() == (V{0, 1, 1}));
  BOOST_TEST(gt(b, 0).to_vector() == (V{1, 0}));
  BOOST_TEST(ne(b, 0.5).to_vector() == (V{1, 1}));
  BOOST_TEST(eq(b, 1).to_vector() == (V{1, 0}));
  BOOST_TEST(eq(b, 0.5).to_vector() == (V{0, 0}));
  BOOST_TEST(le(ints({1.5, 2}, DType::Float16), 1.5).to_vector() == (V{1, 0}));
  BOOST_TEST(eq(ints({0.1}, DType::Float32), 0.1).to_vector() == (V{1}));
  BOOST_TEST(eq(ints({0.1}, DType::Float64), 0.1).to_vector() == (V{1}));
  BOOST_TEST(lt(i, 2.5).dtype() == DType::Bool);
}

BOOST_AUTO_TEST_CASE(what_torch_refuses_is_refused_with_op_dtypes_and_shapes) {
  const Tensor i = ints({1, 2, 3});
  expect_message<RuntimeError>(
      [&] {
        Tensor t = ints({1, 2, 3});
        mul_(t, 2.0);
      },
      "mul_: result type float32 can't be cast to the desired output type int32 (tensor of "
      "shape [3], scalar 2.0)");
  expect_message<RuntimeError>(
      [&] {
        Tensor t = ints({1, 0}, DType::Bool);
        mul_(t, 2);
      },
      "mul_: result type int64 can't be cast to the desired output type bool (tensor of shape "
      "[2], scalar 2)");
  expect_message<RuntimeError>(
      [&] {
        Tensor t = ints({1, 2, 3});
        add_(t, ones({3}));
      },
      "add_: result type float32 can't be cast to the desired output type int32 (tensor of "
      "shape [3])");
  expect_message<RuntimeError>(
      [&] {
        Tensor t = ints({1, 2, 3}, DType::Int64);
        add_(t, ints({1, 1, 1}, DType::Int64), 0.5);
      },
      "add_: for integral input tensors, argument alpha must not be a floating point number "
      "(dtypes int64 and int64, shapes [3] and [3], alpha 0.5)");
  expect_message<RuntimeError>(
      [&] { add(i, i, 2.5); },
      "add: for integral input tensors, argument alpha must not be a floating point number "
      "(dtypes int32 and int32, shapes [3] and [3], alpha 2.5)");
  expect_message<RuntimeError>([&] { sub(ones({2}), ones({2}), true); },
                               "sub: a bool alpha is only supported for bool results (dtypes "
                               "float32 and float32, shapes [2] and [2], alpha True)");
  expect_message<RuntimeError>([&] { pow(i, -1); },
                               "pow: integers to negative integer powers are not allowed (tensor "
                               "of shape [3] and dtype int32, exponent -1)");
  expect_message<RuntimeError>([&] { pow(ints({1}, DType::Bool), -1); },
                               "pow: integers to negative integer powers are not allowed (tensor "
                               "of shape [1] and dtype bool, exponent -1)");
  expect_message<TypeError>(
      [&] {
        ints({1, 0}, DType::Bool) - 1;
      },
      "sub: subtraction with a bool tensor or scalar is not supported "
      "(tensor of shape [2] and dtype bool, scalar 1); to invert a mask use "
      "logical_not");
  // What torch allows: an integral alpha, an int64 operand into int32, a float to a negative power.
  BOOST_TEST(add(i, i, 2).to_vector() == (V{3, 6, 9}));
  Tensor t = ints({1});
  BOOST_TEST(add_(t, ints({1}, DType::Int64)).to_vector() == (V{2}));
  BOOST_TEST(t.dtype() == DType::Int32);
  BOOST_TEST(mul_(t, 2).to_vector() == (V{4}));
  Tensor bt = ints({1, 0}, DType::Bool);
  BOOST_TEST(mul_(bt, true).to_vector() == (V{1, 0}));
  BOOST_TEST(pow(ones({1}) * 2, -1).to_vector() == (V{0.5}));
  BOOST_TEST(add(ints({1}, DType::Bool), ints({1}, DType::Bool), true).to_vector() == (V{1}));
}

// The gradient of a float tensor's scalar ops does not depend on the scalar's kind.
BOOST_AUTO_TEST_CASE(gradients_are_those_of_the_value) {
  Tensor x = from_vector({1, 2}, {2}).requires_grad_();
  (pow(x, 3) * 2 + 1).backward(ones({2}));
  BOOST_TEST(x.grad().to_vector() == (V{6, 24}));
  BOOST_TEST(x.grad().dtype() == DType::Float32);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(index_semantics)

// torch refuses a negative or too large index ("index out of range in self"); ours names the op,
// the index, its position and the valid range, and wraps nothing.
BOOST_AUTO_TEST_CASE(an_index_outside_the_range_is_refused_naming_it_and_its_position) {
  const Tensor a = arange(5, DType::Float32);
  for (DType dt : {DType::Int64, DType::Int32}) {
    BOOST_TEST_CONTEXT(dtype_name(dt)) {
      expect_message<IndexError>(
          [&] {
            index_select(a, 0, ints({0, -1}, dt));
          },
          "index_select(): index -1 is out of bounds for dimension 0 with "
          "size 5 (valid indices are [0, 5)), at position 1 of the indices");
      expect_message<IndexError>(
          [&] {
            index_select(ones({2, 5}), 1, ints({4, 2, 5}, dt));
          },
          "index_select(): index 5 is out of bounds for dimension 1 with "
          "size 5 (valid indices are [0, 5)), at position 2 of the indices");
      expect_message<IndexError>(
          [&] {
            embedding(ones({3, 2}), ints({0, -1}, dt));
          },
          "embedding: index -1 is out of range for a table of 3 rows (weight "
          "shape [3, 2]), at position 1 of the indices");
      expect_message<IndexError>(
          [&] {
            embedding(ones({3, 2}), from_vector({0, 1, 2, 3}, {2, 2}, dt));
          },
          "embedding: index 3 is out of range for a table of 3 rows (weight shape [3, 2]), at "
          "position 3 of the indices");
      BOOST_TEST(index_select(a, 0, ints({4, 0}, dt)).to_vector() == (V{4, 0}));
    }
  }
  expect_message<IndexError>(
      [&] {
        cross_entropy(ones({2, 3}), ints({0, 3}, DType::Int64));
      },
      "cross_entropy: target 3 is out of bounds (expected a class index "
      "in [0, 3) or ignore_index -100), at position 1 of the targets");
}

// F.embedding(i, w, padding_idx=-1) is the last row: read in forward, no gradient; outside
// [-3, 3) refused as torch ("Padding_idx must be within num_embeddings").
BOOST_AUTO_TEST_CASE(a_negative_padding_idx_counts_from_the_end) {
  Tensor w = arange(6, DType::Float32).view({3, 2}).requires_grad_();
  Tensor out = embedding(w, ints({0, 2, 2, 1}, DType::Int64), -1);
  BOOST_TEST(out.to_vector() == (V{0, 1, 4, 5, 4, 5, 2, 3}));
  out.backward(ones({4, 2}));
  BOOST_TEST(w.grad().to_vector() == (V{1, 1, 1, 1, 0, 0}));
  // No padding row: every row read gets its gradient.
  Tensor w2 = arange(6, DType::Float32).view({3, 2}).requires_grad_();
  embedding(w2, ints({2}, DType::Int64)).backward(ones({1, 2}));
  BOOST_TEST(w2.grad().to_vector() == (V{0, 0, 0, 0, 1, 1}));
  BOOST_TEST(embedding(ones({3, 2}), ints({0}, DType::Int64), -3).to_vector() == (V{1, 1}));
  for (std::int64_t bad : {-4, 3})
    expect_message<AssertionError>(
        [&] {
          embedding(ones({3, 2}), ints({0}, DType::Int64), bad);
        },
        "Padding_idx must be within num_embeddings (got " + std::to_string(bad) +
            " for 3 embeddings; valid: [-3, 3))");
  BOOST_TEST(embedding_padding_row(-1, 3).value() == 2);
  BOOST_TEST(!embedding_padding_row(std::nullopt, 3).has_value());
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace fsdp::testing
