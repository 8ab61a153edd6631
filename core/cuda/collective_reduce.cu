// The threads backend's reductions on CUDA buffers (ranks as threads sharing a GPU): out[i] = op
// over the ranks' buffers at i, with comm/reduce_op.h's meaning, the CPU path's
// (comm/reduce_kernels.cpp): float32/float64 accumulate in their own type in rank order,
// float16/bfloat16 in float rounded once, integers wrap (unsigned sums, compared in their own
// signedness), bool or/and, MAX/MIN propagate NaN, AVG divides the sum by the ranks. One thread
// per element reads every rank's value in rank order, so results are the CPU's bit for bit.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "core/cuda/cuda_check.h"
#include "core/cuda/kernels.h"

namespace fsdp::cuda {
namespace {

template <typename T, typename A>
struct Plain {
  using Stored = T;
  using Acc = A;
  using Compared = A;
  static __device__ A load(T v) { return A(v); }
  static __device__ T store(A v) { return T(v); }
};
struct Half {
  using Stored = __half;
  using Acc = float;
  using Compared = float;
  static __device__ float load(__half v) { return __half2float(v); }
  static __device__ __half store(float v) { return __float2half_rn(v); }
};
struct BFloat {
  using Stored = __nv_bfloat16;
  using Acc = float;
  using Compared = float;
  static __device__ float load(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __nv_bfloat16 store(float v) { return __float2bfloat16_rn(v); }
};
template <typename T>
struct Integer {
  using Stored = T;
  using Acc = std::make_unsigned_t<T>;
  using Compared = T;
  static __device__ Acc load(T v) { return Acc(v); }
  static __device__ T store(Acc v) { return T(v); }
};

template <typename C>
__device__ bool is_nan(C v) {
  if constexpr (std::is_floating_point_v<C>) return v != v;
  return false;
}

template <typename Conv>
__global__ void reduce_ranks_kernel(RankInputs in, int n, typename Conv::Stored* out,
                                    std::int64_t count, RankReduceOp op, int divisor) {
  using T = typename Conv::Stored;
  using A = typename Conv::Acc;
  using C = typename Conv::Compared;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < count;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    A acc = Conv::load(static_cast<const T*>(in.ptr[0])[i]);
    for (int k = 1; k < n; ++k) {
      const A v = Conv::load(static_cast<const T*>(in.ptr[k])[i]);
      const C a = C(acc), b = C(v);
      switch (op) {
        case RankReduceOp::Sum:
        case RankReduceOp::Avg:
          acc = A(acc + v);
          break;
        case RankReduceOp::Max:  // NaN propagates: the first NaN met stays
          acc = is_nan(a) ? acc : (is_nan(b) || a < b) ? v : acc;
          break;
        case RankReduceOp::Min:
          acc = is_nan(a) ? acc : (is_nan(b) || b < a) ? v : acc;
          break;
      }
    }
    if (op == RankReduceOp::Avg) {
      // Integers: the wrapped sum in the storage type's signedness, truncated toward zero.
      if constexpr (std::is_floating_point_v<A>)
        acc = acc / A(divisor);
      else
        acc = A(T(T(acc) / T(divisor)));
    }
    out[i] = Conv::store(acc);
  }
}

__global__ void reduce_ranks_bool_kernel(RankInputs in, int n, std::uint8_t* out,
                                         std::int64_t count, bool all) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < count;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    bool acc = static_cast<const std::uint8_t*>(in.ptr[0])[i] != 0;
    for (int k = 1; k < n; ++k) {
      const bool v = static_cast<const std::uint8_t*>(in.ptr[k])[i] != 0;
      acc = all ? (acc && v) : (acc || v);
    }
    out[i] = acc;
  }
}

template <typename Conv>
void launch_typed(const RankInputs& in, int n, void* out, std::int64_t count, RankReduceOp op,
                  int divisor, cudaStream_t stream) {
  reduce_ranks_kernel<Conv><<<grid_for(count), kThreads, 0, stream>>>(
      in, n, static_cast<typename Conv::Stored*>(out), count, op, divisor);
  FSDP_CUDA_CHECK_LAUNCH();
}

}  // namespace

void reduce_ranks(RankReduceOp op, RankDType dtype, void* out, const RankInputs& in, int n,
                  std::int64_t count, int divisor, cudaStream_t stream) {
  if (count == 0 || n <= 0) return;
  switch (dtype) {
    case RankDType::Float32:
      return launch_typed<Plain<float, float>>(in, n, out, count, op, divisor, stream);
    case RankDType::Float64:
      return launch_typed<Plain<double, double>>(in, n, out, count, op, divisor, stream);
    case RankDType::Float16:
      return launch_typed<Half>(in, n, out, count, op, divisor, stream);
    case RankDType::BFloat16:
      return launch_typed<BFloat>(in, n, out, count, op, divisor, stream);
    case RankDType::Int64:
      return launch_typed<Integer<std::int64_t>>(in, n, out, count, op, divisor, stream);
    case RankDType::Int32:
      return launch_typed<Integer<std::int32_t>>(in, n, out, count, op, divisor, stream);
    case RankDType::UInt8:
      return launch_typed<Integer<std::uint8_t>>(in, n, out, count, op, divisor, stream);
    case RankDType::Bool:  // sum and max: or; min: and (avg is refused before it gets here)
      reduce_ranks_bool_kernel<<<grid_for(count), kThreads, 0, stream>>>(
          in, n, static_cast<std::uint8_t*>(out), count, op == RankReduceOp::Min);
      FSDP_CUDA_CHECK_LAUNCH();
      return;
  }
}

}  // namespace fsdp::cuda
