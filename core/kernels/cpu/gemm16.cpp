#include "core/kernels/cpu/gemm16.h"

#include <algorithm>
#include <vector>

#include "core/dtype_convert.h"
#include "core/kernels/cpu/blas_gemm.h"

namespace fsdp::ops_detail {

namespace {

// Floats per converted block (1 MiB: a block of each operand fits this CPU's 2 MiB L2 per core;
// the weights of a d_model 256 GPT are one block, converted once per product).
constexpr std::int64_t kBlockFloats = std::int64_t(256) << 10;

void to_float(DType dt, float* dst, const std::uint16_t* src, std::int64_t n) {
  convert_contiguous(dst, DType::Float32, src, dt, n);
}

float one_to_float(DType dt, std::uint16_t v) {
  return dt == DType::BFloat16 ? bf16_to_float(v) : half_to_float(v);
}

// How a converted block is laid out for sgemm.
struct Layout {
  bool trans;
  std::int64_t ld;
};

// Rows [r0, r0 + rows) of a matrix with `cols` columns and strides (s0, s1), converted to float32
// into buf: row-major when its rows are contiguous, else column-major when its columns are (the
// layout says which), else element by element.
Layout convert_rows(DType dt, const std::uint16_t* x, std::int64_t s0, std::int64_t s1,
                    std::int64_t r0, std::int64_t rows, std::int64_t cols, float* buf) {
  const std::uint16_t* base = x + r0 * s0;
  if (s1 == 1 || cols == 1) {
    for (std::int64_t r = 0; r < rows; ++r) to_float(dt, buf + r * cols, base + r * s0, cols);
    return {false, cols};
  }
  if (s0 == 1 || rows == 1) {
    for (std::int64_t c = 0; c < cols; ++c) to_float(dt, buf + c * rows, base + c * s1, rows);
    return {true, rows};
  }
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      buf[r * cols + c] = one_to_float(dt, base[r * s0 + c * s1]);
  return {false, cols};
}

// Rows (or columns) per block for operands with k elements per row: about kBlockFloats floats.
std::int64_t block_rows(std::int64_t k, std::int64_t total) {
  const std::int64_t rows = std::max<std::int64_t>(16, kBlockFloats / std::max<std::int64_t>(k, 1));
  return std::min(total, rows);
}

struct Scratch {
  std::vector<float> a, b, c, bias;
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

}  // namespace

void gemm_16bit(DType dt, std::int64_t m, std::int64_t n, std::int64_t k, const std::uint16_t* a,
                std::int64_t as0, std::int64_t as1, const std::uint16_t* b, std::int64_t bs0,
                std::int64_t bs1, const std::uint16_t* bias, std::uint16_t* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  // Rows of a per block also bound the float32 product block (mb x nb) to kBlockFloats / 2, so
  // the product is rounded to 16 bits while it is still in cache.
  const std::int64_t nb = block_rows(k, n);
  const std::int64_t mb =
      std::min(block_rows(k, m), std::max<std::int64_t>(16, kBlockFloats / 2 / nb));
  Scratch& s = scratch();
  s.a.resize(std::size_t(mb * std::max<std::int64_t>(k, 1)));
  s.b.resize(std::size_t(nb * std::max<std::int64_t>(k, 1)));
  s.c.resize(std::size_t(mb * nb));
  if (bias) {
    s.bias.resize(std::size_t(n));
    to_float(dt, s.bias.data(), bias, n);
  }
  for (std::int64_t j0 = 0; j0 < n; j0 += nb) {
    const std::int64_t cols = std::min(nb, n - j0);
    // Columns [j0, j0 + cols) of b are rows of its transpose (strides swapped).
    Layout lb{false, cols};
    if (k > 0) lb = convert_rows(dt, b, bs1, bs0, j0, cols, k, s.b.data());
    for (std::int64_t i0 = 0; i0 < m; i0 += mb) {
      const std::int64_t rows = std::min(mb, m - i0);
      float* cb = s.c.data();
      for (std::int64_t r = 0; r < rows; ++r)
        if (bias)
          std::copy_n(s.bias.data() + j0, cols, cb + r * cols);
        else if (k == 0)
          std::fill_n(cb + r * cols, cols, 0.f);
      if (k > 0) {
        const Layout la = convert_rows(dt, a, as0, as1, i0, rows, k, s.a.data());
        // The converted columns of b form b's block transposed unless they were converted
        // column-major.
        blas_gemm<float>(la.trans, !lb.trans, rows, cols, k, s.a.data(), la.ld, s.b.data(), lb.ld,
                         bias ? 1.f : 0.f, cb, cols);
      }
      for (std::int64_t r = 0; r < rows; ++r)
        convert_contiguous(c + (i0 + r) * ldc + j0, dt, cb + r * cols, DType::Float32, cols);
    }
  }
}

void linear_backward_16bit(DType dt, std::int64_t rows, std::int64_t in, std::int64_t out,
                           const std::uint16_t* g, const std::uint16_t* x, const std::uint16_t* w,
                           std::int64_t ws0, std::int64_t ws1, std::uint16_t* gx, std::uint16_t* gw,
                           std::uint16_t* gb) {
  if (rows == 0 || in == 0 || out == 0) {
    // Empty products give zeros (16-bit zero is all bits clear); the bias's gradient is still
    // the column sums of g, which has elements when only `in` is 0.
    if (gx) std::fill_n(gx, rows * in, std::uint16_t(0));
    if (gw) std::fill_n(gw, in * out, std::uint16_t(0));
    if (gb) {
      std::vector<float> sums(std::size_t(out), 0.f);
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t j = 0; j < out; ++j)
          sums[std::size_t(j)] += one_to_float(dt, g[r * out + j]);
      convert_contiguous(gb, dt, sums.data(), DType::Float32, out);
    }
    return;
  }
  Scratch& s = scratch();
  thread_local std::vector<float> wf, gwf, gbf, gxf;
  // The weight as converted: row-major out x in, or column-major when its strides say so (a
  // transposed or expanded weight), which the product then reads transposed.
  Layout lw{false, in};
  if (gx) {
    wf.resize(std::size_t(out * in));
    lw = convert_rows(dt, w, ws0, ws1, 0, out, in, wf.data());
  }
  if (gw) gwf.assign(std::size_t(out * in), 0.f);
  if (gb) gbf.assign(std::size_t(out), 0.f);
  // Rows per block: the converted g and x blocks and the gx block within kBlockFloats.
  const std::int64_t per_row = out + 2 * in;
  const std::int64_t rb = std::min(rows, std::max<std::int64_t>(16, kBlockFloats / per_row));
  s.a.resize(std::size_t(rb * out));
  s.b.resize(std::size_t(rb * in));
  gxf.resize(std::size_t(rb * in));
  for (std::int64_t r0 = 0; r0 < rows; r0 += rb) {
    const std::int64_t n = std::min(rb, rows - r0);
    to_float(dt, s.a.data(), g + r0 * out, n * out);
    if (gx) {
      blas_gemm<float>(false, lw.trans, n, in, out, s.a.data(), out, wf.data(), lw.ld, 0.f,
                       gxf.data(), in);
      convert_contiguous(gx + r0 * in, dt, gxf.data(), DType::Float32, n * in);
    }
    if (gw) {
      to_float(dt, s.b.data(), x + r0 * in, n * in);
      blas_gemm<float>(true, false, out, in, n, s.a.data(), out, s.b.data(), in, 1.f, gwf.data(),
                       in);
    }
    if (gb)
      for (std::int64_t r = 0; r < n; ++r) {
        const float* gr = s.a.data() + r * out;
        for (std::int64_t j = 0; j < out; ++j) gbf[std::size_t(j)] += gr[j];
      }
  }
  if (gw) convert_contiguous(gw, dt, gwf.data(), DType::Float32, out * in);
  if (gb) convert_contiguous(gb, dt, gbf.data(), DType::Float32, out);
}

}  // namespace fsdp::ops_detail
