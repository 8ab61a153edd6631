#include "comm/reduce_kernels.h"

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/error.h"

namespace fsdp::comm {

namespace {

// Storage type T, accumulation type Acc, and how to move between them.
template <typename T, typename A>
struct Plain {
  using Stored = T;
  using Acc = A;
  static Acc load(T v) { return Acc(v); }
  static T store(Acc v) { return T(v); }
};
struct Half {
  using Stored = std::uint16_t;
  using Acc = float;
  static float load(std::uint16_t v) { return half_to_float(v); }
  static std::uint16_t store(float v) { return float_to_half(v); }
};
struct BFloat {
  using Stored = std::uint16_t;
  using Acc = float;
  static float load(std::uint16_t v) { return bf16_to_float(v); }
  static std::uint16_t store(float v) { return float_to_bf16(v); }
};
// Integers: accumulate in the unsigned type of the same width (wrap-around, no UB).
template <typename T>
struct Integer {
  using Stored = T;
  using Acc = std::make_unsigned_t<T>;
  static Acc load(T v) { return Acc(v); }
  static T store(Acc v) { return T(v); }
};
struct Boolean {
  using Stored = std::uint8_t;
  using Acc = std::uint8_t;
  static std::uint8_t load(std::uint8_t v) { return v != 0; }
  static std::uint8_t store(std::uint8_t v) { return v; }
};

template <typename A>
inline A max_of(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) ? a : b;
  }
  return a < b ? b : a;
}
template <typename A>
inline A min_of(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) ? a : b;
  }
  return b < a ? b : a;
}

constexpr std::size_t kBlock = 512;

template <typename Conv, typename Combine, typename Finish>
void reduce_blocks(void* out_raw, const void* const* inputs, int n, std::size_t count,
                   Combine combine, Finish finish) {
  using T = typename Conv::Stored;
  using A = typename Conv::Acc;
  auto* out = static_cast<T*>(out_raw);
  A acc[kBlock];
  for (std::size_t begin = 0; begin < count; begin += kBlock) {
    const std::size_t len = std::min(kBlock, count - begin);
    const T* first = static_cast<const T*>(inputs[0]) + begin;
    for (std::size_t i = 0; i < len; ++i) acc[i] = Conv::load(first[i]);
    for (int k = 1; k < n; ++k) {
      const T* in = static_cast<const T*>(inputs[k]) + begin;
      for (std::size_t i = 0; i < len; ++i) acc[i] = combine(acc[i], Conv::load(in[i]));
    }
    for (std::size_t i = 0; i < len; ++i) out[begin + i] = Conv::store(finish(acc[i]));
  }
}

template <typename Conv>
void reduce_typed(ReduceOp op, void* out, const void* const* inputs, int n, std::size_t count,
                  int ranks) {
  using A = typename Conv::Acc;
  // Integers accumulate unsigned (wrap-around) but compare in their own signedness.
  using Compared = std::conditional_t<std::is_floating_point_v<A>, A, typename Conv::Stored>;
  auto same = [](A v) { return v; };
  auto sum = [](A a, A b) { return A(a + b); };
  auto max = [](A a, A b) { return A(max_of(Compared(a), Compared(b))); };
  auto min = [](A a, A b) { return A(min_of(Compared(a), Compared(b))); };
  switch (op) {
    case ReduceOp::Sum:
      reduce_blocks<Conv>(out, inputs, n, count, sum, same);
      return;
    case ReduceOp::Max:
      reduce_blocks<Conv>(out, inputs, n, count, max, same);
      return;
    case ReduceOp::Min:
      reduce_blocks<Conv>(out, inputs, n, count, min, same);
      return;
    case ReduceOp::Avg:
      if constexpr (std::is_floating_point_v<A>) {
        const A divisor = A(ranks);
        reduce_blocks<Conv>(out, inputs, n, count, sum, [divisor](A v) { return v / divisor; });
      } else {
        // Wrapped sum reinterpreted in the signed/unsigned storage type, truncated toward zero.
        using T = typename Conv::Stored;
        const T divisor = T(ranks);
        reduce_blocks<Conv>(out, inputs, n, count, sum,
                            [divisor](A v) { return A(T(v) / divisor); });
      }
      return;
  }
}

void reduce_bool(ReduceOp op, void* out, const void* const* inputs, int n, std::size_t count) {
  using A = std::uint8_t;
  auto same = [](A v) { return v; };
  if (op == ReduceOp::Min) {
    reduce_blocks<Boolean>(
        out, inputs, n, count, [](A a, A b) { return A(a & b); }, same);
  } else if (op == ReduceOp::Sum || op == ReduceOp::Max) {
    reduce_blocks<Boolean>(
        out, inputs, n, count, [](A a, A b) { return A(a | b); }, same);
  } else {
    throw ValueError("reduce op avg is not defined for bool");
  }
}

}  // namespace

void reduce_buffers(ReduceOp op, DType dtype, void* out, const void* const* inputs, int n,
                    std::size_t count, int ranks) {
  if (count == 0 || n <= 0) return;
  switch (dtype) {
    case DType::Float32:
      return reduce_typed<Plain<float, float>>(op, out, inputs, n, count, ranks);
    case DType::Float64:
      return reduce_typed<Plain<double, double>>(op, out, inputs, n, count, ranks);
    case DType::Float16:
      return reduce_typed<Half>(op, out, inputs, n, count, ranks);
    case DType::BFloat16:
      return reduce_typed<BFloat>(op, out, inputs, n, count, ranks);
    case DType::Int64:
      return reduce_typed<Integer<std::int64_t>>(op, out, inputs, n, count, ranks);
    case DType::Int32:
      return reduce_typed<Integer<std::int32_t>>(op, out, inputs, n, count, ranks);
    case DType::UInt8:
      return reduce_typed<Integer<std::uint8_t>>(op, out, inputs, n, count, ranks);
    case DType::Bool:
      return reduce_bool(op, out, inputs, n, count);
  }
}

}  // namespace fsdp::comm
