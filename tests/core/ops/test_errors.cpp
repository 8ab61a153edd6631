// Error types and messages: each names the op, the shapes or dtypes involved and the rule.
#include <boost/test/unit_test.hpp>

#include "core/ops.h"

namespace fsdp::testing {
namespace {

// Runs f, expecting exception E whose message contains every part.
template <typename E, typename F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    BOOST_FAIL("expected an exception");
  } catch (const E& e) {
    std::string msg = e.what();
    for (const auto& p : parts) BOOST_TEST_CONTEXT(msg) {
        BOOST_TEST(msg.find(p) != std::string::npos);
      }
  }
}

BOOST_AUTO_TEST_SUITE(ops_errors)

BOOST_AUTO_TEST_CASE(shape_mismatches_name_both_shapes) {
  expect_error<RuntimeError>(
      [] {
        matmul(ones({2, 3}), ones({4, 5}));
      },
      {"matmul", "[2, 3]", "[4, 5]", "3 != 4"});
  expect_error<RuntimeError>(
      [] {
        matmul(ones({7, 2, 3}), ones({2, 5}));
      },
      {"matmul", "[7, 2, 3]", "[2, 5]"});
  expect_error<RuntimeError>(
      [] {
        matmul(ones({2, 2, 3}), ones({3, 3, 1}));
      },
      {"matmul", "[2]", "[3]"});
  expect_error<RuntimeError>([] { matmul(scalar_tensor(1.0), ones({2})); }, {"matmul", "0D"});
  expect_error<RuntimeError>([] { mm(ones({2, 3}), ones({4, 5})); }, {"mm", "[2, 3]", "[4, 5]"});
  expect_error<RuntimeError>([] { bmm(ones({2, 2, 3}), ones({3, 3, 2})); }, {"bmm", "batch"});
  expect_error<RuntimeError>(
      [] {
        linear(ones({2, 3}), ones({4, 5}));
      },
      {"linear", "[2, 3]", "[4, 5]"});
  expect_error<RuntimeError>(
      [] {
        linear(ones({2, 5}), ones({4, 5}), ones({3}));
      },
      {"linear", "bias", "[3]"});
  expect_error<RuntimeError>(
      [] {
        add(ones({2, 3}), ones({4}));
      },
      {"add", "[2, 3]", "[4]", "broadcast"});
  expect_error<RuntimeError>([] { broadcast_shapes({2}, {3}, "myop"); }, {"myop", "[2]", "[3]"});
  expect_error<RuntimeError>(
      [] {
        cat({ones({2, 3}), ones({3, 2})}, 0);
      },
      {"cat", "Sizes of tensors must match except in dimension 0"});
  expect_error<RuntimeError>([] { stack({ones({2}), ones({3})}); }, {"stack", "[2]", "[3]"});
  expect_error<RuntimeError>([] { ones({3, 1}).expand({3, 4, 2}); }, {"expand", "[3, 4, 2]"});
  expect_error<RuntimeError>(
      [] {
        split_with_sizes(ones({5}), {2, 2});
      },
      {"split_with_sizes", "sum exactly to 5"});
  expect_error<RuntimeError>([] { ones({6}).view({4, -1}); }, {"invalid for input of size 6"});
  expect_error<RuntimeError>([] { ones({3}).narrow(0, 2, 2); }, {"narrow"});
}

BOOST_AUTO_TEST_CASE(bad_dims_are_index_errors) {
  expect_error<IndexError>(
      [] {
        sum(ones({2, 3}), {2});
      },
      {"sum", "Dimension out of range", "[-2, 1]", "got 2"});
  expect_error<IndexError>([] { ones({2, 3}).transpose(0, -3); }, {"transpose"});
  expect_error<IndexError>(
      [] {
        ones({2, 3}).select(1, 3);
      },
      {"select(): index 3 out of range", "[2, 3]", "dimension 1"});
  expect_error<IndexError>([] { ones({2}).unsqueeze(3); }, {"unsqueeze"});
  expect_error<IndexError>(
      [] { index_select(ones({2}), 0, from_vector(std::vector<std::int64_t>{2}, {1})); },
      {"index_select", "out of bounds"});
  BOOST_CHECK_THROW(sum(ones({2}), {0, -1}), RuntimeError);
}

BOOST_AUTO_TEST_CASE(dtype_errors) {
  expect_error<RuntimeError>(
      [] {
        mm(ones({2, 2}), ones({2, 2}, DType::Float64));
      },
      {"mm", "float32", "float64"});
  expect_error<TypeError>([] { masked_fill(ones({2}), ones({2}), 0.0); },
                          {"masked_fill", "bool", "float32"});
  expect_error<TypeError>([] { index_select(ones({2}), 0, ones({1})); }, {"index_select"});
  expect_error<TypeError>(
      [] {
        mm(ones({2, 2}, DType::Int64), ones({2, 2}, DType::Int64));
      },
      {"mm", "int64"});
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace fsdp::testing
