#include "tests/gpu/emulation/cublaslt/matmul_host.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace fsdp::emu::cublaslt {
namespace {

bool has_bias(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS;
}
bool has_gelu(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS;
}
// BGRADB: the bias pointer receives op(B)'s sums over k, one per column of D (the header's
// "bias gradient ... reduction over the GEMM's k dimension"); D is the product as usual.
bool has_bias_grad_b(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_BGRADB;
}

// Element (i, j) of a matrix in `l`'s order, in elements from its batch entry's start.
std::int64_t offset(const Layout& l, std::int64_t i, std::int64_t j) {
  return l.order == CUBLASLT_ORDER_ROW ? i * l.ld + j : i + j * l.ld;
}

std::int64_t span_elements(const Layout& l) {
  const std::int64_t rows = std::int64_t(l.rows), cols = std::int64_t(l.cols);
  const std::int64_t one = offset(l, rows - 1, cols - 1) + 1;
  return std::int64_t(l.batch_count - 1) * l.batch_stride + one;
}

float load(int type, const void* base, std::int64_t index) {
  if (type == CUDA_R_32F) return static_cast<const float*>(base)[index];
  if (type == CUDA_R_16BF) return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[index]);
  return __half2float(static_cast<const __half*>(base)[index]);
}

void store(int type, void* base, std::int64_t index, float v) {
  if (type == CUDA_R_32F)
    static_cast<float*>(base)[index] = v;
  else if (type == CUDA_R_16BF)
    static_cast<__nv_bfloat16*>(base)[index] = __float2bfloat16_rn(v);
  else
    static_cast<__half*>(base)[index] = __float2half_rn(v);
}

std::string shape(const Layout& l) {
  return fmt::format("{}x{}", l.rows, l.cols);
}

Status check_ld(const char* call, char name, const Layout& l) {
  const bool row = l.order == CUBLASLT_ORDER_ROW;
  const std::uint64_t need = row ? l.cols : l.rows;
  if (l.ld < 0 || std::uint64_t(l.ld) < need)
    return invalid(fmt::format("{}: {}'s leading dim {} is smaller than its {} {} ({})", call, name,
                               l.ld, need, row ? "columns" : "rows",
                               row ? "CUBLASLT_ORDER_ROW" : "CUBLASLT_ORDER_COL"));
  if (l.batch_stride < 0)
    return not_supported(fmt::format("{}: {}'s negative batch stride {} is not emulated", call,
                                     name, l.batch_stride));
  return {};
}

// Whether two of D's batch entries share an element (a race on a device): exact, by marking
// every element when the entries' ranges are not simply apart.
bool batches_overlap(const Layout& d) {
  const std::int64_t one = offset(d, std::int64_t(d.rows) - 1, std::int64_t(d.cols) - 1) + 1;
  if (d.batch_count == 1 || d.batch_stride >= one) return false;
  if (d.batch_stride == 0) return true;
  std::vector<bool> used(std::size_t(span_elements(d)), false);
  for (std::int64_t e = 0; e < d.batch_count; ++e)
    for (std::int64_t j = 0; j < std::int64_t(d.cols); ++j)
      for (std::int64_t i = 0; i < std::int64_t(d.rows); ++i) {
        const std::size_t at = std::size_t(e * d.batch_stride + offset(d, i, j));
        if (used[at]) return true;
        used[at] = true;
      }
  return false;
}

