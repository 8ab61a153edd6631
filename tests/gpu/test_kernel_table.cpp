// CUDA's kernel table (core/cuda/kernel_table.h) against the CPU table: each covered family is
// called on both tables with the same inputs (the CPU table is the oracle), through tensors on
// cuda:0; the families without a CUDA kernel fail with one line naming the family and the
// device, never a host fallback. Skips (exit 77) without a device.
#define BOOST_TEST_MODULE gpu_kernel_table
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/kernels/kernel_table.h"
#include "core/matmul_precision.h"
#include "core/ops.h"
#include "core/random.h"
#include "core/stream.h"
#include "core/tensor.h"
#include "tests/gpu/gpu_test_support.h"
#include "tests/support/causal_attention_layouts.h"

using namespace fsdp;
using fsdp::cuda::testing::kTolBf16;
using fsdp::cuda::testing::kTolFp16;
using fsdp::cuda::testing::kTolFp32;
using fsdp::cuda::testing::kTolTf32;
using fsdp::cuda::testing::RequireDevice;

BOOST_TEST_GLOBAL_FIXTURE(RequireDevice);

namespace {

const Device kCuda(DeviceType::CUDA, 0);

Generator& gen() {
  static Generator g(20251127);
  return g;
}

// Fresh normal values on the host, in `dtype` (bf16 and fp16 round before either table sees them).
Tensor host_randn(const Shape& shape, DType dtype = DType::Float32) {
  return randn(shape, TensorOptions(DType::Float32, kCPU), &gen()).to(dtype);
}

// ||got - ref|| / ||ref|| over the values as double; NaN or Inf in `got` fails.
void check_close(const Tensor& got_device, const Tensor& ref, double tol) {
  const std::vector<double> got = got_device.to(kCPU).to_vector(), want = ref.to_vector();
  BOOST_REQUIRE_EQUAL(got.size(), want.size());
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    BOOST_REQUIRE_MESSAGE(std::isfinite(got[i]), "element " << i << " is " << got[i]);
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  const double rel = norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm);
  BOOST_TEST(rel <= tol, "relative error " << rel << " > " << tol);
}

double tol_of(DType dtype) {
  return dtype == DType::BFloat16 ? kTolBf16 : dtype == DType::Float16 ? kTolFp16 : kTolFp32;
}

// A device tensor of `shape` poisoned with NaN, so that a kernel that skips elements fails.
Tensor poisoned(const Shape& shape, DType dtype) {
  return full(shape, NAN, TensorOptions(DType::Float32, kCPU)).to(dtype).to(kCuda);
}

// The host's: for the CPU table's outputs (attention's gradients are overwritten, not added to).
Tensor poisoned_host(const Shape& shape, DType dtype) {
  return full(shape, NAN, TensorOptions(DType::Float32, kCPU)).to(dtype);
}

template <typename F>
void expect_missing(F&& call, const std::string& message) {
  BOOST_CHECK_EXCEPTION(call(), NotImplementedError,
                        [&](const NotImplementedError& e) { return e.what() == message; });
}

}  // namespace

BOOST_AUTO_TEST_CASE(copies_round_trip_between_host_and_device) {
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16, DType::Int64, DType::Bool}) {
    const Tensor host = mul(host_randn({3, 17}), 3.0).to(dtype);
    BOOST_TEST(host.to(kCuda).to(kCPU).to_vector() == host.to_vector());
  }
  // A strided host source and a broadcast one are prepared on the host side.
  const Tensor base = host_randn({5, 4});
  BOOST_TEST(base.t().to(kCuda).to(kCPU).to_vector() == base.t().contiguous().to_vector());
  Tensor dst = empty({3, 4}, TensorOptions(DType::Float32, kCuda));
  const Tensor row = host_randn({4});
  dst.copy_(row);
  BOOST_TEST(dst.to(kCPU).to_vector() == row.expand({3, 4}).contiguous().to_vector());
  // Blocks of whole 16-byte rows move a pack per thread; from an odd column, element by element.
  for (DType dtype : {DType::Float32, DType::BFloat16}) {
    const Tensor rows = host_randn({6, 40}, dtype);
    for (std::int64_t start : {8, 3}) {
      Tensor to = zeros({6, 64}, TensorOptions(dtype, kCuda));
      to.narrow(1, start, 16).copy_(rows.to(kCuda).narrow(1, start, 16));
      Tensor want = zeros({6, 64}, TensorOptions(dtype, kCPU));
      want.narrow(1, start, 16).copy_(rows.narrow(1, start, 16));
      BOOST_TEST(to.to(kCPU).to_vector() == want.to_vector(), "start " << start);
    }
  }
  // A strided device side on either end goes through the strided copy kernel.
  Tensor wide = zeros({3, 8}, TensorOptions(DType::Float32, kCuda));
  wide.narrow(1, 2, 4).copy_(base.narrow(0, 0, 3));
  Tensor expect = zeros({3, 8}, TensorOptions(DType::Float32, kCPU));
  expect.narrow(1, 2, 4).copy_(base.narrow(0, 0, 3));
  BOOST_TEST(wide.to(kCPU).to_vector() == expect.to_vector());
  Tensor back = empty({4, 3}, TensorOptions(DType::Float32, kCPU));
  back.copy_(wide.narrow(1, 2, 4).t());
  BOOST_TEST(back.to_vector() == expect.narrow(1, 2, 4).t().contiguous().to_vector());
}

BOOST_AUTO_TEST_CASE(casts_on_the_device_round_as_the_cpu) {
  // Values past fp16's largest (65504: inf) and below its smallest normal (subnormals) too.
  const Tensor x = cat(
      {mul(host_randn({1000}), 3.0), mul(host_randn({50}), 1e5), mul(host_randn({50}), 1e-6)}, 0);
  for (DType half : {DType::BFloat16, DType::Float16}) {
    BOOST_TEST(x.to(kCuda).to(half).to(kCPU).to_vector() == x.to(half).to_vector(),
               dtype_name(half));
    const Tensor b = x.to(half);
    BOOST_TEST(
        b.to(kCuda).to(DType::Float32).to(kCPU).to_vector() == b.to(DType::Float32).to_vector(),
        dtype_name(half));
    // float64 <-> 16 bits (a loss summed in float64 into a 16-bit result).
    const Tensor d = mul(x, 1.0 / 3.0).to(DType::Float64);
    BOOST_TEST(d.to(kCuda).to(half).to(kCPU).to_vector() == d.to(half).to_vector(),
               dtype_name(half));
    BOOST_TEST(
        b.to(kCuda).to(DType::Float64).to(kCPU).to_vector() == b.to(DType::Float64).to_vector(),
        dtype_name(half));
  }
  // bf16 <-> fp16, through float as the CPU (a strided source: the strided copy kernel).
  const Tensor h = x.to(DType::Float16), b = x.to(DType::BFloat16);
  BOOST_TEST(h.to(kCuda).to(DType::BFloat16).to(kCPU).to_vector() ==
             h.to(DType::BFloat16).to_vector());
  BOOST_TEST(b.to(kCuda).to(DType::Float16).to(kCPU).to_vector() ==
             b.to(DType::Float16).to_vector());
  const Tensor m = host_randn({8, 5}, DType::Float16);
  BOOST_TEST(m.to(kCuda).t().to(DType::BFloat16).to(kCPU).to_vector() ==
             m.t().to(DType::BFloat16).to_vector());
}

BOOST_AUTO_TEST_CASE(fill_writes_every_element) {
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16}) {
    Tensor t = poisoned({1000, 3}, dtype);
    t.fill_(1.5);
    BOOST_TEST(t.to(kCPU).to_vector() == std::vector<double>(3000, 1.5));
  }
  // Zero in any dtype is one memset; other values and layouts a broadcast device element.
  Tensor i = full({7}, 3, TensorOptions(DType::Int64, kCPU)).to(kCuda);
  i.fill_(0);
  BOOST_TEST(i.to(kCPU).to_vector() == std::vector<double>(7, 0.0));
  i.fill_(-2);
  BOOST_TEST(i.to(kCPU).to_vector() == std::vector<double>(7, -2.0));
  Tensor m = zeros({4, 6}, TensorOptions(DType::Bool, kCuda));
  m.narrow(1, 1, 2).fill_(1);
  Tensor expect = zeros({4, 6}, TensorOptions(DType::Bool, kCPU));
  expect.narrow(1, 1, 2).fill_(1);
  BOOST_TEST(m.to(kCPU).to_vector() == expect.to_vector());
}

BOOST_AUTO_TEST_CASE(add_and_mul_broadcast_as_the_cpu) {
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16}) {
    const Tensor a = host_randn({4, 1, 33}, dtype), b = host_randn({5, 33}, dtype);
    check_close(add(a.to(kCuda), b.to(kCuda)), add(a, b), tol_of(dtype));
    check_close(mul(a.to(kCuda), b.to(kCuda)), mul(a, b), tol_of(dtype));
    // A 0-d cpu operand goes with any device (PyTorch's scalar rule).
    const Tensor s = scalar_tensor(0.75, TensorOptions(dtype, kCPU));
    check_close(mul(a.to(kCuda), s), mul(a, s), tol_of(dtype));
  }
}

// Scalar comparisons on the device as on the CPU (core/scalar.h; eq has its own kernel, the
// others go through the tensor-tensor compare with a 0-d operand).
BOOST_AUTO_TEST_CASE(scalar_ops_and_comparisons_match_the_cpu) {
  const Tensor ints =
      from_vector(std::vector<std::int64_t>{-3, -1, 0, 2, 5, 7}, {2, 3}).to(DType::Int32);
  const Tensor floats = host_randn({3, 17});
  const auto same = [](const Tensor& device, const Tensor& host, const char* what) {
    BOOST_TEST(device.dtype() == host.dtype(), what);
    BOOST_TEST(device.to(kCPU).to_vector() == host.to_vector(), what);
  };
  // An integer tensor with a floating scalar computes in float32 (the cast on the device).
  same(mul(ints.to(kCuda), 2.5), mul(ints, 2.5), "mul");
  for (const Tensor& t : {ints.to(DType::Float32), floats}) {
    const Tensor d = t.to(kCuda);
    same(eq(d, 2.0), eq(t, 2.0), "eq");
    same(ne(d, 2.0), ne(t, 2.0), "ne");
    same(lt(d, 0.25), lt(t, 0.25), "lt");
    same(le(d, 0.0), le(t, 0.0), "le");
    same(gt(d, -0.5), gt(t, -0.5), "gt");
    same(ge(d, 2), ge(t, 2), "ge");
  }
}

