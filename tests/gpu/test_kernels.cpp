// Op-by-op parity of core/cuda's kernels with the CPU: the oracle is the project's own CPU op
// (core/ops.h, core/functional, core/optim) wherever one exists, a plain loop otherwise. Fresh
// random inputs, NaN-poisoned outputs, relative-norm tolerances (gpu_test_support.h), float, bf16
// and fp16 storage, sizes of 1, odd, not multiples of a block, and beyond one grid's coverage.
#define BOOST_TEST_MODULE gpu_kernels
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/cuda/flash_attention.h"
#include "core/cuda/kernels.h"
#include "core/functional/masked_softmax.h"
#include "core/ops.h"
#include "core/ops/blocked_attention.h"
#include "core/optim/update_kernels.h"
#include "core/tensor.h"
#include "tests/gpu/gpu_test_support.h"

using namespace fsdp;
using namespace fsdp::cuda;
using namespace fsdp::cuda::testing;

BOOST_TEST_GLOBAL_FIXTURE(RequireDevice);

namespace {

using StorageTypes = std::tuple<float, bf16, fp16>;
using Storage16 = std::tuple<bf16, fp16>;

template <typename T>
const char* storage_name() {
  return std::is_same_v<T, float> ? "fp32" : std::is_same_v<T, bf16> ? "bf16" : "fp16";
}

Tensor cpu(const std::vector<float>& v, const Shape& shape, bool requires_grad = false) {
  Tensor t = from_vector(std::vector<double>(v.begin(), v.end()), shape);
  if (requires_grad) t.requires_grad_();
  return t;
}
Tensor cpu_index(const std::vector<std::int32_t>& v) {
  return from_vector(std::vector<std::int64_t>(v.begin(), v.end()),
                     {static_cast<std::int64_t>(v.size())});
}
std::vector<double> values(const Tensor& t) {
  return t.to_vector();
}

// 3,000,017 elements need more than grid_for's capped grid: the grid-stride loop does the rest.
const std::vector<std::int64_t> kFlatSizes = {1, 7, 1000, 257 * 1024 + 3, 3000017};
static_assert(3000017 > kMaxBlocks * kThreads);
// (rows, cols): one row, one column, odd, a GPT row (768), wider than 32 lanes x 32.
const std::vector<std::pair<std::int64_t, std::int64_t>> kRowShapes = {
    {1, 1}, {1, 768}, {3, 5}, {37, 33}, {129, 768}, {7, 1031}, {20001, 3}};

// `values` stored from element `offset` of a poisoned device buffer: a view that is not 16-byte
// aligned unless offset * sizeof(T) is a multiple of 16; download_from reads it back.
template <typename T>
std::unique_ptr<DeviceBuffer<T>> stored_at(const std::vector<float>& values, int offset) {
  std::vector<float> padded(offset, NAN);
  padded.insert(padded.end(), values.begin(), values.end());
  return std::make_unique<DeviceBuffer<T>>(padded);
}
template <typename T>
std::vector<float> download_from(const DeviceBuffer<T>& b, int offset) {
  const std::vector<float> all = b.download();
  return std::vector<float>(all.begin() + offset, all.end());
}

}  // namespace

