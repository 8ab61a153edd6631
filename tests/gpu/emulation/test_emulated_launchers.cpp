// core/cuda's launchers, rewritten and compiled for the host (fsdp_cuda_kernels_emu_objs),
// against plain loops in double: the rewrite's launch forms (templates, a configuration over
// two lines, 2-D blocks) and the executor under kernels with warp shuffles, block reductions,
// shared memory, atomics and cudaMemsetAsync. Sizes off every block multiple; rows that start
// off a 16-byte boundary (vec_access.cuh's scalar head and tail).
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "core/cuda/kernels.h"
#include "tests/gpu/emulation/emu_test_runtime.h"
#include "tests/gpu/storage16.h"

namespace {

using fsdp::emu::test::take_fault;

std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(gen);
  return v;
}

// ||got - want|| / max(||want||, 1); infinity on a NaN (outputs start as NaN).
double relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1.0);
}

// Layer norm forward and backward in double, row by row.
struct LayerNormLoop {
  std::vector<double> y, mean, rstd, dx, dw, db;
  LayerNormLoop(const std::vector<float>& x, const std::vector<float>& w,
                const std::vector<float>& b, const std::vector<float>& dy, std::int64_t rows,
                std::int64_t cols)
      : y(rows * cols), mean(rows), rstd(rows), dx(rows * cols), dw(cols), db(cols) {
    for (std::int64_t r = 0; r < rows; ++r) {
      double m = 0, v = 0;
      for (std::int64_t c = 0; c < cols; ++c) m += x[r * cols + c];
      m /= cols;
      for (std::int64_t c = 0; c < cols; ++c) v += (x[r * cols + c] - m) * (x[r * cols + c] - m);
      const double rs = 1.0 / std::sqrt(v / cols + 1e-5);
      mean[r] = m;
      rstd[r] = rs;
      double mg = 0, mgx = 0;
      for (std::int64_t c = 0; c < cols; ++c) {
        const double xhat = (x[r * cols + c] - m) * rs, g = double(dy[r * cols + c]) * w[c];
        y[r * cols + c] = xhat * w[c] + b[c];
        mg += g / cols;
        mgx += g * xhat / cols;
        dw[c] += dy[r * cols + c] * xhat;
        db[c] += dy[r * cols + c];
      }
      for (std::int64_t c = 0; c < cols; ++c) {
        const double xhat = (x[r * cols + c] - m) * rs, g = double(dy[r * cols + c]) * w[c];
        dx[r * cols + c] = rs * (g - mg - xhat * mgx);
      }
    }
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(emulated_launchers)

// Layer norm against a loop in double. Shapes: 37 rows (the last forward block of 8 warps has
// 5; the backward's warps take rows 4 apart), 100 columns (not a multiple of a pack), 1100
// (wider than the backward's shared partial sums: each warp's partials in the scratch), 2000
// rows (more than the backward's 512 blocks x 4 warps: each warp takes several rows).
BOOST_AUTO_TEST_CASE(layer_norm_forward_and_backward_match_a_loop) {
  for (auto [rows, cols] :
       std::vector<std::pair<std::int64_t, std::int64_t>>{{37, 100}, {5, 1100}, {2050, 24}}) {
    const std::vector<float> x = random_floats(rows * cols, 1, 2.0f), w = random_floats(cols, 2),
                             b = random_floats(cols, 3), dy = random_floats(rows * cols, 4);
    std::vector<float> y(rows * cols, NAN), mean(rows, NAN), rstd(rows, NAN);
    fsdp::cuda::layer_norm_forward<float>(x.data(), w.data(), b.data(), y.data(), mean.data(),
                                          rstd.data(), rows, cols, 1e-5f, nullptr);
    std::vector<float> dx(rows * cols, NAN), dw(cols, NAN), db(cols, NAN);
    std::vector<float> scratch(fsdp::cuda::layer_norm_backward_scratch(rows, cols), NAN);
    fsdp::cuda::layer_norm_backward<float>(dy.data(), x.data(), w.data(), mean.data(), rstd.data(),
                                           dx.data(), dw.data(), db.data(), scratch.data(), rows,
                                           cols, nullptr);
    const LayerNormLoop want(x, w, b, dy, rows, cols);
    BOOST_TEST_CONTEXT(rows << "x" << cols) {
      BOOST_TEST(relative_error(y, want.y) <= 1e-5);
      BOOST_TEST(relative_error(mean, want.mean) <= 1e-5);
      BOOST_TEST(relative_error(rstd, want.rstd) <= 1e-5);
      BOOST_TEST(relative_error(dx, want.dx) <= 1e-5);
      BOOST_TEST(relative_error(dw, want.dw) <= 1e-5);
      BOOST_TEST(relative_error(db, want.db) <= 1e-5);
      // The same bits again (the partial sums' order is fixed), from poisoned outputs.
      std::vector<float> dx2(rows * cols, NAN), dw2(cols, NAN), db2(cols, NAN);
      std::fill(scratch.begin(), scratch.end(), NAN);
      fsdp::cuda::layer_norm_backward<float>(dy.data(), x.data(), w.data(), mean.data(),
                                             rstd.data(), dx2.data(), dw2.data(), db2.data(),
                                             scratch.data(), rows, cols, nullptr);
      BOOST_TEST(std::memcmp(dx2.data(), dx.data(), dx.size() * sizeof(float)) == 0);
      BOOST_TEST(std::memcmp(dw2.data(), dw.data(), dw.size() * sizeof(float)) == 0);
      BOOST_TEST(std::memcmp(db2.data(), db.data(), db.size() * sizeof(float)) == 0);
    }
  }
  BOOST_TEST(take_fault() == "");
}

// No rows: dweight and dbias are overwritten with zeros (a sum over nothing), dx untouched.
BOOST_AUTO_TEST_CASE(layer_norm_backward_of_no_rows_writes_zero_gradients) {
  const std::int64_t cols = 40;
  const std::vector<float> w = random_floats(cols, 2);
  std::vector<float> dw(cols, NAN), db(cols, NAN), scratch(1, NAN);
  BOOST_TEST(fsdp::cuda::layer_norm_backward_scratch(0, cols) == 0);
  fsdp::cuda::layer_norm_backward<float>(nullptr, nullptr, w.data(), nullptr, nullptr, nullptr,
                                         dw.data(), db.data(), scratch.data(), 0, cols, nullptr);
  BOOST_TEST(dw == std::vector<float>(cols, 0.0f), boost::test_tools::per_element());
  BOOST_TEST(db == std::vector<float>(cols, 0.0f), boost::test_tools::per_element());
  BOOST_TEST(take_fault() == "");
}

// bf16 rows with bf16 weight and bias (FSDP's bf16 parameters), read and written as they are:
// GPT's 768 columns (whole packs) and 770 (a scalar tail, rows off a 16-byte boundary).
BOOST_AUTO_TEST_CASE(layer_norm_of_bf16_rows_and_parameters_matches_a_loop) {
  using fsdp::cuda::bf16;
  const auto rounded = [](std::vector<float> v) {
    for (float& e : v)
      e = fsdp::cuda::testing::from_storage(fsdp::cuda::testing::to_storage<bf16>(e));
    return v;
  };
  const auto stored = [](const std::vector<float>& v) {
    std::vector<bf16> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = fsdp::cuda::testing::to_storage<bf16>(v[i]);
    return out;
  };
  const auto widened = [](const std::vector<bf16>& v) {
    std::vector<float> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = fsdp::cuda::testing::from_storage(v[i]);
    return out;
  };
  for (auto [rows, cols] :
       std::vector<std::pair<std::int64_t, std::int64_t>>{{37, 768}, {6, 770}}) {
    const std::vector<float> x = rounded(random_floats(rows * cols, 5, 2.0f)),
                             w = rounded(random_floats(cols, 6)),
                             b = rounded(random_floats(cols, 7)),
                             dy = rounded(random_floats(rows * cols, 8));
    const std::vector<bf16> xs = stored(x), ws = stored(w), bs = stored(b), dys = stored(dy);
    std::vector<bf16> y(rows * cols), dx(rows * cols), dw(cols), db(cols);
    std::vector<float> mean(rows, NAN), rstd(rows, NAN);
    std::vector<float> scratch(fsdp::cuda::layer_norm_backward_scratch(rows, cols), NAN);
    fsdp::cuda::layer_norm_forward<bf16, bf16>(xs.data(), ws.data(), bs.data(), y.data(),
                                               mean.data(), rstd.data(), rows, cols, 1e-5f,
                                               nullptr);
    fsdp::cuda::layer_norm_backward<bf16, bf16>(dys.data(), xs.data(), ws.data(), mean.data(),
                                                rstd.data(), dx.data(), dw.data(), db.data(),
                                                scratch.data(), rows, cols, nullptr);
    const LayerNormLoop want(x, w, b, dy, rows, cols);
    BOOST_TEST_CONTEXT(rows << "x" << cols) {
      BOOST_TEST(relative_error(widened(y), want.y) <= 1e-2);
      BOOST_TEST(relative_error(rstd, want.rstd) <= 1e-5);
      BOOST_TEST(relative_error(widened(dx), want.dx) <= 1e-2);
      BOOST_TEST(relative_error(widened(dw), want.dw) <= 1e-2);
      BOOST_TEST(relative_error(widened(db), want.db) <= 1e-2);
    }
  }
  BOOST_TEST(take_fault() == "");
}

BOOST_AUTO_TEST_CASE(sum_over_rows_and_sum_of_squares_match_a_loop) {
  // 1000 x 70: three 32-column strips (the last partial), row chunks over grid.y; blocks (32, 8).
  const std::int64_t rows = 1000, cols = 70;
  const std::vector<float> in = random_floats(rows * cols, 5);
  std::vector<float> sums(cols, NAN), squares(1, NAN);
  fsdp::cuda::sum_over_rows<float>(in.data(), sums.data(), rows, cols, nullptr);
  fsdp::cuda::sum_of_squares<float>(in.data(), squares.data(), rows * cols, nullptr);
  std::vector<double> want(cols), want_sq(1);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      want[c] += in[r * cols + c];
      want_sq[0] += double(in[r * cols + c]) * in[r * cols + c];
    }
  BOOST_TEST(relative_error(sums, want) <= 1e-5);
  BOOST_TEST(relative_error(squares, want_sq) <= 1e-5);
  BOOST_TEST(take_fault() == "");
}

BOOST_AUTO_TEST_CASE(softmax_rows_along_a_middle_dim_matches_a_loop) {
  // (outer 3, n 300, inner 5): rows strided by 5, n past the block's 256 threads; log and not.
  const std::int64_t outer = 3, n = 300, inner = 5;
  const std::vector<float> x = random_floats(outer * n * inner, 6, 3.0f);
  for (bool take_log : {false, true}) {
    std::vector<float> y(x.size(), NAN), lse(outer * inner, NAN);
    fsdp::cuda::softmax_rows<float>(x.data(), nullptr, y.data(), outer, n, inner, 0, take_log,
                                    nullptr, lse.data());
    std::vector<double> want(x.size()), want_lse(outer * inner);
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t i = 0; i < inner; ++i) {
        double mx = -INFINITY, s = 0;
        for (std::int64_t k = 0; k < n; ++k) mx = std::max<double>(mx, x[(o * n + k) * inner + i]);
        for (std::int64_t k = 0; k < n; ++k) s += std::exp(x[(o * n + k) * inner + i] - mx);
        const double l = mx + std::log(s);
        want_lse[o * inner + i] = l;
        for (std::int64_t k = 0; k < n; ++k) {
          const double v = x[(o * n + k) * inner + i];
          want[(o * n + k) * inner + i] = take_log ? v - l : std::exp(v - l);
        }
      }
    BOOST_TEST(relative_error(y, want) <= 1e-5, "log " << take_log);
    BOOST_TEST(relative_error(lse, want_lse) <= 1e-5, "log " << take_log);
  }
  BOOST_TEST(take_fault() == "");
}