// Every BinaryKind and UnaryKind through the strided kernels: a transposed operand, a broadcast
// one, a strided output, float64 too.
BOOST_AUTO_TEST_CASE(every_binary_and_unary_kind_matches_the_cpu_table_on_any_layout) {
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16, DType::Float64}) {
    const Tensor base = host_randn({6, 5}, dtype), b = host_randn({6}, dtype);
    const Tensor a = base.t(), a_device = base.to(kCuda).t();  // transposed views
    for (BinaryKind kind : {BinaryKind::Add, BinaryKind::Sub, BinaryKind::Mul, BinaryKind::Div,
                            BinaryKind::Maximum, BinaryKind::Minimum}) {
      Tensor want = empty({5, 6}, TensorOptions(dtype, kCPU));
      kernels(kCPU).binary(kind, want, a.contiguous(), b.expand({5, 6}).contiguous(), 0.5);
      Tensor got = poisoned({5, 6}, dtype);
      kernels(kCuda).binary(kind, got, a_device, b.to(kCuda), 0.5);
      check_close(got, want, tol_of(dtype));
    }
    const Tensor positive = add(abs(host_randn({7, 3}, dtype)), 0.5);
    for (UnaryKind kind :
         {UnaryKind::AddScalar, UnaryKind::MulScalar, UnaryKind::DivScalar, UnaryKind::Pow,
          UnaryKind::Square, UnaryKind::Identity, UnaryKind::Sqrt, UnaryKind::Neg, UnaryKind::Exp,
          UnaryKind::Log, UnaryKind::Rsqrt, UnaryKind::Abs, UnaryKind::Sign}) {
      Tensor want = empty({3, 7}, TensorOptions(dtype, kCPU));
      kernels(kCPU).unary(kind, want, positive.t().contiguous(), 1.5);
      // A strided output: the first 7 columns of a wider tensor.
      Tensor wide = poisoned({3, 14}, dtype);
      Tensor got = wide.narrow(1, 0, 7);
      kernels(kCuda).unary(kind, got, positive.to(kCuda).t(), 1.5);
      check_close(got.contiguous(), want, tol_of(dtype));
    }
  }
}

// Operands whose rows are whole aligned 16-byte packs take a pack a thread: the same bits as
// the same values one element a thread (the rows from column 3 of a wider tensor), and the CPU's
// values.
BOOST_AUTO_TEST_CASE(binary_and_unary_kinds_in_packs_give_the_element_paths_bits) {
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16, DType::Float64}) {
    const Tensor x = add(abs(host_randn({4, 16}, dtype)), 0.5), y = host_randn({4, 16}, dtype);
    // `t` on the device as the 16 columns from `start` of a (4, 32) tensor.
    const auto at_column = [&](const Tensor& t, std::int64_t start) {
      Tensor wide = poisoned({4, 32}, dtype);
      Tensor view = wide.narrow(1, start, 16);
      view.copy_(t);
      return view;
    };
    for (BinaryKind kind :
         {BinaryKind::Add, BinaryKind::Sub, BinaryKind::Div, BinaryKind::Maximum}) {
      Tensor want = empty({4, 16}, TensorOptions(dtype, kCPU));
      kernels(kCPU).binary(kind, want, x, y, 0.5);
      std::vector<std::vector<double>> got;
      for (std::int64_t start : {0, 8, 3}) {  // packs (contiguous, and a block), elements
        Tensor out = at_column(zeros({4, 16}, TensorOptions(dtype, kCPU)), start);
        kernels(kCuda).binary(kind, out, at_column(x, start), at_column(y, start), 0.5);
        got.push_back(out.to(kCPU).to_vector());
        check_close(out.contiguous(), want, tol_of(dtype));
      }
      BOOST_TEST(got[0] == got[2]);
      BOOST_TEST(got[1] == got[2]);
    }
    for (UnaryKind kind : {UnaryKind::MulScalar, UnaryKind::DivScalar, UnaryKind::Exp,
                           UnaryKind::Sqrt, UnaryKind::Neg}) {
      Tensor want = empty({4, 16}, TensorOptions(dtype, kCPU));
      kernels(kCPU).unary(kind, want, x, 1.5);
      std::vector<std::vector<double>> got;
      for (std::int64_t start : {8, 3}) {
        Tensor out = at_column(zeros({4, 16}, TensorOptions(dtype, kCPU)), start);
        kernels(kCuda).unary(kind, out, at_column(x, start), 1.5);
        got.push_back(out.to(kCPU).to_vector());
        check_close(out.contiguous(), want, tol_of(dtype));
      }
      BOOST_TEST(got[0] == got[1]);
    }
  }
}

BOOST_AUTO_TEST_CASE(strided_copies_and_casts_on_the_device_match_the_cpu) {
  const Tensor x = host_randn({4, 9, 5});
  const Tensor xd = x.to(kCuda);
  BOOST_TEST(xd.transpose(0, 2).contiguous().to(kCPU).to_vector() ==
             x.transpose(0, 2).contiguous().to_vector());
  BOOST_TEST(xd.transpose(0, 1).to(DType::BFloat16).to(kCPU).to_vector() ==
             x.transpose(0, 1).to(DType::BFloat16).to_vector());
  BOOST_TEST(xd.transpose(1, 2).to(DType::Float64).to(kCPU).to_vector() ==
             x.transpose(1, 2).to(DType::Float64).to_vector());
  Tensor i = mul(host_randn({3, 4}), 5.0).to(DType::Int64);
  BOOST_TEST(i.to(kCuda).t().contiguous().to(kCPU).to_vector() == i.t().contiguous().to_vector());
}

// Each element's bits, a NaN as one pattern: the device and the host quiet a NaN differently
// (its payload is not the cast's).
std::vector<std::uint64_t> bits_of(const Tensor& t) {
  const Tensor c = t.to(kCPU).contiguous();
  const std::vector<double> values = c.to_vector();
  const std::size_t size = dtype_size(c.dtype());
  const auto* p = static_cast<const unsigned char*>(c.data_ptr());
  std::vector<std::uint64_t> bits(values.size(), ~std::uint64_t(0));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (std::isnan(values[i])) continue;
    bits[i] = 0;
    std::memcpy(&bits[i], p + i * size, size);
  }
  return bits;
}

// Values every cast meets: signed zeros, fractions either way, the bounds of uint8, int32, fp16
// and bf16's integers, out of every integer's range, infinities, NaN; random ones after them.
std::vector<double> cast_values(std::int64_t n) {
  std::vector<double> v = {
      0.0,           -0.0,  0.5,   -0.5,         1.7,     -1.7,  2.5,      -2.5,       127.9,
      255.0,         256.5, 300.7, -300.7,       65504.0, 7e4,   257.0,    16777217.0, 2147483647.0,
      -2147483648.0, 3e9,   -3e9,  3000000007.0, 1e20,    -1e20, INFINITY, -INFINITY,  NAN};
  // Its own generator: the later tests' draws stay those they were written with.
  Generator own(20260101);
  const std::vector<double> random =
      mul(randn({n}, TensorOptions(DType::Float32, kCPU), &own), 1000.0).to_vector();
  v.insert(v.end(), random.begin(), random.end());
  v.resize(static_cast<std::size_t>(n));
  return v;
}

// Every cast between two dtypes on the device gives the CPU's bits (torch's semantics as the
// CPU table casts: truncation toward zero, nonzero and NaN true, 16-bit types through float, out
// of an integer's range as x86's conversion): sizes 1, odd, past one block of 256 threads; the
// source dense and transposed; the destination dense and a strided view (copy_).
BOOST_AUTO_TEST_CASE(casts_between_every_pair_of_dtypes_equal_the_cpu_bits) {
  // int64's that round differently through double than straight to float (and to bf16).
  const std::vector<std::int64_t> wide_ints = {
      (std::int64_t(1) << 60) + (std::int64_t(1) << 52) + (std::int64_t(1) << 36) + 1,
      std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max(), -16777217,
      16777219};
  const std::pair<std::int64_t, std::int64_t> sizes[] = {{1, 1}, {3, 7}, {19, 29}};
  for (const auto& [rows, cols] : sizes) {
    const std::vector<double> values = cast_values(rows * cols);
    for (DType from : kAllDTypes) {
      Tensor src = from_vector(values, {rows, cols}, TensorOptions(DType::Float64, kCPU)).to(from);
      if (from == DType::Int64 && rows * cols > 5) {
        Tensor flat = src.reshape({rows * cols});
        flat.narrow(0, 0, 5).copy_(from_vector(wide_ints, {5}));
      }
      const Tensor src_device = src.to(kCuda);
      for (DType to : kAllDTypes) {
        if (to == from) continue;
        const std::string what =
            fmt::format("{} to {} ({} x {})", dtype_name(from), dtype_name(to), rows, cols);
        BOOST_TEST(bits_of(src_device.to(to)) == bits_of(src.to(to)), what);
        BOOST_TEST(bits_of(src_device.t().to(to)) == bits_of(src.t().to(to)), what << " strided");
        Tensor wide = zeros({rows, 2 * cols}, TensorOptions(to, kCuda));
        Tensor want = zeros({rows, 2 * cols}, TensorOptions(to, kCPU));
        wide.narrow(1, 1, cols).copy_(src_device);
        want.narrow(1, 1, cols).copy_(src);
        BOOST_TEST(bits_of(wide) == bits_of(want), what << " into a strided view");
      }
    }
  }
  // The semantics themselves, on the device: truncation, x86's out-of-range values, NaN true,
  // an int64 rounded once to float.
  const Tensor f =
      from_vector({2.7, -2.7, NAN, 300.7, 3e9}, {5}, TensorOptions(DType::Float32, kCPU));
  const Tensor fd = f.to(kCuda);
  const std::int64_t int32_min = std::numeric_limits<std::int32_t>::min();
  BOOST_TEST(fd.to(DType::Int32).to(kCPU).to_vector() ==
             (std::vector<double>{2, -2, double(int32_min), 300, double(int32_min)}));
  BOOST_TEST(fd.to(DType::UInt8).to(kCPU).to_vector() == (std::vector<double>{2, 254, 0, 44, 0}));
  BOOST_TEST(fd.to(DType::Bool).to(kCPU).to_vector() == (std::vector<double>{1, 1, 1, 1, 1}));
  const Tensor big = from_vector(std::vector<std::int64_t>{wide_ints[0]}, {1}).to(kCuda);
  BOOST_TEST(big.to(DType::Float32).to(kCPU).to_vector()[0] == 1157425241673170944.0);
  BOOST_TEST(big.to(DType::BFloat16).to(kCPU).to_vector()[0] == 1161928703861587968.0);
}

BOOST_AUTO_TEST_CASE(linear_and_bmm_match_the_cpu) {
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16}) {
    const Tensor x = host_randn({2, 9, 48}, dtype), w = host_randn({40, 48}, dtype);
    const Tensor bias = host_randn({40}, dtype);
    check_close(linear(x.to(kCuda), w.to(kCuda), bias.to(kCuda)), linear(x, w, bias),
                tol_of(dtype));
    check_close(linear(x.to(kCuda), w.to(kCuda)), linear(x, w), tol_of(dtype));
    const Tensor p = host_randn({3, 17, 24}, dtype), q = host_randn({3, 24, 5}, dtype);
    check_close(bmm(p.to(kCuda), q.to(kCuda)), bmm(p, q), tol_of(dtype));
  }
}

// The backward's operands are views: transposed (read with the transpose flag), row-strided
// (a leading dim) or neither (copied contiguous first); the CPU table reads them by strides.
// torch.set_float32_matmul_precision: "high" takes TF32 for float32 products on CUDA (within
// TF32's tolerance of the CPU, and not the float32 result), "highest" float32 again.
BOOST_AUTO_TEST_CASE(float32_products_take_tf32_when_the_precision_allows) {
  struct Restore {
    ~Restore() { set_float32_matmul_precision("highest"); }
  } restore;
  const Tensor x = host_randn({2, 9, 48}), w = host_randn({40, 48});
  const Tensor want = linear(x, w);
  BOOST_TEST(get_float32_matmul_precision() == "highest");
  const std::vector<double> fp32 = linear(x.to(kCuda), w.to(kCuda)).to(kCPU).to_vector();
  set_float32_matmul_precision("high");
  BOOST_TEST(get_float32_matmul_precision() == "high");
  const Tensor tf32 = linear(x.to(kCuda), w.to(kCuda));
  check_close(tf32, want, kTolTf32);
  BOOST_TEST(tf32.to(kCPU).to_vector() != fp32);
  set_float32_matmul_precision("highest");
  BOOST_TEST(linear(x.to(kCuda), w.to(kCuda)).to(kCPU).to_vector() == fp32);
  BOOST_CHECK_EXCEPTION(set_float32_matmul_precision("fast"), ValueError, [](const ValueError& e) {
    return std::string(e.what()) ==
           "set_float32_matmul_precision: 'fast' is not one of highest, high, medium";
  });
}

