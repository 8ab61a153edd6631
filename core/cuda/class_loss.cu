// Classification losses per position (cross-entropy with label smoothing, nll) over an (n, c, s)
// input, their backward, and the in-order sum of the per-position losses. Cross-entropy takes
// one block per position: one read of its c scores for the max, the sum of exps (online) and
// the sum of scores, each thread's in float (double for double scores, as the CPU table), folded
// over the block by a shared-memory tree in double; one read and one write for the gradient,
// which covers every element (zeros for ignored positions: no fill first). 16-bit scores are
// read as they are (train_gpt's bf16 logits: no float copy). Where s == 1 (train_gpt's (tokens,
// vocab) logits) a row is contiguous and moves in 16-byte packs (vec_access.cuh) between a
// scalar head and tail. nll takes one thread per position. Targets are checked on the device
// (index_fault.cuh): a bad one is recorded and its position skipped.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/cuda/cuda_check.h"
#include "core/cuda/index_fault.cuh"
#include "core/cuda/kernel_math.cuh"
#include "core/cuda/kernels.h"
#include "core/cuda/vec_access.cuh"

namespace fsdp::cuda {
namespace {

#define FSDP_GRID_STRIDE(i, n)                                                        \
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < (n); \
       i += std::int64_t(gridDim.x) * blockDim.x)

constexpr int kClassThreads = 256;

template <typename T>
__device__ __forceinline__ double value(const T* p) {
  if constexpr (std::is_same_v<T, double>)
    return *p;
  else
    return static_cast<double>(to_float(*p));
}
template <typename T>
__device__ __forceinline__ void store_value(T* p, double v) {
  if constexpr (std::is_same_v<T, double>)
    *p = v;
  else
    *p = from_float<T>(static_cast<float>(v));
}

template <bool kMax>
__device__ double block_all(double v, double* scratch) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      const double o = scratch[threadIdx.x + half];
      scratch[threadIdx.x] = kMax ? fmax(scratch[threadIdx.x], o) : scratch[threadIdx.x] + o;
    }
    __syncthreads();
  }
  const double r = scratch[0];
  __syncthreads();
  return r;
}

template <typename T>
__global__ void cross_entropy_kernel(const T* x, const std::int64_t* target, double* losses,
                                     double* lse_out, std::int64_t positions, std::int64_t c,
                                     std::int64_t s, IndexBounds b, IndexFault* fault, double eps) {
  using A = acc_t<T>;  // float for float and 16-bit scores (as the CPU's), double for double
  __shared__ double scratch[kClassThreads];
  for (std::int64_t p = blockIdx.x; p < positions; p += gridDim.x) {
    const std::int64_t i = p / s, j = p % s;
    const T* row = x + i * c * s + j;
    // One read of the row: each thread's sum of exps is rescaled when its max grows (online), so
    // the max, the sum of exps and the sum of scores come from the same pass.
    A mx = -INFINITY, e = 0, sum_x = 0;
    const auto add = [&](std::int64_t, A v) {
      sum_x += v;
      if (v > mx) {
        e = e * exp(mx - v) + A(1);
        mx = v;
      } else if (v != A(-INFINITY)) {  // -inf adds nothing (and no -inf - -inf); NaN propagates
        e += exp(v - mx);
      }
    };
    if (s == 1)
      for_each_in_row(row, c, threadIdx.x, blockDim.x, add);
    else
      for (std::int64_t k = threadIdx.x; k < c; k += blockDim.x) add(k, load(row + k * s));
    // The threads' partials fold in double.
    double shift = block_all<true>(mx, scratch);
    if (isinf(shift) && shift < 0) shift = 0;
    double ed = e;
    if (mx != A(-INFINITY)) ed *= exp(double(mx) - shift);  // no finite score: 0 (or NaN)
    ed = block_all<false>(ed, scratch);
    const double sum_all = block_all<false>(double(sum_x), scratch);
    if (threadIdx.x == 0) {
      const double lse = log(ed) + shift;
      lse_out[p] = lse;
      const std::int64_t t = target[p];
      double loss = 0;
      if (!b.valid(t))
        record_index_fault(fault, b, t);
      else if (t != b.ignore) {
        loss = (1.0 - eps) * (lse - value(row + t * s));
        if (eps > 0) loss += eps * (lse - sum_all / static_cast<double>(c));
      }
      losses[p] = loss;
    }
  }
}