BOOST_AUTO_TEST_CASE(fused_cross_entropy_in_place_matches_a_loop) {
  // 5 rows of 1000 classes (512 threads a row), row 2 ignored; dlogits overwrite the logits.
  const std::int64_t n = 5, vocab = 1000;
  const std::int32_t ignore = -100;
  const std::vector<float> logits = random_floats(n * vocab, 7, 2.0f);
  const std::vector<std::int32_t> target = {3, 999, ignore, 0, 512};
  const float scale = 0.25f;
  std::vector<float> d = logits, losses(n, NAN);
  fsdp::cuda::cross_entropy_forward_backward<float>(d.data(), target.data(), losses.data(),
                                                    d.data(), n, vocab, ignore, scale, nullptr);
  std::vector<double> want_d(n * vocab), want_loss(n);
  for (std::int64_t r = 0; r < n; ++r) {
    if (target[r] == ignore) continue;
    double mx = -INFINITY, s = 0;
    for (std::int64_t j = 0; j < vocab; ++j) mx = std::max<double>(mx, logits[r * vocab + j]);
    for (std::int64_t j = 0; j < vocab; ++j) s += std::exp(logits[r * vocab + j] - mx);
    const double lse = mx + std::log(s);
    want_loss[r] = lse - logits[r * vocab + target[r]];
    for (std::int64_t j = 0; j < vocab; ++j)
      want_d[r * vocab + j] =
          scale * (std::exp(logits[r * vocab + j] - lse) - (j == target[r] ? 1.0 : 0.0));
  }
  BOOST_TEST(relative_error(losses, want_loss) <= 1e-5);
  BOOST_TEST(relative_error(d, want_d) <= 1e-5);
  BOOST_TEST(take_fault() == "");
}