BOOST_AUTO_TEST_CASE(linear_backward16_matches_the_cpu_table_in_bf16_and_fp16) {
  const std::int64_t rows = 37, in = 48, out = 40;
  for (DType dtype : {DType::BFloat16, DType::Float16}) {
    const Tensor g = host_randn({rows, out}, dtype), x = host_randn({rows, in}, dtype);
    const Tensor w = host_randn({out, in}, dtype);
    Tensor gx = empty({rows, in}, TensorOptions(dtype, kCPU)), gw = empty_like(w);
    Tensor gb = empty({out}, TensorOptions(dtype, kCPU));
    kernels(kCPU).linear_backward16(gx, gw, gb, g, x, w, in);
    Tensor gxd = poisoned({rows, in}, dtype), gwd = poisoned({out, in}, dtype);
    Tensor gbd = poisoned({out}, dtype);
    kernels(kCuda).linear_backward16(gxd, gwd, gbd, g.to(kCuda), x.to(kCuda), w.to(kCuda), in);
    check_close(gxd, gx, tol_of(dtype));
    check_close(gwd, gw, tol_of(dtype));
    check_close(gbd, gb, tol_of(dtype));  // in the weight gradient's product (BGRADB)
    // Without a weight gradient the bias gradient is summed apart.
    Tensor gbd_alone = poisoned({out}, dtype);
    kernels(kCuda).linear_backward16(Tensor(), Tensor(), gbd_alone, g.to(kCuda), Tensor(), Tensor(),
                                     in);
    check_close(gbd_alone, gb, tol_of(dtype));
  }
}

// GPT-2's in-projection and MLP weights (above a million elements) take the one-pass 16-bit
// backward on CUDA too (its products accumulate in float32 whatever the size); the CPU's, which
// converts the weight whole, takes the separate products there. Same gradients either way.
BOOST_AUTO_TEST_CASE(linear_backward16_takes_weights_of_any_size_on_cuda) {
  BOOST_TEST(kernels(kCPU).linear_backward16_max_weight == std::int64_t(1) << 20);
  BOOST_TEST(kernels(kCuda).linear_backward16_max_weight ==
             std::numeric_limits<std::int64_t>::max());
  const std::int64_t rows = 6, in = 1024, out = 1030;  // 1030 * 1024 > 2^20
  const DType dtype = DType::BFloat16;
  const Tensor x0 = host_randn({rows, in}, dtype), w0 = mul(host_randn({out, in}, dtype), 0.05);
  const Tensor b0 = host_randn({out}, dtype), g0 = host_randn({rows, out}, dtype);
  std::vector<Tensor> want, got;
  for (Device dev : {kCPU, kCuda}) {
    Tensor x = x0.to(dev).detach().requires_grad_(true);
    Tensor w = w0.to(dev).detach().requires_grad_(true);
    Tensor b = b0.to(dev).detach().requires_grad_(true);
    linear(x, w, b).backward(g0.to(dev));
    (dev == kCPU ? want : got) = {x.grad(), w.grad(), b.grad()};
  }
  for (std::size_t i = 0; i < want.size(); ++i) check_close(got[i], want[i], tol_of(dtype));
}

BOOST_AUTO_TEST_CASE(products_of_strided_views_match_the_cpu_table) {
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16}) {
    const Tensor xb = host_randn({48, 9}, dtype), wb = host_randn({48, 40}, dtype);
    const Tensor bias = host_randn({40}, dtype);
    const Tensor x = xb.t(), w = wb.t();  // (9, 48) and (40, 48), unit row strides
    Tensor want = empty({9, 40}, TensorOptions(dtype, kCPU)), got = poisoned({9, 40}, dtype);
    kernels(kCPU).linear(want, x, w, bias);
    kernels(kCuda).linear(got, xb.to(kCuda).t(), wb.to(kCuda).t(), bias.to(kCuda));
    check_close(got, want, tol_of(dtype));

    const Tensor wide = host_randn({3, 17, 48}, dtype);  // a (3, 17, 24) view: leading dim 48
    const Tensor a = wide.narrow(2, 0, 24), bt = host_randn({3, 5, 24}, dtype);
    const Tensor b = bt.transpose(1, 2);  // (3, 24, 5), transposed
    Tensor r = empty({3, 17, 5}, TensorOptions(dtype, kCPU)), rd = poisoned({3, 17, 5}, dtype);
    kernels(kCPU).bmm(r, a, b);
    kernels(kCuda).bmm(rd, wide.to(kCuda).narrow(2, 0, 24), bt.to(kCuda).transpose(1, 2));
    check_close(rd, r, tol_of(dtype));

    // Every other element: neither layout, so a contiguous copy first.
    const Tensor base = host_randn({3 * 17 * 24 * 2}, dtype);
    const Tensor sparse = make_view(base, {3, 17, 24}, {17 * 24 * 2, 24 * 2, 2}, 0);
    const Tensor q = host_randn({3, 24, 5}, dtype);
    kernels(kCPU).bmm(r, sparse, q);
    kernels(kCuda).bmm(rd, make_view(base.to(kCuda), {3, 17, 24}, {17 * 24 * 2, 24 * 2, 2}, 0),
                       q.to(kCuda));
    check_close(rd, r, tol_of(dtype));
  }
}

BOOST_AUTO_TEST_CASE(every_activation_and_its_backward_match_the_cpu_table) {
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16})
    for (ActivationKind kind :
         {ActivationKind::Relu, ActivationKind::Tanh, ActivationKind::Sigmoid, ActivationKind::Gelu,
          ActivationKind::GeluTanh, ActivationKind::Silu}) {
      const Tensor x = host_randn({3, 257}, dtype), g = host_randn({3, 257}, dtype);
      Tensor y = empty(x.shape(), TensorOptions(dtype, kCPU)), dx = empty_like(y);
      kernels(kCPU).activation(kind, y, x);
      // The backward's saved tensor: the output for relu, tanh and sigmoid, else the input.
      const bool saves_output = kind == ActivationKind::Relu || kind == ActivationKind::Tanh ||
                                kind == ActivationKind::Sigmoid;
      const Tensor saved = saves_output ? y : x;
      kernels(kCPU).activation_backward(kind, dx, saved, g);
      Tensor yd = poisoned(x.shape(), dtype), dxd = poisoned(x.shape(), dtype);
      kernels(kCuda).activation(kind, yd, x.to(kCuda));
      kernels(kCuda).activation_backward(kind, dxd, saved.to(kCuda), g.to(kCuda));
      check_close(yd, y, tol_of(dtype));
      check_close(dxd, dx, tol_of(dtype));
    }
}

BOOST_AUTO_TEST_CASE(adamw_and_sgd_updates_match_the_cpu_table) {
  // Long chains of float operations in another order: the fp32 bound is 1e-4 (README.md).
  const std::int64_t n = 10007;
  const optim::AdamScalars adam{.lr = 1e-2, .weight_decay = 0.1, .decoupled = true, .step = 3};
  Tensor p = host_randn({n}), g = host_randn({n}), m = mul(host_randn({n}), 0.1);
  Tensor v = abs(mul(host_randn({n}), 0.1));
  Tensor pd = p.to(kCuda), gd = g.to(kCuda), md = m.to(kCuda), vd = v.to(kCuda);
  kernels(kCPU).adam_update(p, g, m, v, Tensor(), adam);
  kernels(kCuda).adam_update(pd, gd, md, vd, Tensor(), adam);
  check_close(pd, p, 1e-4);
  check_close(md, m, 1e-4);
  check_close(vd, v, 1e-4);

  const optim::SgdScalars sgd{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01};
  Tensor q = host_randn({n}), buf = host_randn({n});
  Tensor qd = q.to(kCuda), bufd = buf.to(kCuda);
  kernels(kCPU).sgd_update(q, g, buf, sgd);
  kernels(kCuda).sgd_update(qd, gd, bufd, sgd);
  check_close(qd, q, 1e-4);
  check_close(bufd, buf, 1e-4);

  // 16-bit parameters (torch allows them; FSDP's mixed precision keeps float32 master weights):
  // refused with a line naming the dtype, never updated wrongly.
  for (DType dtype : {DType::BFloat16, DType::Float16}) {
    Tensor p16 = host_randn({5}, dtype).to(kCuda), g16 = host_randn({5}, dtype).to(kCuda);
    Tensor m16 = zeros({5}, TensorOptions(dtype, kCuda)), v16 = zeros_like(m16);
    const std::string shape = std::string(dtype_name(dtype)) + " of shape [5] (device cuda:0)";
    expect_missing([&] { kernels(kCuda).adam_update(p16, g16, m16, v16, Tensor(), adam); },
                   "adam_update: no CUDA kernel yet for " + shape);
    expect_missing([&] { kernels(kCuda).sgd_update(p16, g16, m16, sgd); },
                   "sgd_update: no CUDA kernel yet for " + shape);
  }
}

BOOST_AUTO_TEST_CASE(sum_mean_and_amax_over_any_dims_match_the_cpu_table) {
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16, DType::Float64}) {
    const Tensor base = host_randn({3, 1, 70, 5}, dtype);
    const Tensor x = base.transpose(0, 2), xd = base.to(kCuda).transpose(0, 2);  // (70, 1, 3, 5)
    for (const std::vector<bool>& mask : {std::vector<bool>{true, false, false, false},
                                          {false, false, true, true},
                                          {true, true, true, true},
                                          {false, true, false, false}}) {
      Shape kept;
      std::int64_t count = 1;
      for (std::size_t d = 0; d < mask.size(); ++d)
        if (mask[d])
          count *= x.shape()[d];
        else
          kept.push_back(x.shape()[d]);
      for (bool mean : {false, true}) {
        Tensor want = empty(kept, TensorOptions(dtype, kCPU)), got = poisoned(kept, dtype);
        kernels(kCPU).sum(want, x, mask, mean, count);
        kernels(kCuda).sum(got, xd, mask, mean, count);
        check_close(got, want, tol_of(dtype));
      }
      Tensor want = empty(kept, TensorOptions(dtype, kCPU)), got = poisoned(kept, dtype);
      kernels(kCPU).amax(want, x, mask);
      kernels(kCuda).amax(got, xd, mask);
      BOOST_TEST(got.to(kCPU).to_vector() == want.to_vector());
    }
  }
}