// Every element of dx is written: an ignored (or faulty) position's row gets zeros, so the
// caller allocates dx without a fill.
template <typename T>
__global__ void cross_entropy_backward_kernel(const T* x, const double* lse,
                                              const std::int64_t* target, const double* grads,
                                              std::int64_t grads_stride, T* dx,
                                              std::int64_t positions, std::int64_t c,
                                              std::int64_t s, IndexBounds b, IndexFault* fault,
                                              double eps) {
  using A = acc_t<T>;
  for (std::int64_t p = blockIdx.x; p < positions; p += gridDim.x) {
    const std::int64_t t = target[p];
    const bool valid = b.valid(t);
    if (!valid && threadIdx.x == 0) record_index_fault(fault, b, t);
    // Ignored and faulty positions scale their row by zero: the same pass writes their zeros.
    const bool live = valid && t != b.ignore;
    const std::int64_t i = p / s, j = p % s;
    const A g = live ? A(grads[p * grads_stride]) : A(0);
    const A lp = A(lse[p]), smooth = A(eps / static_cast<double>(c)), hit = g * A(1.0 - eps);
    const auto grad = [&](std::int64_t k, A v) {
      if (!live) return A(0);
      A d = g * (exp(v - lp) - smooth);
      if (k == t) d -= hit;
      return d;
    };
    if (s == 1) {
      map_row(x + i * c, dx + i * c, c, threadIdx.x, blockDim.x, grad);
    } else {
      for (std::int64_t k = threadIdx.x; k < c; k += blockDim.x) {
        const std::int64_t e = i * c * s + j + k * s;
        store(dx + e, grad(k, load(x + e)));
      }
    }
  }
}

template <typename T>
__global__ void nll_kernel(const T* x, const std::int64_t* target, double* losses,
                           std::int64_t positions, std::int64_t c, std::int64_t s, IndexBounds b,
                           IndexFault* fault) {
  FSDP_GRID_STRIDE(p, positions) {
    const std::int64_t t = target[p], i = p / s, j = p % s;
    if (!b.valid(t)) record_index_fault(fault, b, t);
    losses[p] = !b.valid(t) || t == b.ignore ? 0.0 : -value(x + (i * c + t) * s + j);
  }
}

template <typename T>
__global__ void nll_backward_kernel(const std::int64_t* target, const double* grads,
                                    std::int64_t grads_stride, T* dx, std::int64_t positions,
                                    std::int64_t c, std::int64_t s, IndexBounds b,
                                    IndexFault* fault) {
  FSDP_GRID_STRIDE(p, positions) {
    const std::int64_t t = target[p], i = p / s, j = p % s;
    if (!b.valid(t))
      record_index_fault(fault, b, t);
    else if (t != b.ignore)
      store_value(dx + (i * c + t) * s + j, -grads[p * grads_stride]);
  }
}

__global__ void sum_in_order_kernel(const double* v, std::int64_t n, const std::int64_t* targets,
                                    std::int64_t ignore_index, double* count, double* out) {
  double total = 0;
  for (std::int64_t i = 0; i < n; ++i) total += v[i];
  double divisor = 1.0;
  if (targets != nullptr) {
    divisor = 0.0;
    for (std::int64_t i = 0; i < n; ++i) divisor += targets[i] != ignore_index ? 1.0 : 0.0;
    if (count != nullptr) *count = divisor;
  }
  *out = total / divisor;
}

unsigned blocks_for(std::int64_t positions) {
  return static_cast<unsigned>(positions < kMaxBlocks ? positions : kMaxBlocks);
}

}  // namespace