BOOST_AUTO_TEST_CASE(class_loss_rows_in_packs_keep_the_infinities_and_nan) {
  // train_gpt's (n, c, 1) logits from one element in (a scalar head, 16-byte packs, a tail):
  // the one-pass max and sum of exps (rescaled as the max grows) against a loop, -inf scores
  // adding nothing (a row of them: lse -inf), a NaN giving NaN.
  const std::int64_t n = 4, c = 37;
  std::vector<float> buffer = random_floats(1 + n * c, 8, 3.0f);
  float* x = buffer.data() + 1;
  for (std::int64_t k = 0; k < c; ++k) x[c + k] = -INFINITY;
  x[2 * c + 5] = NAN;
  for (std::int64_t k : {0, 1, 2, 20, 36}) x[3 * c + k] = -INFINITY;
  const std::vector<std::int64_t> target = {3, 4, 0, 7};
  fsdp::IndexBounds bounds;
  bounds.op = fsdp::IndexOp::CrossEntropy;
  bounds.size = c;
  bounds.ignore = -100;
  bounds.ignores = true;
  fsdp::cuda::IndexFault fault{};
  std::vector<double> losses(n, NAN), lse(n, NAN);
  fsdp::cuda::cross_entropy_positions<float>(x, target.data(), losses.data(), lse.data(), n, c, 1,
                                             bounds, &fault, 0.0, nullptr);
  const std::vector<double> grads(n, 0.5);
  std::vector<float> dx_buffer(1 + n * c, NAN);
  float* dx = dx_buffer.data() + 1;
  fsdp::cuda::cross_entropy_positions_backward<float>(
      x, lse.data(), target.data(), grads.data(), true, dx, n, c, 1, bounds, &fault, 0.0, nullptr);
  for (std::int64_t r : {0, 3}) {
    double mx = -INFINITY, sum = 0;
    for (std::int64_t k = 0; k < c; ++k) mx = std::max<double>(mx, x[r * c + k]);
    for (std::int64_t k = 0; k < c; ++k) sum += std::exp(x[r * c + k] - mx);
    const double want = mx + std::log(sum);
    // Each thread's exps and sums in float (as the CPU table's float32 path), folded in double.
    BOOST_TEST(std::abs(lse[r] - want) <= 1e-6 * std::abs(want), "row " << r);
    BOOST_TEST(std::abs(losses[r] - (want - x[r * c + target[r]])) <= 1e-6 * std::abs(want));
    for (std::int64_t k = 0; k < c; ++k) {
      const double d = 0.5 * (std::exp(x[r * c + k] - want) - (k == target[r] ? 1.0 : 0.0));
      BOOST_TEST(std::abs(dx[r * c + k] - d) <= 1e-6, "row " << r << " class " << k);
    }
  }
  BOOST_TEST(lse[1] == -INFINITY);
  BOOST_TEST(std::isnan(lse[2]));
  BOOST_TEST(std::isnan(losses[2]));
  for (std::int64_t k : {0, 1, 2, 20, 36}) BOOST_TEST(dx[3 * c + k] == 0.0f);  // exp(-inf)
  BOOST_TEST(std::isnan(dx_buffer[0]));  // before the view: not written
  BOOST_TEST(fault.ready == 0);
  BOOST_TEST(take_fault() == "");
}

BOOST_AUTO_TEST_SUITE_END()