// Comparisons, eq_scalar, logical_not, where and masked_fill: exact (they compare or move
// values), with broadcast and transposed operands.
BOOST_AUTO_TEST_CASE(comparisons_and_selections_equal_the_cpu_table) {
  for (DType dtype :
       {DType::Float32, DType::BFloat16, DType::Float16, DType::Float64, DType::Int64}) {
    const Tensor base = mul(host_randn({5, 4}), 2.0).to(dtype);
    const Tensor a = base.t(), a_device = base.to(kCuda).t();  // (4, 5)
    const Tensor b = mul(host_randn({5}), 2.0).to(dtype);
    for (CompareKind kind : {CompareKind::Eq, CompareKind::Ne, CompareKind::Lt, CompareKind::Le,
                             CompareKind::Gt, CompareKind::Ge}) {
      Tensor want = empty({4, 5}, TensorOptions(DType::Bool, kCPU));
      kernels(kCPU).compare(kind, want, a.contiguous(), b.expand({4, 5}).contiguous());
      Tensor got = empty({4, 5}, TensorOptions(DType::Bool, kCuda));
      kernels(kCuda).compare(kind, got, a_device, b.to(kCuda));
      BOOST_TEST(got.to(kCPU).to_vector() == want.to_vector());
    }
    Tensor eq_want = empty({4, 5}, TensorOptions(DType::Bool, kCPU));
    Tensor eq_got = empty({4, 5}, TensorOptions(DType::Bool, kCuda));
    const double probe = a.contiguous().to_vector()[3];
    kernels(kCPU).eq_scalar(eq_want, a.contiguous(), probe);
    kernels(kCuda).eq_scalar(eq_got, a_device, probe);
    BOOST_TEST(eq_got.to(kCPU).to_vector() == eq_want.to_vector());
    Tensor not_want = empty({4, 5}, TensorOptions(DType::Bool, kCPU));
    Tensor not_got = empty({4, 5}, TensorOptions(DType::Bool, kCuda));
    kernels(kCPU).logical_not(not_want, a.contiguous());
    kernels(kCuda).logical_not(not_got, a_device);
    BOOST_TEST(not_got.to(kCPU).to_vector() == not_want.to_vector());

    Tensor cond = empty({4, 5}, TensorOptions(DType::Bool, kCPU));
    kernels(kCPU).compare(CompareKind::Gt, cond, a.contiguous(), b.expand({4, 5}).contiguous());
    Tensor w_want = empty({4, 5}, TensorOptions(dtype, kCPU));
    kernels(kCPU).where(w_want, cond, a.contiguous(), b.expand({4, 5}).contiguous());
    Tensor w_got = empty({4, 5}, TensorOptions(dtype, kCuda));
    kernels(kCuda).where(w_got, cond.to(kCuda), a_device, b.to(kCuda));
    BOOST_TEST(w_got.to(kCPU).to_vector() == w_want.to_vector());
    Tensor f_want = empty({4, 5}, TensorOptions(dtype, kCPU));
    kernels(kCPU).masked_fill(f_want, a.contiguous(), cond, -7.25);
    Tensor f_got = empty({4, 5}, TensorOptions(dtype, kCuda));
    kernels(kCuda).masked_fill(f_got, a_device, cond.to(kCuda), -7.25);
    BOOST_TEST(f_got.to(kCPU).to_vector() == f_want.to_vector());
  }
}

// Embedding's path: rows gathered by index (exact) and their gradient scattered back with
// atomics (repeated indices add up; the order of additions differs from the CPU's); int64 and
// int32 indices on the device (a negative one is bad, as torch's: bad_indices_... below).
BOOST_AUTO_TEST_CASE(index_select_and_index_add_match_the_cpu_table) {
  const IndexBounds bounds = index_select_bounds(8, 1);
  for (DType index_dtype : {DType::Int64, DType::Int32}) {
    const Tensor index = from_vector(std::vector<double>{3, 0, 3, 7, 1, 6}, {6}, index_dtype);
    // inner 5: an element a thread; 16: rows of whole 16-byte packs, a pack a thread.
    for (std::int64_t inner : {5, 16})
      for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16, DType::Float64}) {
        const Tensor src = host_randn({2, 8, inner}, dtype);  // (outer, size, inner)
        Tensor want = empty({2, 6, inner}, TensorOptions(dtype, kCPU));
        kernels(kCPU).index_select(want, src, index, bounds, 2, inner);
        Tensor got = poisoned({2, 6, inner}, dtype);
        kernels(kCuda).index_select(got, src.to(kCuda), index.to(kCuda), bounds, 2, inner);
        BOOST_TEST(got.to(kCPU).to_vector() == want.to_vector(), "inner " << inner);

        const Tensor g = host_randn({2, 6, inner}, dtype);
        Tensor grad = zeros({2, 8, inner}, TensorOptions(dtype, kCPU));
        Tensor grad_device = grad.to(kCuda);
        kernels(kCPU).index_add(grad, g, index, bounds, 2, inner);
        kernels(kCuda).index_add(grad_device, g.to(kCuda), index.to(kCuda), bounds, 2, inner);
        check_close(grad_device, grad, tol_of(dtype));
      }
  }
}

// A bad index or class target is checked on the device (no host read in the op): the call
// returns, and the CPU's message (less the index's position, which the device does not record)
// comes as an IndexError at the next synchronisation (here the copy to the host), as torch
// reports a device-side assert; the device goes on working.
BOOST_AUTO_TEST_CASE(bad_indices_and_targets_raise_the_cpu_message_at_the_next_sync) {
  const Tensor weight = host_randn({5, 3});
  const Tensor bad = from_vector(std::vector<double>{1, 5, 0}, {3}, DType::Int64);
  std::string cpu_message;
  try {
    embedding(weight, bad);
  } catch (const IndexError& e) {
    cpu_message = e.what();
  }
  std::string device_message =
      "embedding: index 5 is out of range for a table of 5 rows (weight shape [5, 3])";
  BOOST_TEST(cpu_message == device_message + ", at position 1 of the indices");
  const auto reported = [&](const IndexError& e) {
    const std::string what = e.what();
    BOOST_TEST_MESSAGE(what);
    return what.find(device_message) != std::string::npos && what.find("cuda:0") == 0 &&
           what.find("position") == std::string::npos;
  };
  Tensor rows = embedding(weight.to(kCuda), bad.to(kCuda));  // no throw: nothing read
  BOOST_CHECK_EXCEPTION(rows.to(kCPU), IndexError, reported);
  // Reported once; good indices then give the CPU's rows.
  const Tensor good = from_vector(std::vector<double>{1, 4, 0, 4}, {2, 2}, DType::Int64);
  BOOST_TEST(embedding(weight.to(kCuda), good.to(kCuda)).to(kCPU).to_vector() ==
             embedding(weight, good).to_vector());
  // Rows of whole 16-byte packs (a pack a thread) check their index alike.
  const Tensor wide = host_randn({5, 8});
  BOOST_CHECK_EXCEPTION(embedding(wide.to(kCuda), bad.to(kCuda)).to(kCPU), IndexError,
                        [&](const IndexError& e) {
                          return std::string(e.what()).find(
                                     "embedding: index 5 is out of range for a table of 5 rows "
                                     "(weight shape [5, 8])") != std::string::npos;
                        });

  const Tensor logits = host_randn({3, 4});
  const Tensor bad_target = from_vector(std::vector<double>{1, 4, -100}, {3}, DType::Int64);
  try {
    cross_entropy(logits, bad_target);
  } catch (const IndexError& e) {
    cpu_message = e.what();
  }
  device_message =
      "cross_entropy: target 4 is out of bounds (expected a class index in [0, 4) or "
      "ignore_index -100)";
  BOOST_TEST(cpu_message == device_message + ", at position 1 of the targets");
  Tensor loss = cross_entropy(logits.to(kCuda), bad_target.to(kCuda));
  BOOST_CHECK_EXCEPTION(current_stream(kCuda).synchronize(), IndexError, reported);
  // Good targets (one ignored): the CPU's loss and gradient, the mean over the counted two.
  const Tensor target = from_vector(std::vector<double>{1, 3, -100}, {3}, DType::Int64);
  Tensor x = logits.clone().requires_grad_(true), xd = logits.to(kCuda).requires_grad_(true);
  Tensor want = cross_entropy(x, target), got = cross_entropy(xd, target.to(kCuda));
  check_close(got, want, 1e-6);
  want.backward();
  got.backward();
  check_close(xd.grad(), x.grad(), 1e-6);
}

BOOST_AUTO_TEST_CASE(dropouts_masked_scale_matches_the_cpu_table) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const Tensor x = host_randn({33, 7}, dtype);
    const Tensor mask =
        gt(host_randn({33, 7}), zeros({}, TensorOptions(DType::Float32, kCPU))).to(DType::UInt8);
    Tensor want = empty_like(x), got = poisoned(x.shape(), dtype);
    kernels(kCPU).masked_scale(want, x, mask, 1.25);
    kernels(kCuda).masked_scale(got, x.to(kCuda), mask.to(kCuda), 1.25);
    BOOST_TEST(got.to(kCPU).to_vector() == want.to_vector());
  }
}

BOOST_AUTO_TEST_CASE(layer_norm_and_its_backward_match_the_cpu_table) {
  // float32 rows; 16-bit rows with float32 parameters (autocast's mixed precision) and with
  // parameters of their own dtype (FSDP's param_dtype): read and written as they are. No rows.
  for (const std::int64_t rows : {37, 0}) {
    const std::int64_t n = 96;
    for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16})
      for (DType pdtype : std::set<DType>{DType::Float32, dtype})
        for (bool affine : {true, false}) {
          BOOST_TEST_CONTEXT(rows << " rows of " << dtype_name(dtype) << ", parameters "
                                  << dtype_name(pdtype) << (affine ? "" : ", no affine")) {
            const Tensor w = host_randn({n}, pdtype), b = host_randn({n}, pdtype);
            const Tensor x = add(host_randn({rows, n}), 3.0).to(dtype);
            const Tensor g = host_randn({rows, n}, dtype);
            const double tol = tol_of(dtype);
            const Tensor wt = affine ? w : Tensor(), bt = affine ? b : Tensor();
            Tensor y = empty({rows, n}, TensorOptions(dtype, kCPU));
            Tensor mean = empty({rows}, TensorOptions(DType::Float32, kCPU)),
                   rstd = empty_like(mean);
            kernels(kCPU).layer_norm(y, mean, rstd, x, wt, bt, n, 1e-5);
            Tensor yd = poisoned({rows, n}, dtype), meand = poisoned({rows}, DType::Float32);
            Tensor rstdd = poisoned({rows}, DType::Float32);
            kernels(kCuda).layer_norm(yd, meand, rstdd, x.to(kCuda),
                                      affine ? w.to(kCuda) : Tensor(),
                                      affine ? b.to(kCuda) : Tensor(), n, 1e-5);
            check_close(yd, y, tol);
            check_close(meand, mean, kTolFp32);
            check_close(rstdd, rstd, kTolFp32);

            // dw and db overwritten in the parameters' dtype: poisoned on both sides.
            Tensor dx = empty_like(x);
            Tensor dw = poisoned_host({n}, pdtype), db = poisoned_host({n}, pdtype);
            kernels(kCPU).layer_norm_backward(dx, affine ? dw : Tensor(), affine ? db : Tensor(), x,
                                              wt, mean, rstd, g, n);
            Tensor dxd = poisoned({rows, n}, dtype);
            Tensor dwd = poisoned({n}, pdtype), dbd = poisoned({n}, pdtype);
            kernels(kCuda).layer_norm_backward(
                dxd, affine ? dwd : Tensor(), affine ? dbd : Tensor(), x.to(kCuda),
                affine ? w.to(kCuda) : Tensor(), mean.to(kCuda), rstd.to(kCuda), g.to(kCuda), n);
            check_close(dxd, dx, std::max(tol, 1e-4));  // float sums in another order (README)
            if (affine) {
              BOOST_TEST(dwd.dtype() == pdtype);
              check_close(dwd, dw, std::max(tol_of(pdtype), 1e-4));
              check_close(dbd, db, std::max(tol_of(pdtype), 1e-4));
              if (rows == 0)
                BOOST_TEST(dwd.to(kCPU).to_vector() == std::vector<double>(n, 0.0),
                           boost::test_tools::per_element());
            }
          }
        }
  }
}