Status check_types(const char* call, const MatmulDesc& desc, const Layout& a, const Layout& b,
                   const Layout& c, const Layout& d) {
  for (const Layout* l : {&a, &b, &c, &d})
    if (!storage_type(l->type)) return check_layout_type(l->type);
  const bool supported =
      a.type == b.type && c.type == d.type &&
      (desc.compute == CUBLAS_COMPUTE_32F_FAST_TF32 ? a.type == CUDA_R_32F && d.type == CUDA_R_32F
                                                    : d.type == a.type || d.type == CUDA_R_32F);
  if (!supported)
    return not_supported(fmt::format(
        "{}: A {}, B {}, C {}, D {} with compute type {} is not emulated (A = B, C = D; fp32; "
        "bf16 or fp16 into their own type or fp32; TF32 on fp32)",
        call, type_name(a.type), type_name(b.type), type_name(c.type), type_name(d.type),
        int(desc.compute)));
  if ((has_bias(desc.epilogue) || has_bias_grad_b(desc.epilogue)) && desc.bias_type != -1 &&
      desc.bias_type != d.type)
    return not_supported(
        fmt::format("{}: a {} bias with D of type {} is not emulated (the bias "
                    "has D's type)",
                    call, type_name(desc.bias_type), type_name(d.type)));
  return {};
}

}  // namespace

Status check_matmul(const char* call, const MatmulDesc& desc, const Layout& a, const Layout& b,
                    const Layout& c, const Layout& d, bool c_is_d) {
  if (Status s = check_types(call, desc, a, b, c, d); !s.ok()) return s;
  const bool ta = desc.trans_a == CUBLAS_OP_T, tb = desc.trans_b == CUBLAS_OP_T;
  const std::uint64_t m = d.rows, n = d.cols, k = ta ? a.rows : a.cols;
  if ((ta ? a.cols : a.rows) != m || (tb ? b.cols : b.rows) != k || (tb ? b.rows : b.cols) != n ||
      c.rows != m || c.cols != n)
    return invalid(fmt::format(
        "{}: shapes in conflict: A {} ({}), B {} ({}), C {}, D {} (op(A) must be rows(D) x k, "
        "op(B) k x cols(D), C as D)",
        call, shape(a), ta ? "CUBLAS_OP_T" : "CUBLAS_OP_N", shape(b),
        tb ? "CUBLAS_OP_T" : "CUBLAS_OP_N", shape(c), shape(d)));
  if (m == 0 || n == 0 || k == 0)
    return not_supported(
        fmt::format("{}: an empty product (m={} n={} k={}) is not emulated", call, m, n, k));
  if (!c_is_d && c.ld == 0)
    return not_supported(
        fmt::format("{}: C broadcast by a zero leading dim is not emulated", call));
  const std::pair<char, const Layout*> operands[] = {{'A', &a}, {'B', &b}, {'C', &c}, {'D', &d}};
  for (auto [name, l] : operands)
    if (Status s = check_ld(call, name, *l); !s.ok()) return s;
  if (c.order != d.order) return invalid(fmt::format("{}: C and D must have the same order", call));
  if (c_is_d && (c.ld != d.ld || c.batch_stride != d.batch_stride))
    return invalid(fmt::format(
        "{}: in place (C == D) needs C's layout to be D's: ld {} and {}, batch stride {} and {}",
        call, c.ld, d.ld, c.batch_stride, d.batch_stride));
  if (a.batch_count != d.batch_count || b.batch_count != d.batch_count ||
      c.batch_count != d.batch_count)
    return not_supported(fmt::format("{}: batch counts A {} B {} C {} D {} differ: not emulated",
                                     call, a.batch_count, b.batch_count, c.batch_count,
                                     d.batch_count));
  if (batches_overlap(d))
    return invalid(fmt::format(
        "{}: D's {} batch entries overlap (batch stride {}, leading dim {}, {}): they would race",
        call, d.batch_count, d.batch_stride, d.ld, shape(d)));
  if (has_bias(desc.epilogue) && desc.bias_batch_stride < 0)
    return not_supported(fmt::format("{}: a negative bias batch stride is not emulated", call));
  if (has_bias_grad_b(desc.epilogue) && d.batch_count != 1)
    return not_supported(fmt::format("{}: BGRADB over {} batch entries is not emulated (one is)",
                                     call, d.batch_count));
  if (has_bias_grad_b(desc.epilogue) && desc.bias == nullptr)
    return invalid(fmt::format("{}: BGRADB without CUBLASLT_MATMUL_DESC_BIAS_POINTER", call));
  return {};
}