template <typename T>
void cross_entropy_positions(const T* x, const std::int64_t* target, double* losses, double* lse,
                             std::int64_t n, std::int64_t c, std::int64_t s, const IndexBounds& b,
                             IndexFault* fault, double eps, cudaStream_t stream) {
  const std::int64_t positions = n * s;
  if (positions == 0) return;
  cross_entropy_kernel<T><<<blocks_for(positions), kClassThreads, 0, stream>>>(
      x, target, losses, lse, positions, c, s, b, fault, eps);
  FSDP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void cross_entropy_positions_backward(const T* x, const double* lse, const std::int64_t* target,
                                      const double* grads, bool grads_per_position, T* dx,
                                      std::int64_t n, std::int64_t c, std::int64_t s,
                                      const IndexBounds& b, IndexFault* fault, double eps,
                                      cudaStream_t stream) {
  const std::int64_t positions = n * s;
  if (positions == 0) return;
  cross_entropy_backward_kernel<T><<<blocks_for(positions), kClassThreads, 0, stream>>>(
      x, lse, target, grads, grads_per_position ? 1 : 0, dx, positions, c, s, b, fault, eps);
  FSDP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void nll_positions(const T* x, const std::int64_t* target, double* losses, std::int64_t n,
                   std::int64_t c, std::int64_t s, const IndexBounds& b, IndexFault* fault,
                   cudaStream_t stream) {
  const std::int64_t positions = n * s;
  if (positions == 0) return;
  nll_kernel<T>
      <<<grid_for(positions), kThreads, 0, stream>>>(x, target, losses, positions, c, s, b, fault);
  FSDP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void nll_positions_backward(const std::int64_t* target, const double* grads,
                            bool grads_per_position, T* dx, std::int64_t n, std::int64_t c,
                            std::int64_t s, const IndexBounds& b, IndexFault* fault,
                            cudaStream_t stream) {
  const std::int64_t positions = n * s;
  if (positions == 0) return;
  nll_backward_kernel<T><<<grid_for(positions), kThreads, 0, stream>>>(
      target, grads, grads_per_position ? 1 : 0, dx, positions, c, s, b, fault);
  FSDP_CUDA_CHECK_LAUNCH();
}

void sum_in_order(const double* values, std::int64_t n, const std::int64_t* targets,
                  std::int64_t ignore_index, double* count, double* out, cudaStream_t stream) {
  sum_in_order_kernel<<<1, 1, 0, stream>>>(values, n, targets, ignore_index, count, out);
  FSDP_CUDA_CHECK_LAUNCH();
}

#define FSDP_CLASS_LOSS(T)                                                                         \
  template void cross_entropy_positions<T>(const T*, const std::int64_t*, double*, double*,        \
                                           std::int64_t, std::int64_t, std::int64_t,               \
                                           const IndexBounds&, IndexFault*, double, cudaStream_t); \
  template void cross_entropy_positions_backward<T>(                                               \
      const T*, const double*, const std::int64_t*, const double*, bool, T*, std::int64_t,         \
      std::int64_t, std::int64_t, const IndexBounds&, IndexFault*, double, cudaStream_t);          \
  template void nll_positions<T>(const T*, const std::int64_t*, double*, std::int64_t,             \
                                 std::int64_t, std::int64_t, const IndexBounds&, IndexFault*,      \
                                 cudaStream_t);                                                    \
  template void nll_positions_backward<T>(const std::int64_t*, const double*, bool, T*,            \
                                          std::int64_t, std::int64_t, std::int64_t,                \
                                          const IndexBounds&, IndexFault*, cudaStream_t);
FSDP_CLASS_LOSS(float)
FSDP_CLASS_LOSS(bf16)
FSDP_CLASS_LOSS(fp16)
FSDP_CLASS_LOSS(double)
#undef FSDP_CLASS_LOSS

}  // namespace fsdp::cuda