// torch.max(x, dim): a strided input (a transposed view), NaN propagated at its first position,
// ties at the first index; the backward scatters an expanded (strided) gradient.
BOOST_AUTO_TEST_CASE(max_dim_and_its_backward_match_the_cpu_table) {
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16, DType::Float64})
    for (std::int64_t dim : {0, 1, 2}) {
      Tensor base = host_randn({5, 4, 6}).to(dtype);
      base.narrow(0, 1, 1).narrow(1, 2, 1).narrow(2, 0, 2).fill_(7.0);  // a tie
      base.narrow(0, 2, 1).narrow(1, 1, 1).narrow(2, 3, 2).fill_(NAN);  // two NaNs
      const Tensor a = base.transpose(0, 2);                            // (6, 4, 5) strided
      Shape keep = a.shape();
      keep[static_cast<std::size_t>(dim)] = 1;
      Tensor values = empty(keep, TensorOptions(dtype, kCPU));
      Tensor indices = empty(keep, TensorOptions(DType::Int64, kCPU));
      kernels(kCPU).max_dim(values, indices, a, dim);
      const Tensor a_d = base.to(kCuda).transpose(0, 2);
      Tensor values_d = poisoned(keep, dtype);
      Tensor indices_d = full(keep, -1, TensorOptions(DType::Int64, kCPU)).to(kCuda);
      kernels(kCuda).max_dim(values_d, indices_d, a_d, dim);
      BOOST_TEST(indices_d.to(kCPU).to_vector() == indices.to_vector(),
                 boost::test_tools::per_element());
      const std::vector<double> got = values_d.to(kCPU).to_vector(), want = values.to_vector();
      for (std::size_t i = 0; i < got.size(); ++i)
        BOOST_TEST((got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i]))),
                   "value " << i << ": " << got[i] << " != " << want[i]);

      const Tensor g = host_randn({1}, dtype).expand(keep);  // stride 0 everywhere
      Tensor grad = zeros(a.shape(), TensorOptions(dtype, kCPU));
      kernels(kCPU).max_dim_backward(grad, g, indices, dim);
      Tensor grad_d = zeros(a.shape(), TensorOptions(dtype, kCuda));
      kernels(kCuda).max_dim_backward(grad_d, g.to(kCuda).expand(keep), indices_d, dim);
      BOOST_TEST(grad_d.to(kCPU).to_vector() == grad.to_vector(), boost::test_tools::per_element());
    }
}

// Llama's RMSNorm: float32 rows, and bf16 rows with a bf16 weight (the table's contract: one
// dtype) and float32 statistics; with and without the weight.
BOOST_AUTO_TEST_CASE(rms_norm_and_its_backward_match_the_cpu_table) {
  const std::int64_t rows = 37;
  // 80 columns: rows of whole 16-byte packs (the weight gradient's columns in packs); 37 not.
  for (std::int64_t n : {80, 37})
    for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16})
      for (bool weighted : {true, false}) {
        const Tensor x = add(host_randn({rows, n}), 1.0).to(dtype),
                     g = host_randn({rows, n}, dtype);
        const Tensor w = weighted ? host_randn({n}, dtype) : Tensor();
        const Tensor w_d = weighted ? w.to(kCuda) : Tensor();
        const double tol = tol_of(dtype);
        Tensor y = empty({rows, n}, TensorOptions(dtype, kCPU));
        Tensor rstd = empty({rows}, TensorOptions(DType::Float32, kCPU));
        kernels(kCPU).rms_norm(y, rstd, x, w, n, 1e-6);
        Tensor yd = poisoned({rows, n}, dtype), rstdd = poisoned({rows}, DType::Float32);
        kernels(kCuda).rms_norm(yd, rstdd, x.to(kCuda), w_d, n, 1e-6);
        check_close(yd, y, tol);
        check_close(rstdd, rstd, kTolFp32);

        Tensor dx = empty_like(x), dw = zeros({n}, TensorOptions(DType::Float64, kCPU));
        kernels(kCPU).rms_norm_backward(dx, weighted ? dw : Tensor(), x, w, rstd, g, n);
        Tensor dxd = poisoned({rows, n}, dtype);
        Tensor dwd = zeros({n}, TensorOptions(DType::Float64, kCuda));
        kernels(kCuda).rms_norm_backward(dxd, weighted ? dwd : Tensor(), x.to(kCuda), w_d,
                                         rstd.to(kCuda), g.to(kCuda), n);
        check_close(dxd, dx, std::max(tol, 1e-4));  // float sums in another order
        if (weighted) check_close(dwd, dw, 1e-4);
      }
  const Tensor x16 = host_randn({2, 4}, DType::BFloat16).to(kCuda);
  Tensor y = empty_like(x16), r = empty({2}, TensorOptions(DType::Float32, kCuda));
  expect_missing([&] { kernels(kCuda).rms_norm(y, r, x16, host_randn({4}).to(kCuda), 4, 1e-6); },
                 "rms_norm: no CUDA kernel yet for bfloat16 of shape [2, 4] (device cuda:0)");
}

// Llama's rotary embedding on a (B, S, H, D) projection read as (B, H, S, D) through its strides,
// with a shared (S, D) and a per-batch (B, S, D) table; forward and transpose (the backward).
BOOST_AUTO_TEST_CASE(rotary_and_its_transpose_match_the_cpu_table) {
  const std::int64_t B = 2, H = 3, S = 5, D = 8;
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16})
    for (std::int64_t table_batch : {std::int64_t(0), S * D})
      for (bool transpose : {false, true}) {
        const Tensor x = host_randn({B, S, H, D}, dtype).transpose(1, 2);  // strided
        const Shape table = table_batch ? Shape{B, S, D} : Shape{S, D};
        const Tensor c = host_randn(table, dtype), sn = host_randn(table, dtype);
        Tensor out = empty({B, H, S, D}, TensorOptions(dtype, kCPU));
        kernels(kCPU).rotary(out, x, c, sn, table_batch, transpose);
        // The same strided view on the device: the contiguous (B, S, H, D) copied, transposed.
        const Tensor x_d = x.transpose(1, 2).contiguous().to(kCuda).transpose(1, 2);
        Tensor out_d = poisoned({B, H, S, D}, dtype);
        kernels(kCuda).rotary(out_d, x_d, c.to(kCuda), sn.to(kCuda), table_batch, transpose);
        check_close(out_d, out, dtype == DType::Float32 ? kTolFp32 : 1e-6);  // same roundings
      }
}

// 16-bit rows only along the last dim (inner 1): the only form core/functional/softmax.cpp
// passes the table in bf16 or fp16 (the CPU table's 16-bit path assumes it).
BOOST_AUTO_TEST_CASE(softmax_along_any_dim_and_masked_softmax_match_the_cpu_table) {
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16, DType::Float64}) {
    const bool narrow = dtype == DType::BFloat16 || dtype == DType::Float16;
    const Tensor x = mul(host_randn({3, 50, 4}, dtype), 3.0), g = host_randn({3, 50, 4}, dtype);
    for (bool log : {false, true})
      // Last-dim rows (inner 1) in 16-byte packs: 4 (one float pack), 40 (rows at alternating
      // alignments in 16 bits), 600 (more than the block's threads).
      for (auto [outer, n, inner] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{3, 50, 4},
                                     {150, 4, 1},
                                     {15, 40, 1},
                                     {1, 600, 1},
                                     {1, 3, 200}}) {
        if (narrow && inner != 1) continue;
        BOOST_TEST_INFO_SCOPE(dtype_name(dtype) << " log " << log << " (" << outer << ", " << n
                                                << ", " << inner << ")");
        Tensor y = empty_like(x), dx = empty_like(x);
        kernels(kCPU).softmax(y, x, outer, n, inner, log);
        kernels(kCPU).softmax_backward(dx, y, g, outer, n, inner, log);
        Tensor yd = poisoned(x.shape(), dtype), dxd = poisoned(x.shape(), dtype);
        kernels(kCuda).softmax(yd, x.to(kCuda), outer, n, inner, log);
        kernels(kCuda).softmax_backward(dxd, y.to(kCuda), g.to(kCuda), outer, n, inner, log);
        check_close(yd, y, tol_of(dtype));
        check_close(dxd, dx, std::max(tol_of(dtype), 1e-4));  // sums in another order
      }
    // An additive causal mask, shared by the batch and per batch entry.
    const Tensor scores = host_randn({2, 6, 6}, dtype);
    Tensor mask = zeros({6, 6}, TensorOptions(dtype, kCPU));
    for (std::int64_t i = 0; i < 6; ++i) mask.narrow(0, i, 1).narrow(1, i + 1, 5 - i).fill_(-1e9);
    const Tensor per_batch = mask.expand({2, 6, 6}).contiguous();
    for (const auto& [m, stride] : {std::pair<Tensor, std::int64_t>{mask, 0}, {per_batch, 36}}) {
      BOOST_TEST_INFO_SCOPE(dtype_name(dtype) << " masked_softmax, mask stride " << stride);
      Tensor want = empty_like(scores), got = poisoned(scores.shape(), dtype);
      kernels(kCPU).masked_softmax(want, scores, m, stride);
      kernels(kCuda).masked_softmax(got, scores.to(kCuda), m.to(kCuda), stride);
      check_close(got, want, tol_of(dtype));
    }
  }
}

// clip_grad_norm_'s pieces: the norm shares in double and the clamp (nan stays nan).
BOOST_AUTO_TEST_CASE(norm_shares_and_clamp_match_the_cpu_table) {
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16, DType::Float64}) {
    const Tensor base = host_randn({40, 31}, dtype);
    const Tensor t = base.t(), t_device = base.to(kCuda).t();
    for (double p : {1.0, 2.0, 3.0, double(INFINITY)}) {
      Tensor want = empty({}, TensorOptions(DType::Float64, kCPU));
      Tensor got = empty({}, TensorOptions(DType::Float64, kCuda));
      kernels(kCPU).norm_partial(want, t, p);
      kernels(kCuda).norm_partial(got, t_device, p);
      check_close(got, want, p == INFINITY ? 0.0 : 1e-5);
    }
    Tensor c = host_randn({9}, dtype);
    c.narrow(0, 4, 1).fill_(NAN);
    Tensor cd = c.to(kCuda);
    kernels(kCPU).clamp_(c, -0.5, 0.25);
    kernels(kCuda).clamp_(cd, -0.5, 0.25);
    const std::vector<double> got = cd.to(kCPU).to_vector(), want = c.to_vector();
    for (std::size_t i = 0; i < got.size(); ++i)
      BOOST_TEST((got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i]))));
  }
}