BOOST_AUTO_TEST_CASE_TEMPLATE(fill_writes_every_element, T, StorageTypes) {
  for (std::int64_t n : kFlatSizes) {
    DeviceBuffer<T> out(n);
    fill(out.get(), 0.375f, n, nullptr);
    FSDP_CHECK_CLOSE("fill n=" << n, out.download(), std::vector<float>(n, 0.375f), 0.0);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(cast_rounds_to_nearest_even_and_back, T, Storage16) {
  for (std::int64_t n : kFlatSizes) {
    std::vector<float> x = randn(n, 3.0f);
    DeviceBuffer<float> in(x);
    DeviceBuffer<T> half(n);
    DeviceBuffer<float> back(n);
    cast(in.get(), half.get(), n, nullptr);
    cast(half.get(), back.get(), n, nullptr);
    // Exactly the host's round-to-nearest-even: cast is a rounding, not an approximation.
    FSDP_CHECK_CLOSE("cast fp32->" << storage_name<T>() << " n=" << n, half.download(),
                     stored<T>(x), 0.0);
    FSDP_CHECK_CLOSE("cast " << storage_name<T>() << "->fp32 n=" << n, back.download(),
                     stored<T>(x), 0.0);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(broadcast_add_and_mul_match_the_cpu_ops, T, StorageTypes) {
  const std::vector<std::pair<Shape, Shape>> cases = {{{1}, {1}},
                                                      {{7}, {1}},
                                                      {{4, 768}, {768}},
                                                      {{33, 5}, {33, 1}},
                                                      {{2, 3, 5}, {3, 1}},
                                                      {{1, 9}, {17, 1}},
                                                      {{3000017}, {3000017}},
                                                      {{2, 5, 4, 1, 3}, {5, 1, 1, 1}}};
  for (const auto& [sa, sb] : cases) {
    const BroadcastGeometry g = broadcast_geometry(sa, sb, "test");
    std::vector<float> a = stored<T>(randn(shape_numel(sa))), b = stored<T>(randn(shape_numel(sb)));
    DeviceBuffer<T> da(a), db(b), out(g.numel);
    for (BinaryOp op : {BinaryOp::Add, BinaryOp::Mul}) {
      out.poison();
      binary(op, da.get(), db.get(), out.get(), g, nullptr);
      Tensor ref = op == BinaryOp::Add ? add(cpu(a, sa), cpu(b, sb)) : mul(cpu(a, sa), cpu(b, sb));
      FSDP_CHECK_CLOSE((op == BinaryOp::Add ? "add " : "mul ")
                           << shape_str(sa) << " " << shape_str(sb),
                       out.download(), values(ref), tolerance<T>());
    }
  }
}

// Every activation kind against the CPU's op and its autograd (saved: the output for relu,
// tanh and sigmoid, the input for the others, as the kernel table passes it).
BOOST_AUTO_TEST_CASE_TEMPLATE(activations_forward_and_backward_match_the_cpu, T, StorageTypes) {
  struct Case {
    ActivationKind kind;
    const char* name;
    bool saves_output;
    std::function<Tensor(const Tensor&)> op;
  };
  const std::vector<Case> cases = {
      {ActivationKind::Relu, "relu", true, [](const Tensor& x) { return relu(x); }},
      {ActivationKind::Tanh, "tanh", true, [](const Tensor& x) { return tanh(x); }},
      {ActivationKind::Sigmoid, "sigmoid", true, [](const Tensor& x) { return sigmoid(x); }},
      {ActivationKind::Gelu, "gelu", false, [](const Tensor& x) { return gelu(x, "none"); }},
      {ActivationKind::GeluTanh, "gelu_tanh", false,
       [](const Tensor& x) { return gelu(x, "tanh"); }},
      {ActivationKind::Silu, "silu", false, [](const Tensor& x) { return silu(x); }}};
  for (std::int64_t n : kFlatSizes) {
    std::vector<float> x = stored<T>(randn(n, 2.0f)), dy = stored<T>(randn(n));
    DeviceBuffer<T> dx_in(x), ddy(dy), y(n), dx(n);
    for (const Case& c : cases) {
      y.poison();
      dx.poison();
      activation_forward(c.kind, dx_in.get(), y.get(), n, nullptr);
      activation_backward(c.kind, c.saves_output ? y.get() : dx_in.get(), ddy.get(), dx.get(), n,
                          nullptr);
      Tensor xt = cpu(x, {n}, true);
      Tensor yt = c.op(xt);
      yt.backward(cpu(dy, {n}));
      FSDP_CHECK_CLOSE(c.name << " n=" << n, y.download(), values(yt), tolerance<T>());
      FSDP_CHECK_CLOSE(c.name << " backward n=" << n, dx.download(), values(xt.grad()),
                       tolerance<T>());
    }
  }
}

// Views that start one element in are not 16-byte aligned: the scalar loop must do them.
BOOST_AUTO_TEST_CASE_TEMPLATE(unaligned_views_take_the_scalar_path, T, StorageTypes) {
  const std::int64_t n = 1001;
  std::vector<float> x = stored<T>(randn(n + 1)), y = stored<T>(randn(n + 1));
  DeviceBuffer<T> dx(x), dy(y), out(n + 1);
  std::vector<float> xs(x.begin() + 1, x.end()), ys(y.begin() + 1, y.end());
  activation_forward(ActivationKind::GeluTanh, dx.get() + 1, out.get() + 1, n, nullptr);
  std::vector<float> got = out.download();
  BOOST_TEST(std::isnan(got[0]));  // not written
  FSDP_CHECK_CLOSE("gelu unaligned", std::vector<float>(got.begin() + 1, got.end()),
                   values(gelu(cpu(xs, {n}), "tanh")), tolerance<T>());
  out.poison();
  binary(BinaryOp::Mul, dx.get() + 1, dy.get() + 1, out.get() + 1,
         broadcast_geometry({n}, {n}, "mul"), nullptr);
  got = out.download();
  FSDP_CHECK_CLOSE("mul unaligned", std::vector<float>(got.begin() + 1, got.end()),
                   values(mul(cpu(xs, {n}), cpu(ys, {n}))), tolerance<T>());
  if constexpr (!std::is_same_v<T, float>) {  // casts both ways, exact
    const std::vector<float> wide = randn(n);
    auto from = stored_at<float>(wide, 1);
    auto half = stored_at<T>(std::vector<float>(n, NAN), 1);
    auto back = stored_at<float>(std::vector<float>(n, NAN), 1);
    cast(from->get() + 1, half->get() + 1, n, nullptr);
    cast(half->get() + 1, back->get() + 1, n, nullptr);
    FSDP_CHECK_CLOSE("cast unaligned", download_from(*half, 1), stored<T>(wide), 0.0);
    FSDP_CHECK_CLOSE("cast back unaligned", download_from(*back, 1), stored<T>(wide), 0.0);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(sum_over_rows_is_the_bias_gradient, T, StorageTypes) {
  for (auto [rows, cols] : kRowShapes) {
    std::vector<float> x = stored<T>(randn(rows * cols));
    DeviceBuffer<T> dx(x);
    DeviceBuffer<float> out(cols);
    sum_over_rows(dx.get(), out.get(), rows, cols, nullptr);
    const std::vector<double> want = values(sum(cpu(x, {rows, cols}), {0}));
    FSDP_CHECK_CLOSE("sum_over_rows " << rows << "x" << cols, out.download(), want, kTolFp32 * 10);
    // Rows of whole 16-byte packs (768 columns) take packs; from one element in, columns.
    auto shifted = stored_at<T>(x, 1);
    out.poison();
    sum_over_rows(shifted->get() + 1, out.get(), rows, cols, nullptr);
    FSDP_CHECK_CLOSE("sum_over_rows unaligned " << rows << "x" << cols, out.download(), want,
                     kTolFp32 * 10);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(sum_of_squares_for_clip_grad_norm, T, StorageTypes) {
  for (std::int64_t n : kFlatSizes) {
    std::vector<float> x = stored<T>(randn(n));
    DeviceBuffer<T> dx(x);
    DeviceBuffer<float> out(1);
    sum_of_squares(dx.get(), out.get(), n, nullptr);
    double ref = 0;
    for (float v : x) ref += double(v) * v;  // plain loop in double: the exact-ish value
    FSDP_CHECK_CLOSE("sum_of_squares n=" << n, out.download(), std::vector<double>{ref},
                     kTolFp32 * 10);
  }
}

// The backward's partial sums in scratch from a poisoned device buffer; dweight and dbias
// overwritten (poisoned before).
template <typename T, typename P>
void layer_norm_backward_poisoned_scratch(const T* dy, const T* x, const P* w, const float* mean,
                                          const float* rstd, T* dx, P* dw, P* db, std::int64_t rows,
                                          std::int64_t cols) {
  DeviceBuffer<float> scratch(layer_norm_backward_scratch(rows, cols));
  layer_norm_backward<T, P>(dy, x, w, mean, rstd, dx, dw, db, scratch.get(), rows, cols, nullptr);
}

// Rows of T with parameters of P (float, or T itself: bf16 parameters under mixed precision).
template <typename T, typename P>
void check_layer_norm(std::int64_t rows, std::int64_t cols) {
  // An offset mean (3) checks the two-pass variance.
  std::vector<float> x = stored<T>(randn(rows * cols)), w = stored<P>(randn(cols)),
                     b = stored<P>(randn(cols)), dy = stored<T>(randn(rows * cols));
  for (float& v : x) v = static_cast<float>(stored<T>({v + 3.0f})[0]);
  DeviceBuffer<T> dxin(x), ddy(dy), y(rows * cols), dx(rows * cols);
  DeviceBuffer<P> dw_in(w), db_in(b), dw(cols), db(cols);
  DeviceBuffer<float> mean(rows), rstd(rows);
  const float eps = 1e-5f;
  layer_norm_forward<T, P>(dxin.get(), dw_in.get(), db_in.get(), y.get(), mean.get(), rstd.get(),
                           rows, cols, eps, nullptr);
  layer_norm_backward_poisoned_scratch<T, P>(ddy.get(), dxin.get(), dw_in.get(), mean.get(),
                                             rstd.get(), dx.get(), dw.get(), db.get(), rows, cols);
  Tensor xt = cpu(x, {rows, cols}, true), wt = cpu(w, {cols}, true), bt = cpu(b, {cols}, true);
  Tensor yt = layer_norm(xt, {cols}, wt, bt, eps);
  yt.backward(cpu(dy, {rows, cols}));
  std::vector<double> ref_mean(rows), ref_rstd(rows);  // no CPU op returns them: a loop
  for (std::int64_t r = 0; r < rows; ++r) {
    double s = 0, ss = 0;
    for (std::int64_t c = 0; c < cols; ++c) s += x[r * cols + c];
    ref_mean[r] = s / cols;
    for (std::int64_t c = 0; c < cols; ++c)
      ss += (x[r * cols + c] - ref_mean[r]) * (x[r * cols + c] - ref_mean[r]);
    ref_rstd[r] = 1.0 / std::sqrt(ss / cols + eps);
  }
  const double tol = tolerance<T>();
  // A 16-bit gradient is rounded once more, to P.
  const double ptol = std::is_same_v<P, float> ? 0.0 : tolerance<P>();
  const std::string what = std::to_string(rows) + "x" + std::to_string(cols) + " " +
                           storage_name<T>() + " rows, " + storage_name<P>() + " parameters";
  FSDP_CHECK_CLOSE("layer_norm y " << what, y.download(), values(yt), tol);
  FSDP_CHECK_CLOSE("layer_norm mean " << what, mean.download(), ref_mean, kTolFp32);
  FSDP_CHECK_CLOSE("layer_norm rstd " << what, rstd.download(), ref_rstd, 1e-4);
  FSDP_CHECK_CLOSE("layer_norm dx " << what, dx.download(), values(xt.grad()),
                   std::max(tol, 1e-4));  // cancellation in g - mean(g) at cols == 1..5
  FSDP_CHECK_CLOSE("layer_norm dweight " << what, dw.download(), values(wt.grad()),
                   std::max({tol, ptol, 1e-4}));
  FSDP_CHECK_CLOSE("layer_norm dbias " << what, db.download(), values(bt.grad()),
                   std::max(ptol, kTolFp32 * 10));
  // The same bits on a second run (the partial sums' order is fixed).
  DeviceBuffer<T> dx2(rows * cols);
  DeviceBuffer<P> dw2(cols), db2(cols);
  layer_norm_backward_poisoned_scratch<T, P>(ddy.get(), dxin.get(), dw_in.get(), mean.get(),
                                             rstd.get(), dx2.get(), dw2.get(), db2.get(), rows,
                                             cols);
  const auto same_bits = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  };
  BOOST_TEST(same_bits(dx2.download(), dx.download()), "dx twice " << what);
  BOOST_TEST(same_bits(dw2.download(), dw.download()), "dweight twice " << what);
  BOOST_TEST(same_bits(db2.download(), db.download()), "dbias twice " << what);
  // No weight and no bias (elementwise_affine=False): y = xhat, dx from g = dy.
  Tensor xn = cpu(x, {rows, cols}, true);
  Tensor yn = layer_norm(xn, {cols}, Tensor(), Tensor(), eps);
  yn.backward(cpu(dy, {rows, cols}));
  y.poison();
  dx.poison();
  layer_norm_forward<T, P>(dxin.get(), nullptr, nullptr, y.get(), mean.get(), rstd.get(), rows,
                           cols, eps, nullptr);
  layer_norm_backward_poisoned_scratch<T, P>(ddy.get(), dxin.get(), nullptr, mean.get(), rstd.get(),
                                             dx.get(), nullptr, nullptr, rows, cols);
  FSDP_CHECK_CLOSE("layer_norm y, no affine " << what, y.download(), values(yn), tol);
  FSDP_CHECK_CLOSE("layer_norm dx, no affine " << what, dx.download(), values(xn.grad()),
                   std::max(tol, 1e-4));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(layer_norm_forward_saves_mean_rstd_and_backward_matches, T,
                              StorageTypes) {
  std::vector<std::pair<std::int64_t, std::int64_t>> shapes = kRowShapes;
  // Columns off the pack (100, 770), rows beyond the backward's 512 blocks x 4 warps (at 72
  // columns, whole packs: 4099 x 768 took 20 of the emulated device's seconds for the same
  // check), no rows.
  shapes.insert(shapes.end(), {{5, 100}, {9, 770}, {2053, 72}, {0, 768}});
  for (auto [rows, cols] : shapes) {
    check_layer_norm<T, float>(rows, cols);
    if constexpr (!std::is_same_v<T, float>) check_layer_norm<T, T>(rows, cols);
  }
}

// No rows: the parameter gradients are zeros (overwritten, not left poisoned).
BOOST_AUTO_TEST_CASE(layer_norm_backward_of_no_rows_writes_zero_gradients) {
  const std::int64_t cols = 33;
  DeviceBuffer<float> w(randn(cols)), dw(cols), db(cols);
  layer_norm_backward_poisoned_scratch<float, float>(nullptr, nullptr, w.get(), nullptr, nullptr,
                                                     nullptr, dw.get(), db.get(), 0, cols);
  FSDP_CHECK_CLOSE("layer_norm dweight of no rows", dw.download(), std::vector<float>(cols), 0.0);
  FSDP_CHECK_CLOSE("layer_norm dbias of no rows", db.download(), std::vector<float>(cols), 0.0);
}

// Layer norm rows in 16-byte packs: rows starting one element in (a scalar head and tail on
// every row), and dy or the outputs at another alignment than x (all scalar), against the
// aligned run (the lanes' partial sums take other elements: float rounding apart); dweight and
// dbias summed in the same pass.
BOOST_AUTO_TEST_CASE_TEMPLATE(layer_norm_rows_at_any_alignment, T, StorageTypes) {
  for (auto [rows, cols] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {3, 768}, {5, 7}, {4, 33}, {2, 1031}, {6, 770}}) {
    const std::vector<float> x = stored<T>(randn(rows * cols)), dy = stored<T>(randn(rows * cols));
    const std::vector<float> w = randn(cols), b = randn(cols);
    DeviceBuffer<float> dw_in(w), db_in(b);
    std::vector<std::vector<float>> want;
    // offsets of (x, dy, y and dx)
    for (auto [xo, dyo, yo] : std::vector<std::tuple<int, int, int>>{
             {0, 0, 0}, {1, 1, 1}, {3, 3, 3}, {0, 1, 0}, {0, 0, 1}}) {
      auto dx_in = stored_at<T>(x, xo), ddy = stored_at<T>(dy, dyo);
      auto y = stored_at<T>(std::vector<float>(rows * cols, NAN), yo);
      auto dx = stored_at<T>(std::vector<float>(rows * cols, NAN), yo);
      DeviceBuffer<float> mean(rows), rstd(rows), dw(cols), db(cols);
      layer_norm_forward(dx_in->get() + xo, dw_in.get(), db_in.get(), y->get() + yo, mean.get(),
                         rstd.get(), rows, cols, 1e-5f, nullptr);
      layer_norm_backward_poisoned_scratch<T, float>(
          ddy->get() + dyo, dx_in->get() + xo, dw_in.get(), mean.get(), rstd.get(), dx->get() + yo,
          dw.get(), db.get(), rows, cols);
      const std::vector<std::vector<float>> got = {download_from(*y, yo), mean.download(),
                                                   rstd.download(),       download_from(*dx, yo),
                                                   dw.download(),         db.download()};
      if (want.empty()) {
        want = got;
        continue;
      }
      for (std::size_t k = 0; k < got.size(); ++k)
        FSDP_CHECK_CLOSE("layer_norm " << rows << "x" << cols << " offsets " << xo << "," << dyo
                                       << "," << yo << " output " << k,
                         got[k], std::vector<double>(want[k].begin(), want[k].end()),
                         tolerance<T>());
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(causal_softmax_forward_and_backward, T, StorageTypes) {
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {{1, 1},  {1, 7},   {3, 33},
                                                                     {2, 64}, {5, 129}, {2, 1024}};
  for (auto [batch, t] : shapes) {
    const float scale = 1.0f / std::sqrt(64.0f);
    std::vector<float> x = stored<T>(randn(batch * t * t, 4.0f)),
                       dy = stored<T>(randn(batch * t * t));
    DeviceBuffer<T> dxin(x), ddy(dy), y(batch * t * t), dx(batch * t * t);
    causal_softmax_forward(dxin.get(), y.get(), batch, t, scale, nullptr);
    causal_softmax_backward(y.get(), ddy.get(), dx.get(), batch, t, scale, nullptr);
    std::vector<float> mask(t * t);
    for (std::int64_t i = 0; i < t; ++i)
      for (std::int64_t j = 0; j < t; ++j) mask[i * t + j] = j <= i ? 0.0f : -INFINITY;
    Tensor xt = cpu(x, {batch, t, t}, true);
    Tensor yt = masked_softmax(mul(xt, double(scale)), cpu(mask, {t, t}));
    yt.backward(cpu(dy, {batch, t, t}));
    FSDP_CHECK_CLOSE("causal_softmax y " << batch << "x" << t, y.download(), values(yt),
                     tolerance<T>());
    FSDP_CHECK_CLOSE("causal_softmax dx " << batch << "x" << t, dx.download(), values(xt.grad()),
                     tolerance<T>());
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(embedding_gathers_rows_and_scatters_gradients, T, StorageTypes) {
  // (vocab, dim, tokens). Rows of a multiple of 16 bytes take the 16-byte copy: 768 and 8 in
  // both storages, 4 in float only; the rest the flat kernel.
  const std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>> shapes = {
      {1, 1, 1}, {5, 3, 7}, {50304, 768, 1031}, {11, 33, 4096}, {7, 8, 300}, {3, 4, 5}};
  for (auto [vocab, dim, n] : shapes) {
    std::vector<float> w = stored<T>(randn(vocab * dim)), dout = stored<T>(randn(n * dim));
    std::vector<std::int32_t> idx = randint(n, static_cast<std::int32_t>(vocab));
    DeviceBuffer<T> dw_in(w), ddout(dout), out(n * dim);
    DeviceBuffer<std::int32_t> didx(idx);
    DeviceBuffer<float> grad(vocab * dim);
    FSDP_CUDA_CHECK(cudaMemset(grad.get(), 0, vocab * dim * sizeof(float)));
    embedding_forward(dw_in.get(), vocab, didx.get(), out.get(), n, dim, nullptr);
    embedding_backward(ddout.get(), didx.get(), grad.get(), vocab, n, dim, nullptr);
    Tensor wt = cpu(w, {vocab, dim}, true);
    Tensor yt = embedding(wt, cpu_index(idx));
    yt.backward(cpu(dout, {n, dim}));
    FSDP_CHECK_CLOSE("embedding " << vocab << "x" << dim << " n=" << n, out.download(), values(yt),
                     0.0);  // a gather is exact
    FSDP_CHECK_CLOSE("embedding backward", grad.download(), values(wt.grad()), kTolFp32);
  }
}

BOOST_AUTO_TEST_CASE(embedding_out_of_range_index_gives_a_nan_row_not_another_rows_data) {
  for (std::int64_t dim : {3, 8}) {  // the flat kernel, the 16-byte rows
    std::vector<float> w = randn(4 * dim);
    DeviceBuffer<float> dw(w), out(2 * dim);
    DeviceBuffer<std::int32_t> idx(std::vector<std::int32_t>{1, 4});
    embedding_forward(dw.get(), 4, idx.get(), out.get(), 2, dim, nullptr);
    std::vector<float> got = out.download();
    for (int c = 0; c < dim; ++c) {
      BOOST_TEST(got[c] == w[dim + c], "dim " << dim << " column " << c);
      BOOST_TEST(std::isnan(got[dim + c]), "dim " << dim << " column " << c);
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(fused_cross_entropy_loss_and_dlogits, T, StorageTypes) {
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {
      {1, 1}, {1, 2}, {7, 33}, {3, 511}, {5, 513}, {64, 50304}};  // (rows, vocab)
  for (auto [n, vocab] : shapes) {
    std::vector<float> x = stored<T>(randn(n * vocab, 3.0f));
    std::vector<std::int32_t> tgt = randint(n, static_cast<std::int32_t>(vocab));
    if (n > 2) tgt[1] = -100;  // an ignored row
    std::int64_t count = 0;
    for (auto v : tgt) count += v != -100;
    DeviceBuffer<T> logits(x), dlogits(n * vocab);
    DeviceBuffer<std::int32_t> dt(tgt);
    DeviceBuffer<float> losses(n);
    cross_entropy_forward_backward(logits.get(), dt.get(), losses.get(), dlogits.get(), n, vocab,
                                   -100, 1.0f / count, nullptr);
    Tensor xt = cpu(x, {n, vocab}, true);
    Tensor per_row = cross_entropy(xt, cpu_index(tgt), -100, "none");
    cross_entropy(xt, cpu_index(tgt), -100, "mean").backward();
    FSDP_CHECK_CLOSE("cross_entropy losses " << n << "x" << vocab, losses.download(),
                     values(per_row), kTolFp32 * 10);  // float maths on T's inputs
    FSDP_CHECK_CLOSE("cross_entropy dlogits " << n << "x" << vocab, dlogits.download(),
                     values(xt.grad()), tolerance<T>());
    // In place (dlogits aliasing logits), as the fused classifier runs it.
    cross_entropy_forward_backward(logits.get(), dt.get(), losses.get(), logits.get(), n, vocab,
                                   -100, 1.0f / count, nullptr);
    FSDP_CHECK_CLOSE("cross_entropy in place", logits.download(), values(xt.grad()),
                     tolerance<T>());
    // Logits from one element in (a scalar head and tail on every row; in place too), and
    // dlogits at another alignment than the logits (element by element).
    if (vocab > 1000) continue;
    for (auto [xo, dof] : {std::pair{1, 1}, std::pair{1, 0}}) {
      auto shifted = stored_at<T>(x, xo);
      auto d = stored_at<T>(std::vector<float>(n * vocab, NAN), dof);
      losses.poison();
      cross_entropy_forward_backward(shifted->get() + xo, dt.get(), losses.get(), d->get() + dof, n,
                                     vocab, -100, 1.0f / count, nullptr);
      FSDP_CHECK_CLOSE("cross_entropy offsets " << xo << "," << dof << " losses", losses.download(),
                       values(per_row), kTolFp32 * 10);
      FSDP_CHECK_CLOSE("cross_entropy offsets " << xo << "," << dof << " dlogits",
                       download_from(*d, dof), values(xt.grad()), tolerance<T>());
    }
  }
}

namespace {

// The rows of batch entries `entries` of a (batch, rows, cols) array, in that order.
std::vector<float> entries_of(const std::vector<float>& x, std::int64_t per_entry,
                              const std::vector<std::int64_t>& entries) {
  std::vector<float> out;
  out.reserve(entries.size() * per_entry);
  for (std::int64_t e : entries)
    out.insert(out.end(), x.begin() + e * per_entry, x.begin() + (e + 1) * per_entry);
  return out;
}

// Every element finite: the oracle below sees only some batch entries, and NaN poison left in
// the others must fail too.
void check_finite(const std::string& what, const std::vector<float>& got) {
  const auto bad = std::find_if(got.begin(), got.end(), [](float x) { return !std::isfinite(x); });
  BOOST_TEST((bad == got.end()), what << ": not finite at flat index " << (bad - got.begin()));
}

// Attention forward and backward on the device over (batch, t, hd), checked on the batch
// entries `entries` (independent of each other, so a few of a large batch test every index)
// against core's blocked_attention, the same online softmax on the CPU, on q * scale; lse
// against a double loop. Messages name the storage, the kernel path, the shape and the output.
template <typename T>
void check_attention(std::int64_t batch, std::int64_t t, std::int64_t hd,
                     const std::vector<std::int64_t>& entries) {
  const std::int64_t n = batch * t * hd, per = t * hd, nb = std::ssize(entries);
  const float scale = 1.0f / std::sqrt(float(hd));
  std::vector<float> q = stored<T>(randn(n)), k = stored<T>(randn(n)), v = stored<T>(randn(n)),
                     dout = stored<T>(randn(n));
  DeviceBuffer<T> dq_in(q), dk_in(k), dv_in(v), ddout(dout), o(n), dq(n);
  DeviceBuffer<float> lse(batch * t);
  // The tiles write dk and dv in T; the row kernels gather them in float.
  constexpr bool kTiles = !std::is_same_v<T, float>;
  const bool tiled = kTiles && std::find(std::begin(kFlashHeadDims), std::end(kFlashHeadDims),
                                         hd) != std::end(kFlashHeadDims);
  DeviceBuffer<T> dk16(tiled ? n : 1), dv16(tiled ? n : 1);
  DeviceBuffer<float> dk32(tiled ? 1 : n), dv32(tiled ? 1 : n);
  if constexpr (kTiles) {
    if (tiled) {
      const FlashGeometry g = dense_flash_geometry(batch, t, scale, hd);
      flash_attention_forward(dq_in.get(), dk_in.get(), dv_in.get(), o.get(), lse.get(), g,
                              nullptr);
      flash_attention_backward(dq_in.get(), dk_in.get(), dv_in.get(), o.get(), ddout.get(),
                               lse.get(), dq.get(), dk16.get(), dv16.get(), g, nullptr);
    }
  }
  if (!tiled) {
    attention_forward(dq_in.get(), dk_in.get(), dv_in.get(), o.get(), lse.get(), batch, t, hd,
                      scale, nullptr);
    attention_backward(dq_in.get(), dk_in.get(), dv_in.get(), o.get(), ddout.get(), lse.get(),
                       dq.get(), dk32.get(), dv32.get(), batch, t, hd, scale, nullptr);
  }
  std::string shape = storage_name<T>() + std::string(" ");
  shape += tiled ? "tiled " : "one-warp-per-row ";
  shape += std::to_string(batch) + "x" + std::to_string(t) + "x" + std::to_string(hd);
  if (nb < batch) {
    shape += " (entries";
    for (std::int64_t e : entries) shape += " " + std::to_string(e);
    shape += ")";
  }
  const std::vector<float> o_all = o.download(), lse_all = lse.download(), dq_all = dq.download(),
                           dk_all = tiled ? dk16.download() : dk32.download(),
                           dv_all = tiled ? dv16.download() : dv32.download();
  check_finite("attention o " + shape, o_all);
  check_finite("attention lse " + shape, lse_all);
  check_finite("attention dq " + shape, dq_all);
  check_finite("attention dk " + shape, dk_all);
  check_finite("attention dv " + shape, dv_all);

  const std::vector<float> qe = entries_of(q, per, entries), ke = entries_of(k, per, entries),
                           ve = entries_of(v, per, entries), de = entries_of(dout, per, entries);
  std::vector<float> mask(t * t);
  for (std::int64_t i = 0; i < t; ++i)
    for (std::int64_t j = 0; j < t; ++j) mask[i * t + j] = j <= i ? 0.0f : -INFINITY;
  Tensor qt = cpu(qe, {nb, t, hd}, true), kt = cpu(ke, {nb, t, hd}, true),
         vt = cpu(ve, {nb, t, hd}, true);
  Tensor ot = blocked_attention(mul(qt, double(scale)), kt, vt, cpu(mask, {t, t}));
  ot.backward(cpu(de, {nb, t, hd}));
  std::vector<double> ref_lse(nb * t);  // log-sum-exp of each row's scaled scores: a loop
  for (std::int64_t b = 0; b < nb; ++b)
    for (std::int64_t i = 0; i < t; ++i) {
      std::vector<double> s(i + 1);
      double m = -INFINITY, sum = 0;
      for (std::int64_t j = 0; j <= i; ++j) {
        for (std::int64_t d = 0; d < hd; ++d)
          s[j] += double(qe[(b * t + i) * hd + d]) * ke[(b * t + j) * hd + d];
        s[j] *= scale;
        m = std::max(m, s[j]);
      }
      for (double x : s) sum += std::exp(x - m);
      ref_lse[b * t + i] = m + std::log(sum);
    }
  FSDP_CHECK_CLOSE("attention o " << shape, entries_of(o_all, per, entries), values(ot),
                   tolerance<T>());
  FSDP_CHECK_CLOSE("attention lse " << shape, entries_of(lse_all, t, entries), ref_lse,
                   kTolFp32 * 10);
  // dk and dv are float sums over rows: 1e-4 in float, T's tolerance in 16 bits.
  FSDP_CHECK_CLOSE("attention dq " << shape, entries_of(dq_all, per, entries), values(qt.grad()),
                   std::max(tolerance<T>(), 1e-4));
  FSDP_CHECK_CLOSE("attention dk " << shape, entries_of(dk_all, per, entries), values(kt.grad()),
                   std::max(tolerance<T>(), 1e-4));
  FSDP_CHECK_CLOSE("attention dv " << shape, entries_of(dv_all, per, entries), values(vt.grad()),
                   std::max(tolerance<T>(), 1e-4));
}

std::vector<std::int64_t> all_entries(std::int64_t batch) {
  std::vector<std::int64_t> e(batch);
  for (std::int64_t i = 0; i < batch; ++i) e[i] = i;
  return e;
}

}  // namespace

// bf16 and fp16 with head dim 64, 96 or 128 take the tiled kernels (t of 1, under a tile, one tile
// exactly, a partial last tile); the rest, and float, the one-warp-per-row kernels.
BOOST_AUTO_TEST_CASE_TEMPLATE(online_softmax_attention_forward_and_backward, T, StorageTypes) {
  const std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>> shapes = {
      {1, 1, 1},   {3, 7, 64},   {2, 65, 17}, {4, 200, 128}, {24, 257, 64}, {2, 1, 64},
      {5, 64, 64}, {3, 130, 64}, {2, 1, 128}, {3, 130, 128}, {3, 130, 96}};
  // (batch, t, hd)
  for (auto [batch, t, hd] : shapes) {
    if (on_emulated_device() && batch * t * t * hd > 4'000'000) continue;  // GPU-sized
    check_attention<T>(batch, t, hd, all_entries(batch));
  }
}

// GPT-2 124M's attention: batch 16 x 12 heads, t 1024, head dim 64; the oracle sees the first,
// a middle and the last batch entry.
BOOST_AUTO_TEST_CASE_TEMPLATE(attention_at_gpt2_shapes, T, StorageTypes) {
  if (on_emulated_device()) {
    BOOST_TEST_MESSAGE("GPT-2's attention is for a real device (emulated here)");
    return;
  }
  check_attention<T>(16 * 12, 1024, 64, {0, 97, 191});
}

// A 7B-class Llama's attention (head dim 128, 32 heads), batch 2, t 2048: the wide tiles.
BOOST_AUTO_TEST_CASE_TEMPLATE(attention_at_llama_shapes, T, StorageTypes) {
  if (on_emulated_device()) {
    BOOST_TEST_MESSAGE("a Llama's attention is for a real device (emulated here)");
    return;
  }
  check_attention<T>(2 * 32, 2048, 128, {0, 33, 63});
}

BOOST_AUTO_TEST_CASE(attention_refuses_a_head_dim_over_128) {
  DeviceBuffer<float> x(1), lse(1);
  BOOST_CHECK_EXCEPTION(
      attention_forward(x.get(), x.get(), x.get(), x.get(), lse.get(), 1, 1, 129, 1.0f, nullptr),
      ValueError, [](const ValueError& e) {
        return std::string(e.what()) == "attention_forward: head dim must be in [1, 128], got 129";
      });
}

BOOST_AUTO_TEST_CASE(adamw_matches_the_cpu_update_over_three_steps) {
  for (std::int64_t n : kFlatSizes) {
    std::vector<float> p = randn(n), m(n, 0.0f), v(n, 0.0f);
    std::vector<double> rp(p.begin(), p.end()), rm(n, 0.0), rv(n, 0.0);
    DeviceBuffer<float> dp(p), dm(m), dv(v);
    AdamWArgs a;
    a.lr = 0.1;  // large steps: the update, not the parameter, dominates the comparison
    a.weight_decay = 0.1;
    for (int step = 1; step <= 3; ++step) {
      std::vector<float> g = randn(n);
      DeviceBuffer<float> dg(g);
      a.step = step;
      adamw_step(dp.get(), dg.get(), dm.get(), dv.get(), n, a, nullptr);
      optim::AdamScalars s;
      s.lr = a.lr;
      s.weight_decay = a.weight_decay;
      s.decoupled = true;
      s.step = step;
      std::vector<double> gd(g.begin(), g.end());
      optim::adam_update_flat<double>(rp.data(), gd.data(), rm.data(), rv.data(), nullptr, n, s);
    }
    std::vector<float> got = dp.download();
    std::vector<double> delta_ref(n);
    std::vector<float> delta(n);
    for (std::int64_t i = 0; i < n; ++i) {
      delta_ref[i] = rp[i] - p[i];
      delta[i] = got[i] - p[i];
    }
    FSDP_CHECK_CLOSE("adamw update n=" << n, delta, delta_ref, kTolFp32 * 10);
    FSDP_CHECK_CLOSE("adamw exp_avg", dm.download(), rm, kTolFp32);
    FSDP_CHECK_CLOSE("adamw exp_avg_sq", dv.download(), rv, kTolFp32);
  }
}

// The optimizers move 4 floats per 16-byte access where the shard's arrays share their
// alignment: shards starting one element in (a scalar head, packs, a scalar tail), and a
// gradient at another alignment than the parameter (all scalar), give the aligned run's bits.
BOOST_AUTO_TEST_CASE(optimizers_give_the_same_bits_at_any_alignment) {
  for (std::int64_t n : {1, 3, 7, 1001, 257 * 1024 + 3}) {
    const std::vector<float> p = randn(n), g = randn(n), m = randn(n);
    std::vector<float> v = randn(n);
    for (float& x : v) x = x * x;          // a second moment is not negative
    std::vector<std::vector<float>> want;  // the aligned run's p, m, v, sgd's p and buffer
    // (offset of the parameter and its state, offset of the gradient)
    for (auto [off, goff] : std::vector<std::pair<int, int>>{{0, 0}, {1, 1}, {3, 3}, {0, 1}}) {
      std::vector<std::vector<float>> got;
      auto dp = stored_at<float>(p, off), dg = stored_at<float>(g, goff),
           dm = stored_at<float>(m, off), dv = stored_at<float>(v, off);
      AdamWArgs a;
      a.lr = 0.1;
      a.weight_decay = 0.1;
      a.step = 2;
      adamw_step(dp->get() + off, dg->get() + goff, dm->get() + off, dv->get() + off, n, a,
                 nullptr);
      got.push_back(download_from(*dp, off));
      got.push_back(download_from(*dm, off));
      got.push_back(download_from(*dv, off));
      for (bool first_step : {true, false}) {
        auto sp = stored_at<float>(p, off), sb = stored_at<float>(m, off);
        SgdArgs s;
        s.lr = 0.1f;
        s.momentum = 0.9f;
        s.dampening = 0.1f;
        s.weight_decay = 0.01f;
        s.nesterov = true;
        s.first_step = first_step;
        sgd_step(sp->get() + off, dg->get() + goff, sb->get() + off, n, s, nullptr);
        got.push_back(download_from(*sp, off));
        got.push_back(download_from(*sb, off));
      }
      for (const auto& part : got)
        for (float x : part) BOOST_REQUIRE(std::isfinite(x));
      if (want.empty())
        want = got;
      else
        for (std::size_t k = 0; k < got.size(); ++k)
          BOOST_TEST(got[k] == want[k], "n=" << n << " offsets " << off << "," << goff << " array "
                                             << k << " differs");
    }
  }
}

BOOST_AUTO_TEST_CASE(sgd_with_and_without_momentum_matches_the_cpu_update) {
  for (bool nesterov : {false, true}) {
    for (float momentum : {0.0f, 0.9f}) {
      const std::int64_t n = 3000017;
      std::vector<float> p = randn(n);
      std::vector<double> rp(p.begin(), p.end()), rbuf(n, 0.0);
      DeviceBuffer<float> dp(p), dbuf(n);
      SgdArgs a;
      a.lr = 0.1;
      a.momentum = momentum;
      a.weight_decay = 0.01f;
      a.nesterov = nesterov && momentum != 0.0f;
      for (int step = 0; step < 2; ++step) {
        std::vector<float> g = randn(n);
        DeviceBuffer<float> dg(g);
        a.first_step = step == 0;
        sgd_step(dp.get(), dg.get(), momentum != 0.0f ? dbuf.get() : nullptr, n, a, nullptr);
        optim::SgdScalars s;
        s.lr = a.lr;
        s.momentum = a.momentum;
        s.weight_decay = a.weight_decay;
        s.nesterov = a.nesterov;
        s.first_step = a.first_step;
        std::vector<double> gd(g.begin(), g.end());
        optim::sgd_update_flat<double>(rp.data(), gd.data(),
                                       momentum != 0.0f ? rbuf.data() : nullptr, n, s);
      }
      std::vector<float> got = dp.download(), delta(n);
      std::vector<double> delta_ref(n);
      for (std::int64_t i = 0; i < n; ++i) {
        delta[i] = got[i] - p[i];
        delta_ref[i] = rp[i] - p[i];
      }
      FSDP_CHECK_CLOSE("sgd momentum=" << momentum << " nesterov=" << a.nesterov, delta, delta_ref,
                       kTolFp32 * 10);
    }
  }
}