std::size_t span_bytes(const Layout& layout) {
  return std::size_t(span_elements(layout)) * type_size(layout.type);
}

float round_to_tf32(float x) {
  if (!std::isfinite(x)) return x;
  std::uint32_t bits;
  std::memcpy(&bits, &x, 4);
  // Round the 13 dropped bits to nearest, ties to the even kept bit; a carry into the exponent
  // is right (up to infinity).
  const std::uint32_t lsb = (bits >> 13) & 1u;
  bits = (bits + 0x0fffu + lsb) & ~0x1fffu;
  std::memcpy(&x, &bits, 4);
  return x;
}

float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f, kCubic = 0.044715f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + kCubic * x * x * x)));
}

void run_matmul(const MatmulProblem& p) {
  const MatmulDesc& desc = p.desc;
  const bool ta = desc.trans_a == CUBLAS_OP_T, tb = desc.trans_b == CUBLAS_OP_T;
  const bool tf32 = desc.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  const std::int64_t m = std::int64_t(p.d.rows), n = std::int64_t(p.d.cols);
  const std::int64_t k = std::int64_t(ta ? p.a.rows : p.a.cols);
  const int bias_type = desc.bias_type == -1 ? p.d.type : desc.bias_type;
  std::vector<float> a(m * k), b(k * n), acc(n);  // op(A) row-major, op(B) row-major
  for (std::int32_t e = 0; e < p.d.batch_count; ++e) {
    const auto* a_base = static_cast<const char*>(p.a_ptr) +
                         e * p.a.batch_stride * std::int64_t(type_size(p.a.type));
    const auto* b_base = static_cast<const char*>(p.b_ptr) +
                         e * p.b.batch_stride * std::int64_t(type_size(p.b.type));
    const auto* c_base = static_cast<const char*>(p.c_ptr) +
                         e * p.c.batch_stride * std::int64_t(type_size(p.c.type));
    auto* d_base =
        static_cast<char*>(p.d_ptr) + e * p.d.batch_stride * std::int64_t(type_size(p.d.type));
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t q = 0; q < k; ++q) {
        const float v = load(p.a.type, a_base, ta ? offset(p.a, q, i) : offset(p.a, i, q));
        a[i * k + q] = tf32 ? round_to_tf32(v) : v;
      }
    for (std::int64_t q = 0; q < k; ++q)
      for (std::int64_t j = 0; j < n; ++j) {
        const float v = load(p.b.type, b_base, tb ? offset(p.b, j, q) : offset(p.b, q, j));
        b[q * n + j] = tf32 ? round_to_tf32(v) : v;
      }
    if (has_bias_grad_b(desc.epilogue)) {  // op(B)'s column sums in float, in k's order
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (std::int64_t q = 0; q < k; ++q)
        for (std::int64_t j = 0; j < n; ++j) acc[j] += b[q * n + j];
      for (std::int64_t j = 0; j < n; ++j)
        store(bias_type, const_cast<void*>(desc.bias), j, acc[j]);
    }
    for (std::int64_t i = 0; i < m; ++i) {
      // Each output sums its k products in order, in float; the loop over j vectorises.
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (std::int64_t q = 0; q < k; ++q) {
        const float x = a[i * k + q];
        const float* row = &b[q * n];
        for (std::int64_t j = 0; j < n; ++j) acc[j] += x * row[j];
      }
      const float bias = has_bias(desc.epilogue)
                             ? load(bias_type, desc.bias, e * desc.bias_batch_stride + i)
                             : 0.0f;
      for (std::int64_t j = 0; j < n; ++j) {
        float v = p.alpha * acc[j];
        if (p.beta != 0.0f) v += p.beta * load(p.c.type, c_base, offset(p.c, i, j));
        if (has_bias(desc.epilogue)) v += bias;
        if (has_gelu(desc.epilogue)) v = gelu_tanh(v);
        store(p.d.type, d_base, offset(p.d, i, j), v);
      }
    }
  }
}

}  // namespace fsdp::emu::cublaslt