BOOST_AUTO_TEST_CASE(mse_loss_and_its_backward_match_the_cpu_table) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const Tensor x = host_randn({13, 7}, dtype), t = host_randn({13, 7}, dtype);
    const Tensor g = host_randn({13, 7}, dtype);
    Tensor none = empty_like(x), none_d = poisoned(x.shape(), dtype);
    kernels(kCPU).mse_loss(none, x, t, true, false);
    kernels(kCuda).mse_loss(none_d, x.to(kCuda), t.to(kCuda), true, false);
    BOOST_TEST(none_d.to(kCPU).to_vector() == none.to_vector());
    for (bool mean : {false, true}) {
      Tensor s = empty({}, TensorOptions(dtype, kCPU)), s_d = poisoned({}, dtype);
      kernels(kCPU).mse_loss(s, x, t, false, mean);
      kernels(kCuda).mse_loss(s_d, x.to(kCuda), t.to(kCuda), false, mean);
      check_close(s_d, s, 1e-12);  // double sums: only their order differs
    }
    Tensor d = empty_like(x), d_d = poisoned(x.shape(), dtype);
    kernels(kCPU).mse_loss_backward(d, x, t, g, 2.0);
    kernels(kCuda).mse_loss_backward(d_d, x.to(kCuda), t.to(kCuda), g.to(kCuda), 2.0);
    BOOST_TEST(d_d.to(kCPU).to_vector() == d.to_vector());
    // The reduced loss's gradient: one element, on the device.
    const Tensor g0 = full({}, 0.7, TensorOptions(dtype, kCPU));
    kernels(kCPU).mse_loss_backward(d, x, t, g0, 2.0 / 91);
    kernels(kCuda).mse_loss_backward(d_d, x.to(kCuda), t.to(kCuda), g0.to(kCuda), 2.0 / 91);
    BOOST_TEST(d_d.to(kCPU).to_vector() == d.to_vector());
  }
}

// train_gpt's loss: cross-entropy per position (with label smoothing and an ignored target),
// its backward, nll, and the in-order sum (bit for bit: one thread adds in the CPU's order).
BOOST_AUTO_TEST_CASE(classification_losses_match_the_cpu_table) {
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16, DType::Float64})
    for (std::int64_t s : {1, 3}) {
      const NcsLayout layout{5, 300, s};
      const Tensor x = mul(host_randn({5, 300, s}, dtype), 4.0).to(dtype);
      // 16-bit logits are computed in float32 on the same (rounded) values: the CPU table's
      // float32 results are the reference (its own 16-bit path is checked against them below).
      const bool narrow = dtype == DType::BFloat16 || dtype == DType::Float16;
      const Tensor xr = narrow ? x.to(DType::Float32) : x;
      std::vector<double> target_values, grad_values;
      for (std::int64_t p = 0; p < 5 * s; ++p) {
        target_values.push_back(p == 2 ? -100 : (p * 37) % 300);
        grad_values.push_back(0.1 * double(p + 1));
      }
      const Tensor targets = from_vector(target_values, {5 * s}, DType::Int64);
      const Tensor targets_d = targets.to(kCuda);
      const IndexBounds bounds = class_target_bounds(IndexOp::CrossEntropy, 300, -100);
      // The upstream gradient per position, and one for every position (a reduced loss's).
      const Tensor per_position = from_vector(grad_values, {5 * s}, DType::Float64);
      const Tensor one = full({}, 0.25, TensorOptions(DType::Float64, kCPU));
      for (const Tensor& grads : {per_position, one})
        for (double smoothing : {0.0, 0.1}) {
          Tensor losses = empty({5 * s}, TensorOptions(DType::Float64, kCPU)),
                 lse = empty_like(losses);
          kernels(kCPU).cross_entropy(losses, lse, xr, targets, layout, bounds, smoothing);
          Tensor losses_d = poisoned({5 * s}, DType::Float64),
                 lse_d = poisoned({5 * s}, DType::Float64);
          kernels(kCuda).cross_entropy(losses_d, lse_d, x.to(kCuda), targets_d, layout, bounds,
                                       smoothing);
          check_close(losses_d, losses, 1e-5);
          check_close(lse_d, lse, 1e-5);
          // Poisoned gradients: every element is written, the ignored position's with zeros.
          Tensor dx = poisoned_host(x.shape(), xr.dtype());
          Tensor dx_d = poisoned(x.shape(), dtype);
          kernels(kCPU).cross_entropy_backward(dx, xr, lse, targets, grads, layout, bounds,
                                               smoothing);
          kernels(kCuda).cross_entropy_backward(dx_d, x.to(kCuda), lse_d, targets_d,
                                                grads.to(kCuda), layout, bounds, smoothing);
          check_close(dx_d, dx, tol_of(dtype));
          if (narrow) {  // the CPU table's 16-bit path: the float32 results, dx rounded once
            Tensor losses16 = empty_like(losses), lse16 = empty_like(lse);
            kernels(kCPU).cross_entropy(losses16, lse16, x, targets, layout, bounds, smoothing);
            BOOST_TEST(losses16.to_vector() == losses.to_vector());
            BOOST_TEST(lse16.to_vector() == lse.to_vector());
            Tensor dx16 = poisoned_host(x.shape(), dtype);
            kernels(kCPU).cross_entropy_backward(dx16, x, lse, targets, grads, layout, bounds,
                                                 smoothing);
            BOOST_TEST(dx16.to_vector() == dx.to(dtype).to_vector());
          }
        }
      const IndexBounds nll_bounds = class_target_bounds(IndexOp::NllLoss, 300, -100);
      Tensor nll = empty({5 * s}, TensorOptions(DType::Float64, kCPU));
      Tensor nll_d = poisoned({5 * s}, DType::Float64);
      kernels(kCPU).nll_loss(nll, xr, targets, layout, nll_bounds);
      kernels(kCuda).nll_loss(nll_d, x.to(kCuda), targets_d, layout, nll_bounds);
      BOOST_TEST(nll_d.to(kCPU).to_vector() == nll.to_vector());
      for (const Tensor& grads : {per_position, one}) {
        Tensor dn = zeros(x.shape(), TensorOptions(xr.dtype(), kCPU));
        Tensor dn_d = zeros(x.shape(), TensorOptions(dtype, kCuda));
        kernels(kCPU).nll_loss_backward(dn, targets, grads, layout, nll_bounds);
        kernels(kCuda).nll_loss_backward(dn_d, targets_d, grads.to(kCuda), layout, nll_bounds);
        BOOST_TEST(dn_d.to(kCPU).to_vector() == dn.to(dtype).to_vector());
      }
      for (DType out_dtype : {DType::Float64, DType::Float32}) {
        // The sum, and the mean over the targets that are not ignored (counted on the device).
        Tensor total = empty({}, TensorOptions(out_dtype, kCPU)), total_d = poisoned({}, out_dtype);
        kernels(kCPU).sum_in_order(total, Tensor(), nll, Tensor(), -100);
        kernels(kCuda).sum_in_order(total_d, Tensor(), nll.to(kCuda), Tensor(), -100);
        BOOST_TEST(total_d.to(kCPU).to_vector() == total.to_vector());
        Tensor count = empty({}, TensorOptions(DType::Float64, kCPU));
        Tensor count_d = poisoned({}, DType::Float64);
        kernels(kCPU).sum_in_order(total, count, nll, targets, -100);
        kernels(kCuda).sum_in_order(total_d, count_d, nll.to(kCuda), targets_d, -100);
        BOOST_TEST(count.item() == double(5 * s - 1));
        BOOST_TEST(count_d.to(kCPU).item() == double(5 * s - 1));
        BOOST_TEST(total_d.to(kCPU).to_vector() == total.to_vector());
      }
    }
}

// Contiguous rows (s == 1, train_gpt's logits) move in 16-byte packs between a scalar head and
// tail: rows shorter than a pack, odd rows (each row at another alignment), rows of whole
// packs; logits and gradient starting `offset` elements into their buffers, and a gradient at
// another alignment than the logits (no shared alignment: all scalar).
BOOST_AUTO_TEST_CASE(cross_entropy_rows_at_any_alignment_match_the_cpu_table) {
  // A device copy of `t` starting `offset` elements into a poisoned buffer.
  const auto at = [](const Tensor& t, std::int64_t offset) {
    Tensor buffer = poisoned({t.numel() + offset}, t.dtype());
    Tensor view = buffer.narrow(0, offset, t.numel()).view(t.shape());
    view.copy_(t);
    return view;
  };
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16, DType::Float64})
    for (std::int64_t c : {3, 7, 8, 301, 1000})
      for (auto [offset, d_offset] :
           std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 0}, {1, 1}, {3, 3}, {0, 1}}) {
        const std::int64_t n = 5;
        const NcsLayout layout{n, c, 1};
        const Tensor x = mul(host_randn({n, c}, dtype), 4.0).to(dtype);
        const bool narrow = dtype == DType::BFloat16 || dtype == DType::Float16;
        const Tensor xr = narrow ? x.to(DType::Float32) : x;
        std::vector<double> target_values;
        for (std::int64_t p = 0; p < n; ++p) target_values.push_back(p == 2 ? -100 : (p * 37) % c);
        const Tensor targets = from_vector(target_values, {n}, DType::Int64);
        const IndexBounds bounds = class_target_bounds(IndexOp::CrossEntropy, c, -100);
        const Tensor grads = from_vector({0.1, 0.2, 0.3, 0.4, 0.5}, {n}, DType::Float64);
        Tensor losses = empty({n}, TensorOptions(DType::Float64, kCPU)), lse = empty_like(losses);
        kernels(kCPU).cross_entropy(losses, lse, xr, targets, layout, bounds, 0.1);
        Tensor losses_d = poisoned({n}, DType::Float64), lse_d = poisoned({n}, DType::Float64);
        const Tensor x_d = at(x, offset), targets_d = targets.to(kCuda);
        kernels(kCuda).cross_entropy(losses_d, lse_d, x_d, targets_d, layout, bounds, 0.1);
        BOOST_TEST_CONTEXT(dtype_name(dtype)
                           << " c " << c << " offsets " << offset << "," << d_offset) {
          check_close(losses_d, losses, 1e-5);
          check_close(lse_d, lse, 1e-5);
          Tensor dx = zeros(x.shape(), TensorOptions(xr.dtype(), kCPU));
          Tensor dx_d = at(poisoned_host(x.shape(), dtype), d_offset);
          kernels(kCPU).cross_entropy_backward(dx, xr, lse, targets, grads, layout, bounds, 0.1);
          kernels(kCuda).cross_entropy_backward(dx_d, x_d, lse_d, targets_d, grads.to(kCuda),
                                                layout, bounds, 0.1);
          check_close(dx_d, dx, tol_of(dtype));
        }
      }
}

