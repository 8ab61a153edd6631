// The 16-bit paths of GELU and layer norm convert a chunk (a block of rows) at a time instead of
// whole float32 copies: their values and gradients equal the float32 computation on the
// converted inputs, rounded once, on sizes that span several chunks.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/functional/masked_softmax.h"
#include "core/kernels/kernel_table.h"
#include "core/ops.h"
#include "tests/core/functional/functional_check.h"

namespace fsdp::testing {
namespace {

std::vector<double> values(const Tensor& t) {
  return t.to_vector();
}

// The largest difference between two tensors over the largest magnitude of `want`.
double relative_to_scale(const Tensor& got_t, const Tensor& want_t) {
  const auto got = values(got_t), want = values(want_t);
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    diff = std::max(diff, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(kernels_16bit)

BOOST_AUTO_TEST_CASE(gelu_in_chunks_equals_float32_rounded) {
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    for (const std::string approximate : {"none", "tanh"}) {
      manual_seed(7);
      Tensor x = converted(randn({3, 2501}), dt), g = converted(randn({3, 2501}), dt);
      Tensor xs = x.clone().requires_grad_();
      Tensor y = gelu(xs, approximate);
      y.backward(g);
      Tensor x32 = converted(x, DType::Float32).requires_grad_();
      Tensor y32 = gelu(x32, approximate);
      y32.backward(converted(g, DType::Float32));
      BOOST_TEST_CONTEXT(dtype_name(dt) << " approximate=" << approximate) {
        BOOST_TEST(y.dtype() == dt);
        BOOST_TEST(values(y) == values(converted(y32, dt)));
        BOOST_TEST(values(xs.grad()) == values(converted(x32.grad(), dt)));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(layer_norm_in_row_blocks_equals_float32_rounded) {
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    manual_seed(8);
    // 4 100 rows of 8: the 16-bit path works in blocks of 2 048 rows.
    Tensor x = converted(add(mul(randn({4100, 8}), 3.0), 1.0), dt);
    Tensor g = converted(randn({4100, 8}), dt);
    Tensor w = converted(randn({8}), dt), b = converted(randn({8}), dt);
    Tensor xs = x.clone().requires_grad_(), ws = w.clone().requires_grad_(),
           bs = b.clone().requires_grad_();
    Tensor y = layer_norm(xs, {8}, ws, bs, 1e-5);
    y.backward(g);
    Tensor x32 = converted(x, DType::Float32).requires_grad_();
    Tensor w32 = converted(w, DType::Float32).requires_grad_();
    Tensor b32 = converted(b, DType::Float32).requires_grad_();
    Tensor y32 = layer_norm(x32, {8}, w32, b32, 1e-5);
    y32.backward(converted(g, DType::Float32));
    BOOST_TEST_CONTEXT(dtype_name(dt)) {
      BOOST_TEST(values(y) == values(converted(y32, dt)));
      BOOST_TEST(values(xs.grad()) == values(converted(x32.grad(), dt)));
      // The weight and bias gradients are sums over rows in double, rounded once to 16 bits
      // (through float32 on the other side): equal to within one 16-bit step.
      const auto gw = values(ws.grad()), gw32 = values(w32.grad());
      for (std::size_t i = 0; i < gw.size(); ++i)
        BOOST_TEST(std::abs(gw[i] - gw32[i]) <= 1e-2 * std::max(1.0, std::abs(gw32[i])));
      const auto gb = values(bs.grad()), gb32 = values(b32.grad());
      for (std::size_t i = 0; i < gb.size(); ++i)
        BOOST_TEST(std::abs(gb[i] - gb32[i]) <= 1e-2 * std::max(1.0, std::abs(gb32[i])));
    }
  }
}

// The kernels take the parameters in their own dtype (float32 beside 16-bit rows, or the rows'
// dtype) and write their gradients in it; a weight and a bias of two dtypes go through float32.
// Each gradient comes back in its parameter's dtype, equal to the float32 computation's.
BOOST_AUTO_TEST_CASE(layer_norm_gradients_come_back_in_each_parameters_dtype) {
  manual_seed(10);
  Tensor x = converted(add(randn({300, 24}), 2.0), DType::BFloat16);
  Tensor g = converted(randn({300, 24}), DType::BFloat16);
  Tensor w = randn({24}), b = randn({24});
  Tensor x32 = converted(x, DType::Float32).requires_grad_();
  Tensor w32 = w.clone().requires_grad_(), b32 = b.clone().requires_grad_();
  layer_norm(x32, {24}, w32, b32, 1e-5).backward(converted(g, DType::Float32));
  for (auto [wd, bd] : std::vector<std::pair<DType, DType>>{{DType::Float32, DType::Float32},
                                                            {DType::BFloat16, DType::Float32},
                                                            {DType::Float32, DType::BFloat16}}) {
    Tensor xs = x.clone().requires_grad_();
    Tensor ws = converted(w, wd).requires_grad_(), bs = converted(b, bd).requires_grad_();
    layer_norm(xs, {24}, ws, bs, 1e-5).backward(g);
    BOOST_TEST_CONTEXT("weight " << dtype_name(wd) << ", bias " << dtype_name(bd)) {
      BOOST_TEST(ws.grad().dtype() == wd);
      BOOST_TEST(bs.grad().dtype() == bd);
      BOOST_TEST(xs.grad().dtype() == DType::BFloat16);
      // One bf16 rounding of the inputs apart (the weight's, where it is bf16), and of the
      // 16-bit gradients.
      for (auto [got, want] : {std::pair{ws.grad(), w32.grad()}, std::pair{bs.grad(), b32.grad()},
                               std::pair{xs.grad(), x32.grad()}}) {
        const auto gv = values(got), wv = values(want);
        for (std::size_t i = 0; i < gv.size(); ++i)
          BOOST_TEST(std::abs(gv[i] - wv[i]) <= 2e-2 * std::max(1.0, std::abs(wv[i])));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(softmax_in_row_blocks_equals_float32_rounded) {
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    for (bool log : {false, true}) {
      manual_seed(9);
      // 3 000 rows of 24: several blocks of rows.
      Tensor x = converted(mul(randn({10, 300, 24}), 4.0), dt);
      Tensor g = converted(randn({10, 300, 24}), dt);
      Tensor xs = x.clone().requires_grad_();
      Tensor y = log ? log_softmax(xs, -1) : softmax(xs, -1);
      y.backward(g);
      Tensor x32 = converted(x, DType::Float32).requires_grad_();
      Tensor y32 = log ? log_softmax(x32, -1) : softmax(x32, -1);
      y32.backward(converted(g, DType::Float32));
      BOOST_TEST_CONTEXT(dtype_name(dt) << (log ? " log_softmax" : " softmax")) {
        BOOST_TEST(values(y) == values(converted(y32, dt)));
        // Backward reads the saved output, rounded to 16 bits here and not in float32 (and
        // y * (g - sum(g y)) cancels): close to the float32 gradient on its scale, not equal.
        BOOST_TEST(xs.grad().dtype() == dt);
        BOOST_TEST(relative_to_scale(xs.grad(), x32.grad()) <= 2e-2);
      }
    }
  }
}

// The kernel table's softmax reads x as (outer, n, inner): a 16-bit x with inner > 1 (the
// functional layer sends only inner == 1 rows, but the table's contract, and the device tables
// it is the oracle of, take any) equals the float32 kernel's values rounded once.
BOOST_AUTO_TEST_CASE(softmax_kernel_16bit_with_inner_equals_float32_rounded) {
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    for (bool log : {false, true}) {
      manual_seed(10);
      const std::int64_t outer = 700, n = 5, inner = 3;  // several row blocks
      Tensor x = converted(mul(randn({outer, n, inner}), 3.0), dt);
      Tensor g = converted(randn({outer, n, inner}), dt);
      Tensor x32 = converted(x, DType::Float32), g32 = converted(g, DType::Float32);
      const KernelTable& k = kernels(kCPU);
      Tensor y = empty({outer, n, inner}, TensorOptions(dt)), y32 = empty({outer, n, inner});
      k.softmax(y, x, outer, n, inner, log);
      k.softmax(y32, x32, outer, n, inner, log);
      Tensor dx = empty({outer, n, inner}, TensorOptions(dt)), dx32 = empty({outer, n, inner});
      k.softmax_backward(dx, y, g, outer, n, inner, log);
      k.softmax_backward(dx32, converted(y, DType::Float32), g32, outer, n, inner, log);
      BOOST_TEST_CONTEXT(dtype_name(dt) << (log ? " log_softmax" : " softmax")) {
        BOOST_TEST(values(y) == values(converted(y32, dt)));
        BOOST_TEST(values(dx) == values(converted(dx32, dt)));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(masked_softmax_16bit_is_the_float32_softmax_of_the_unrounded_sum) {
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    for (const Shape& mask_shape : {Shape{40, 30}, Shape{1, 40, 30}, Shape{6, 40, 30}}) {
      manual_seed(10);
      Tensor scores = converted(mul(randn({6, 40, 30}), 3.0), dt);
      Tensor mask = converted(randn(mask_shape), dt);
      // Masked-out entries.
      mask = masked_fill(mask, gt(randn(mask_shape), full(mask_shape, 1.0)),
                         -std::numeric_limits<double>::infinity());
      Tensor s = scores.clone().requires_grad_();
      Tensor y = masked_softmax(s, mask);
      Tensor g = converted(randn({6, 40, 30}), dt);
      y.backward(g);
      // The reference: softmax in float32 of scores + mask summed in float32, rounded once.
      Tensor s32 = converted(scores, DType::Float32).requires_grad_();
      Tensor y32 = softmax(add(s32, converted(mask, DType::Float32)), -1);
      y32.backward(converted(g, DType::Float32));
      BOOST_TEST_CONTEXT(dtype_name(dt) << " mask " << shape_str(mask_shape)) {
        BOOST_TEST(y.dtype() == dt);
        BOOST_TEST(values(y) == values(converted(y32, dt)));
        BOOST_TEST(relative_to_scale(s.grad(), s32.grad()) <= 2e-2);
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace fsdp::testing