// Attention's head moves: exact (copies, and part 0's division rounded once, as the CPU's).
BOOST_AUTO_TEST_CASE(split_and_merge_heads_equal_the_cpu_table) {
  // head_dim 6: element by element (float64's copies in 16-byte packs of 2); 8 and 16: rows of
  // whole 16-byte packs on both sides, the copies a pack per thread.
  for (std::int64_t hd : {6, 8, 16})
    for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16, DType::Float64}) {
      const HeadsLayout layout{.L = 5, .N = 2, .parts = 3, .heads = 4, .hd = hd};
      const Tensor packed = host_randn({5, 2, layout.row()}, dtype);
      std::vector<Tensor> parts, parts_d;
      for (int p = 0; p < 3; ++p) {
        parts.push_back(empty({8, 5, hd}, TensorOptions(dtype, kCPU)));
        parts_d.push_back(poisoned({8, 5, hd}, dtype));
      }
      kernels(kCPU).split_heads(parts, packed, layout, 8.0);
      kernels(kCuda).split_heads(parts_d, packed.to(kCuda), layout, 8.0);
      for (int p = 0; p < 3; ++p)
        BOOST_TEST(parts_d[p].to(kCPU).to_vector() == parts[p].to_vector(), "hd " << hd);
      parts[1] = Tensor();  // an undefined part merges as zeros
      parts_d[1] = Tensor();
      Tensor merged = empty(packed.shape(), TensorOptions(dtype, kCPU));
      Tensor merged_d = poisoned(packed.shape(), dtype);
      kernels(kCPU).merge_heads(merged, parts, layout, 0.5);
      kernels(kCuda).merge_heads(merged_d, parts_d, layout, 0.5);
      BOOST_TEST(merged_d.to(kCPU).to_vector() == merged.to_vector(), "hd " << hd);
    }
}

// Attention against the CPU's blocked online softmax: no mask, a causal (L, S) one and one per
// batch entry; the backward's gradients overwritten (both tables' start as NaN).
BOOST_AUTO_TEST_CASE(blocked_attention_and_its_backward_match_the_cpu_table) {
  const std::int64_t B = 3, L = 7, S = 9, D = 8, Dv = 5;
  const Tensor q = host_randn({B, L, D}), k = host_randn({B, S, D}), v = host_randn({B, S, Dv});
  const Tensor dout = host_randn({B, L, Dv});
  Tensor causal = zeros({L, S}, TensorOptions(DType::Float32, kCPU));
  for (std::int64_t i = 0; i < L; ++i)
    causal.narrow(0, i, 1).narrow(1, i + 3, S - i - 3 > 0 ? S - i - 3 : 0).fill_(-INFINITY);
  const Tensor per_batch =
      add(causal.expand({B, L, S}).contiguous(), mul(host_randn({B, L, S}), 0.1));
  for (const auto& [mask, stride] :
       {std::pair<Tensor, std::int64_t>{Tensor(), 0}, {causal, 0}, {per_batch, L * S}}) {
    AttentionDims dims{B, L, S, D, Dv};
    dims.q = {L * D, 0, D};
    dims.k = {S * D, 0, D};
    dims.v = {S * Dv, 0, Dv};
    dims.mask = {stride, 0, S};
    auto on_cuda = [](const Tensor& t) { return t.defined() ? t.to(kCuda) : Tensor(); };
    Tensor out = empty({B, L, Dv}, TensorOptions(DType::Float32, kCPU));
    Tensor lse = empty({B, L}, TensorOptions(DType::Float32, kCPU));
    kernels(kCPU).blocked_attention(out, lse, q, k, v, mask, dims);
    Tensor out_d = poisoned({B, L, Dv}, DType::Float32), lse_d = poisoned({B, L}, DType::Float32);
    kernels(kCuda).blocked_attention(out_d, lse_d, q.to(kCuda), k.to(kCuda), v.to(kCuda),
                                     on_cuda(mask), dims);
    check_close(out_d, out, kTolFp32);
    check_close(lse_d, lse, kTolFp32);
    Tensor dq = poisoned_host(q.shape(), DType::Float32),
           dk = poisoned_host(k.shape(), DType::Float32);
    Tensor dv = poisoned_host(v.shape(), DType::Float32);
    kernels(kCPU).blocked_attention_backward(dq, dk, dv, q, k, v, mask, out, lse, dout, dims);
    Tensor dq_d = poisoned(q.shape(), DType::Float32), dk_d = poisoned(k.shape(), DType::Float32);
    Tensor dv_d = poisoned(v.shape(), DType::Float32);
    kernels(kCuda).blocked_attention_backward(dq_d, dk_d, dv_d, q.to(kCuda), k.to(kCuda),
                                              v.to(kCuda), on_cuda(mask), out_d, lse_d,
                                              dout.to(kCuda), dims);
    check_close(dq_d, dq, 1e-4);  // sums in another order
    check_close(dk_d, dk, 1e-4);
    check_close(dv_d, dv, 1e-4);
  }
}

// Causal attention without a mask (scaled_dot_product_attention's is_causal, GPT's blocks):
// attention.cu's fused kernels, float32, bf16 and fp16 (16 bits at head dim 64: the flash tiles,
// 70 rows a partial second tile), several heads, against the CPU table on the same (rounded)
// inputs.
BOOST_AUTO_TEST_CASE(causal_attention_takes_the_fused_kernels_and_matches_the_cpu_table) {
  const std::int64_t B = 2, H = 3, L = 70;
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16})
    for (std::int64_t D : {64, 40}) {
      AttentionDims d{B, L, L, D, D};
      d.H = d.KV = H;
      d.scale = 1.0 / std::sqrt(double(D));
      d.causal = true;
      d.masked_rows_zero = true;
      d.q = d.k = d.v = AttentionStrides{H * L * D, L * D, D};
      const Tensor q = host_randn({B, H, L, D}, dtype), k = host_randn({B, H, L, D}, dtype);
      const Tensor v = host_randn({B, H, L, D}, dtype), dout = host_randn({B, H, L, D}, dtype);
      const double tol = tol_of(dtype);
      Tensor out = empty({B, H, L, D}, TensorOptions(dtype, kCPU));
      Tensor lse = empty({B, H, L}, TensorOptions(DType::Float32, kCPU));
      kernels(kCPU).blocked_attention(out, lse, q, k, v, Tensor(), d);
      Tensor out_d = poisoned({B, H, L, D}, dtype), lse_d = poisoned({B, H, L}, DType::Float32);
      kernels(kCuda).blocked_attention(out_d, lse_d, q.to(kCuda), k.to(kCuda), v.to(kCuda),
                                       Tensor(), d);
      check_close(out_d, out, tol);
      check_close(lse_d, lse, kTolFp32 * 10);
      Tensor dq = poisoned_host(q.shape(), dtype), dk = poisoned_host(k.shape(), dtype);
      Tensor dv = poisoned_host(v.shape(), dtype);
      kernels(kCPU).blocked_attention_backward(dq, dk, dv, q, k, v, Tensor(), out, lse, dout, d);
      Tensor dq_d = poisoned(q.shape(), dtype), dk_d = poisoned(k.shape(), dtype);
      Tensor dv_d = poisoned(v.shape(), dtype);
      kernels(kCuda).blocked_attention_backward(dq_d, dk_d, dv_d, q.to(kCuda), k.to(kCuda),
                                                v.to(kCuda), Tensor(), out.to(kCuda), lse.to(kCuda),
                                                dout.to(kCuda), d);
      check_close(dq_d, dq, std::max(tol, 1e-4));  // sums in another order
      check_close(dk_d, dk, std::max(tol, 1e-4));
      check_close(dv_d, dv, std::max(tol, 1e-4));
    }
}

// MultiheadAttention's fused causal path (packed_causal_attention): q, k, v are (N, H, L, hd)
// views of one (L, N, 3E) projection, out a view of an (L, N, E) buffer, dq, dk, dv views of one
// (L, N, 3E) gradient; with batch_first every one of them N-major (an (L, N, *) view of (N, L, *)
// memory). bf16 and fp16 at head dim 64 take the flash tiles in place; head dim 40, float32 and
// rows off 16 bytes (the projection one element into its buffer) the one-warp kernels on copies.
// Every case against the CPU table, the buffers compared whole.
BOOST_AUTO_TEST_CASE(causal_attention_on_packed_head_views_matches_the_cpu_table) {
  const std::int64_t L = 70, N = 2, H = 3;
  for (DType dtype : {DType::BFloat16, DType::Float16, DType::Float32})
    for (std::int64_t D : {64, 40})
      for (auto [offset, n_major] : {std::pair{0, false}, {1, false}, {0, true}}) {
        const std::int64_t E = H * D;
        // (L, N, C) rows `at` elements into a fresh buffer, in L-major or N-major order.
        auto rows = [&, n_major = n_major](std::int64_t C, Device device, std::int64_t at) {
          Tensor buf =
              full({L * N * C + at}, NAN, TensorOptions(DType::Float32, kCPU)).to(dtype).to(device);
          Tensor r = buf.narrow(0, at, L * N * C);
          return n_major ? r.view({N, L, C}).transpose(0, 1) : r.view({L, N, C});
        };
        // Part `part` of packed (L, N, parts * H * D) as (N, H, L, D) heads, through its strides.
        auto heads = [&](const Tensor& packed, std::int64_t part) {
          return make_view(packed, {N, H, L, D}, {packed.stride(1), D, packed.stride(0), 1},
                           packed.storage_offset() + part * H * D);
        };
        auto packed_on = [&, offset = offset](const Tensor& host, Device device) {
          Tensor p = rows(host.size(2), device, offset);
          p.copy_(host);
          return p;
        };
        const Tensor proj_h = host_randn({L, N, 3 * E}, dtype);
        const Tensor dout_h = host_randn({L, N, E}, dtype);
        const Tensor proj = packed_on(proj_h, kCPU), proj_d = packed_on(proj_h, kCuda);
        const Tensor dout = packed_on(dout_h, kCPU), dout_d = packed_on(dout_h, kCuda);
        AttentionDims d{N, L, L, D, D};
        d.H = d.KV = H;
        d.scale = 1.0 / std::sqrt(double(D));
        d.causal = true;
        d.masked_rows_zero = true;
        d.q = d.k = d.v = attention_strides(heads(proj, 0));
        const std::string what = std::string(dtype_name(dtype)) + " D " + std::to_string(D) +
                                 " offset " + std::to_string(offset) +
                                 (n_major ? " N-major" : " L-major");
        BOOST_TEST_CONTEXT(what) {
          const double tol = tol_of(dtype);
          Tensor out = rows(E, kCPU, 0);
          Tensor lse = empty({N, H, L}, TensorOptions(DType::Float32, kCPU));
          kernels(kCPU).blocked_attention(heads(out, 0), lse, heads(proj, 0), heads(proj, 1),
                                          heads(proj, 2), Tensor(), d);
          Tensor out_d = rows(E, kCuda, 0), lse_d = poisoned({N, H, L}, DType::Float32);
          kernels(kCuda).blocked_attention(heads(out_d, 0), lse_d, heads(proj_d, 0),
                                           heads(proj_d, 1), heads(proj_d, 2), Tensor(), d);
          check_close(out_d, out, tol);
          check_close(lse_d, lse, kTolFp32 * 10);
          Tensor grad = rows(3 * E, kCPU, 0);
          kernels(kCPU).blocked_attention_backward(heads(grad, 0), heads(grad, 1), heads(grad, 2),
                                                   heads(proj, 0), heads(proj, 1), heads(proj, 2),
                                                   Tensor(), heads(out, 0), lse, heads(dout, 0), d);
          Tensor grad_d = rows(3 * E, kCuda, 0);
          Tensor out_copy_d = rows(E, kCuda, 0);
          out_copy_d.copy_(out);
          kernels(kCuda).blocked_attention_backward(
              heads(grad_d, 0), heads(grad_d, 1), heads(grad_d, 2), heads(proj_d, 0),
              heads(proj_d, 1), heads(proj_d, 2), Tensor(), heads(out_copy_d, 0), lse.to(kCuda),
              heads(dout_d, 0), d);
          check_close(grad_d, grad, std::max(tol, 1e-4));  // sums in another order
        }
      }
}

// MultiheadAttention with batch_first in GPT's blocks (the is_causal hint) on cuda: the caller's
// (N, L) rows throughout, so the same values and gradients as the (L, N, E) layout on the same
// data and as many allocations (no transposition copies); bf16 at head dim 64 (the flash tiles
// on N-major views) and float32 (the general kernels).
BOOST_AUTO_TEST_CASE(batch_first_causal_attention_matches_the_sequence_first_layout) {
  const std::int64_t N = 2, L = 70, H = 2, E = 2 * 64;
  for (DType dtype : {DType::BFloat16, DType::Float32}) {
    BOOST_TEST_CONTEXT(dtype_name(dtype)) {
      const TensorOptions options(dtype, kCuda);
      auto batch_first = fsdp::testing::causal_attention_layer(E, H, true, options);
      auto seq_first = fsdp::testing::causal_attention_layer(E, H, false, options, batch_first);
      const Tensor x = host_randn({N, L, E}, dtype).to(kCuda);
      const Tensor grad = host_randn({N, L, E}, dtype).to(kCuda);
      const auto a = fsdp::testing::run_causal_attention(*batch_first, x, grad);
      const auto b = fsdp::testing::run_causal_attention(*seq_first, x, grad);
      BOOST_TEST(a.out_dense);
      BOOST_TEST((a.out.shape() == Shape{N, L, E}));
      check_close(a.out, b.out, tol_of(dtype));
      check_close(a.grad_x, b.grad_x, tol_of(dtype));
      for (std::size_t i = 0; i < a.grads.size(); ++i)
        check_close(a.grads[i], b.grads[i], std::max(tol_of(dtype), 1e-4));  // rows summed
      BOOST_TEST(a.allocations == b.allocations);  // no copy of the activations
    }
  }
}

// lse agrees within tol where finite, and is -inf exactly where the CPU's is (rows with no key).
void check_lse(const Tensor& got_device, const Tensor& ref, double tol) {
  const std::vector<double> got = got_device.to(kCPU).to_vector(), want = ref.to_vector();
  BOOST_REQUIRE_EQUAL(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::isinf(want[i]))
      BOOST_TEST(got[i] == want[i], "lse " << i << ": " << got[i] << " != " << want[i]);
    else
      BOOST_TEST(std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i])),
                 "lse " << i << ": " << got[i] << " != " << want[i]);
}

// scaled_dot_product_attention as the Hugging Face models call it: q, k, v projections (B, S,
// heads, D) read as (B, heads, S, D) through their strides, grouped-query heads (4 query heads
// on 2 kv heads), a scale, causal or not, generate's padding as a (B, 1, L, S) additive mask
// (batch 1's first two keys masked: with causal its first two rows see no key, output 0).
BOOST_AUTO_TEST_CASE(sdpa_forms_grouped_strided_scaled_causal_masked_match_the_cpu_table) {
  const std::int64_t B = 2, H = 4, KV = 2, L = 6, S = 6, D = 16;
  Tensor pad = zeros({B, 1, L, S}, TensorOptions(DType::Float32, kCPU));
  pad.narrow(0, 1, 1).narrow(3, 0, 2).fill_(-INFINITY);
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16})
    for (bool causal : {false, true})
      for (bool masked : {false, true}) {
        AttentionDims d{B, L, S, D, D};
        d.H = H;
        d.KV = KV;
        d.scale = 0.3;
        d.causal = causal;
        d.masked_rows_zero = true;
        d.q = {L * H * D, D, H * D};  // (B, L, H, D) storage
        d.k = d.v = {S * KV * D, D, KV * D};
        d.mask = {L * S, 0, S};
        const Tensor mask = masked ? pad : Tensor();
        const Tensor q = host_randn({B, L, H, D}, dtype), k = host_randn({B, S, KV, D}, dtype);
        const Tensor v = host_randn({B, S, KV, D}, dtype), dout = host_randn({B, H, L, D}, dtype);
        const double tol = tol_of(dtype);
        Tensor out = empty({B, H, L, D}, TensorOptions(dtype, kCPU));
        Tensor lse = empty({B, H, L}, TensorOptions(DType::Float32, kCPU));
        kernels(kCPU).blocked_attention(out, lse, q, k, v, mask, d);
        Tensor out_d = poisoned({B, H, L, D}, dtype), lse_d = poisoned({B, H, L}, DType::Float32);
        const Tensor q_d = q.to(kCuda), k_d = k.to(kCuda), v_d = v.to(kCuda);
        const Tensor mask_d = masked ? pad.to(kCuda) : Tensor();
        kernels(kCuda).blocked_attention(out_d, lse_d, q_d, k_d, v_d, mask_d, d);
        check_close(out_d, out, tol);
        check_lse(lse_d, lse, kTolFp32 * 10);
        Tensor dq = poisoned_host({B, H, L, D}, dtype);
        Tensor dk = poisoned_host({B, KV, S, D}, dtype), dv = poisoned_host({B, KV, S, D}, dtype);
        kernels(kCPU).blocked_attention_backward(dq, dk, dv, q, k, v, mask, out, lse, dout, d);
        Tensor dq_d = poisoned(dq.shape(), dtype), dk_d = poisoned(dk.shape(), dtype);
        Tensor dv_d = poisoned(dv.shape(), dtype);
        kernels(kCuda).blocked_attention_backward(dq_d, dk_d, dv_d, q_d, k_d, v_d, mask_d,
                                                  out.to(kCuda), lse.to(kCuda), dout.to(kCuda), d);
        check_close(dq_d, dq, std::max(tol, 1e-4));  // sums in another order
        check_close(dk_d, dk, std::max(tol, 1e-4));
        check_close(dv_d, dv, std::max(tol, 1e-4));
      }
  // What the kernels refuse stays one line naming the case: bf16 head dims beyond 128.
  AttentionDims d{1, 2, 2, 160, 160};
  d.q = d.k = d.v = {2 * 160, 0, 160};
  const Tensor q = host_randn({1, 2, 160}, DType::BFloat16).to(kCuda);
  Tensor out = empty_like(q), lse = empty({1, 2}, TensorOptions(DType::Float32, kCuda));
  expect_missing([&] { kernels(kCuda).blocked_attention(out, lse, q, q, q, Tensor(), d); },
                 "blocked_attention: no CUDA kernel yet for bfloat16 of shape [1, 2, 160] (device "
                 "cuda:0)");
}

// The Hugging Face models' causal, unmasked grouped-query attention at head dim 64 in 16 bits
// (TinyLlama's and Llama 3.2 1B's shape: query heads sharing kv heads, (B, S, heads, 64)
// projections): the flash tiles, kv heads' gradients summed over their groups, as the CPU table.
BOOST_AUTO_TEST_CASE(grouped_causal_attention_at_head_dim_64_matches_the_cpu_table) {
  const std::int64_t B = 2, H = 4, L = 70, D = 64;
  for (DType dtype : {DType::BFloat16, DType::Float16})
    for (std::int64_t KV : {2, 1}) {
      AttentionDims d{B, L, L, D, D};
      d.H = H;
      d.KV = KV;
      d.scale = 0.125;
      d.causal = true;
      d.masked_rows_zero = true;
      d.q = {L * H * D, D, H * D};  // (B, L, H, D) storage
      d.k = d.v = {L * KV * D, D, KV * D};
      // The (B, heads, L, D) views of (B, L, heads, D) storage scaled_dot_product_attention
      // passes, whose strides d.q, d.k and d.v repeat.
      const Tensor qs = host_randn({B, L, H, D}, dtype), ks = host_randn({B, L, KV, D}, dtype);
      const Tensor vs = host_randn({B, L, KV, D}, dtype), dout = host_randn({B, H, L, D}, dtype);
      const Tensor q = qs.transpose(1, 2), k = ks.transpose(1, 2), v = vs.transpose(1, 2);
      const double tol = tol_of(dtype);
      Tensor out = empty({B, H, L, D}, TensorOptions(dtype, kCPU));
      Tensor lse = empty({B, H, L}, TensorOptions(DType::Float32, kCPU));
      kernels(kCPU).blocked_attention(out, lse, q, k, v, Tensor(), d);
      Tensor out_d = poisoned({B, H, L, D}, dtype), lse_d = poisoned({B, H, L}, DType::Float32);
      const Tensor q_d = qs.to(kCuda).transpose(1, 2), k_d = ks.to(kCuda).transpose(1, 2),
                   v_d = vs.to(kCuda).transpose(1, 2);
      kernels(kCuda).blocked_attention(out_d, lse_d, q_d, k_d, v_d, Tensor(), d);
      BOOST_TEST_CONTEXT(dtype_name(dtype) << " H=" << H << " KV=" << KV) {
        check_close(out_d, out, tol);
        check_lse(lse_d, lse, kTolFp32 * 10);
        Tensor dq = poisoned_host({B, H, L, D}, dtype);
        Tensor dk = poisoned_host({B, KV, L, D}, dtype), dv = poisoned_host({B, KV, L, D}, dtype);
        kernels(kCPU).blocked_attention_backward(dq, dk, dv, q, k, v, Tensor(), out, lse, dout, d);
        Tensor dq_d = poisoned(dq.shape(), dtype), dk_d = poisoned(dk.shape(), dtype);
        Tensor dv_d = poisoned(dv.shape(), dtype);
        kernels(kCuda).blocked_attention_backward(dq_d, dk_d, dv_d, q_d, k_d, v_d, Tensor(),
                                                  out.to(kCuda), lse.to(kCuda), dout.to(kCuda), d);
        check_close(dq_d, dq, tol);
        check_close(dk_d, dk, tol);
        check_close(dv_d, dv, tol);
      }
    }
}

BOOST_AUTO_TEST_CASE(a_family_without_a_cuda_kernel_names_itself_and_the_device) {
  const Tensor x = host_randn({4, 6}).to(kCuda);
  const Tensor i = full({4}, 2, TensorOptions(DType::Int64, kCPU)).to(kCuda);
  Tensor j = empty_like(i);
  expect_missing([&] { kernels(kCuda).unary(UnaryKind::Neg, j, i, 0.0); },
                 "unary: no CUDA kernel yet for int64 of shape [4] (device cuda:0)");
  Tensor y = empty_like(x);
  const Tensor s = empty({4}, TensorOptions(DType::Float64, kCuda));
  expect_missing(
      [&] {
        kernels(kCuda).batch_norm_stats(s, s, x, NcsLayout{4, 6, 1});
      },
      "batch_norm_stats: no CUDA kernel yet (device cuda:0)");
}

BOOST_AUTO_TEST_CASE(kernels_run_on_the_current_stream) {
  // Queued on a side stream, then read through the default one after an event: the value is
  // the side stream's, so the kernel went where current_stream said.
  const Stream side = new_stream(kCuda);
  Tensor t = empty({1 << 20}, TensorOptions(DType::Float32, kCuda));
  Event done(kCuda);
  {
    StreamGuard guard(side);
    t.fill_(2.0);
    t.fill_(3.0);
    done.record();
  }
  done.block(current_stream(kCuda));
  BOOST_TEST(t.to(kCPU).to_vector() == std::vector<double>(1 << 20, 3.0));
  BOOST_TEST(done.query());
}
