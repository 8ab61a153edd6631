// The CUDA kernels of the GPT training path, on raw device pointers and a stream: the layer
// that issue 24's per-device kernel table will call (ops keep their checks, shapes and autograd;
// the table passes pointers). Storage is float, bfloat16 or float16 (the "16-bit" types: bf16 and
// fp16 below); arithmetic is float throughout and reductions accumulate in float. Every function
// enqueues on `stream` and checks the launch. Row-major everywhere: "rows x cols" means cols is
// contiguous.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/cuda/launch.h"
#include "core/kernels/index_bounds.h"
#include "core/kernels/kernel_kinds.h"

namespace fsdp::cuda {

using bf16 = __nv_bfloat16;
using fp16 = __half;

// --- elementwise (elementwise.cu); T is float, bf16 or fp16
template <typename T>
void fill(T* out, float value, std::int64_t n, cudaStream_t stream);
void cast(const float* in, bf16* out, std::int64_t n,
          cudaStream_t stream);  // round to nearest even
void cast(const bf16* in, float* out, std::int64_t n, cudaStream_t stream);
void cast(const float* in, fp16* out, std::int64_t n,
          cudaStream_t stream);  // round to nearest even
void cast(const fp16* in, float* out, std::int64_t n, cudaStream_t stream);

enum class BinaryOp { Add, Mul };
// out = a op b with broadcasting (geometry from broadcast_geometry); out has g.numel elements.
template <typename T>
void binary(BinaryOp op, const T* a, const T* b, T* out, const BroadcastGeometry& g,
            cudaStream_t stream);

// y = f(x) for every ActivationKind (core/kernels/kernel_kinds.h: relu, tanh, sigmoid, gelu with
// erf or tanh, silu), as the CPU table computes them in float.
template <typename T>
void activation_forward(ActivationKind kind, const T* x, T* y, std::int64_t n, cudaStream_t stream);
// dx = g * f'(saved); `saved` is the output for relu, tanh and sigmoid, the input otherwise.
template <typename T>
void activation_backward(ActivationKind kind, const T* saved, const T* g, T* dx, std::int64_t n,
                         cudaStream_t stream);

// --- strided element-wise (strided.cu): the kernel table's general layouts. A StridedLayout is
// the output's sizes and, per operand, strides in elements (0 where an operand is broadcast);
// element i of the output (row-major over the sizes) reads its operands at their strides. T is
// float, bf16, fp16 or double; arithmetic in float (double for double), as the CPU's.
struct StridedLayout {
  int ndim = 0;
  std::int64_t size[kMaxDims] = {};
  std::int64_t stride[4][kMaxDims] = {};  // [0] the output, then the operands in order
  std::int64_t numel = 1;
};
template <typename T>
void strided_unary(UnaryKind op, const T* a, T* out, const StridedLayout& l, double scalar,
                   cudaStream_t stream);
template <typename T>
void strided_binary(BinaryKind op, const T* a, const T* b, T* out, const StridedLayout& l,
                    double alpha, cudaStream_t stream);
// Comparisons into bool outputs: T float, bf16, fp16, double, int64 or int32 (16-bit types
// compared as float).
template <typename T>
void strided_compare(CompareKind op, const T* a, const T* b, bool* out, const StridedLayout& l,
                     cudaStream_t stream);
template <typename T>
void strided_eq_scalar(const T* a, double b, bool* out, const StridedLayout& l,
                       cudaStream_t stream);
template <typename T>
void strided_logical_not(const T* a, bool* out, const StridedLayout& l, cudaStream_t stream);
// Selections move bits: T is the unsigned integer of the element's size. where: strides of out,
// condition, a, b; masked_fill: of out, a, mask, `value` already in the element's bits.
template <typename T>
void strided_where(const bool* condition, const T* a, const T* b, T* out, const StridedLayout& l,
                   cudaStream_t stream);
template <typename T>
void strided_masked_fill(const T* a, const bool* mask, T value, T* out, const StridedLayout& l,
                         cudaStream_t stream);
// y = mask ? x * scale : 0 (dropout), strides of y, x, mask; T float or double, mask uint8.
template <typename T>
void strided_masked_scale(const T* x, const std::uint8_t* mask, T* y, double scale,
                          const StridedLayout& l, cudaStream_t stream);
// dst (stride[0]) = src (stride[1]) converted: D and S the same storage type (any element size:
// pass unsigned integers of it), or any pair of float, bf16, fp16, double, int64, int32, uint8
// and bool, with the CPU table's bits (strided.cu's `convert`: 16-bit types through float).
template <typename D, typename S>
void strided_copy(const S* src, D* dst, const StridedLayout& l, cudaStream_t stream);

// --- softmax along any dim (softmax_rows.cu): x, y (outer, n, inner) contiguous, one row per
// (outer, inner) pair; `mask` (inner 1 only, or null) is added first, row r reading mask row
// r % mask_rows (masked_softmax's shared or per-batch mask). T float, bf16, fp16 or double.
// `lse` (one per row, or null) receives each row's log-sum-exp (attention's saved statistic).
template <typename T>
void softmax_rows(const T* x, const T* mask, T* y, std::int64_t outer, std::int64_t n,
                  std::int64_t inner, std::int64_t mask_rows, bool log, cudaStream_t stream,
                  T* lse = nullptr);
// dx from the output y and the gradient g: y (g - sum(g y)), or g - exp(y) sum(g) for log.
template <typename T>
void softmax_rows_backward(const T* y, const T* g, T* dx, std::int64_t outer, std::int64_t n,
                           std::int64_t inner, bool log, cudaStream_t stream);

// --- device-side index checks (index_fault.cuh records, index_fault.h raises): the first bad
// index or target a kernel meets, in a per-device record of pinned host memory that kernels
// write through unified addressing and the runtime reads after a synchronisation. A kernel that
// meets a bad value records it and skips that element (no access out of bounds).
struct IndexFault {
  unsigned long long claimed;  // 0 until one thread claims the record (atomicCAS)
  int ready;                   // set last: bounds and value are written
  IndexBounds bounds;
  std::int64_t value;
};

// --- classification losses per position (class_loss.cu): x read as (n, c, s), position
// p = (i, j) with its c class scores s apart; targets int64 checked against `b` (class_target_
// bounds: a bad one is recorded in `fault` and its position skipped), ignore_index positions
// give 0. Losses and lse in double, as the table's. grads: the upstream gradient per position
// (grads_per_position) or one for every position.
// loss = (1 - eps) (lse - x_t) + eps (lse - mean_k x_k).
template <typename T>
void cross_entropy_positions(const T* x, const std::int64_t* target, double* losses, double* lse,
                             std::int64_t n, std::int64_t c, std::int64_t s, const IndexBounds& b,
                             IndexFault* fault, double eps, cudaStream_t stream);
// dx = g_p (softmax - eps / c - (1 - eps) onehot(t)) per position, zeros where ignored (every
// element written: no fill first).
template <typename T>
void cross_entropy_positions_backward(const T* x, const double* lse, const std::int64_t* target,
                                      const double* grads, bool grads_per_position, T* dx,
                                      std::int64_t n, std::int64_t c, std::int64_t s,
                                      const IndexBounds& b, IndexFault* fault, double eps,
                                      cudaStream_t stream);
// losses[p] = -x[t]; backward: dx[t] = -g_p (dx zero-filled).
template <typename T>
void nll_positions(const T* x, const std::int64_t* target, double* losses, std::int64_t n,
                   std::int64_t c, std::int64_t s, const IndexBounds& b, IndexFault* fault,
                   cudaStream_t stream);
template <typename T>
void nll_positions_backward(const std::int64_t* target, const double* grads,
                            bool grads_per_position, T* dx, std::int64_t n, std::int64_t c,
                            std::int64_t s, const IndexBounds& b, IndexFault* fault,
                            cudaStream_t stream);
// *out = (values[0] + values[1] + ...) added in index order (one thread: the CPU's result bit
// for bit); with targets (n of them) divided by the number not equal to ignore_index, that
// number also written to *count when count is not null.
void sum_in_order(const double* values, std::int64_t n, const std::int64_t* targets,
                  std::int64_t ignore_index, double* count, double* out, cudaStream_t stream);

// --- rows along one dim by index (index.cu): src (outer, b.size, inner) and out (outer, n,
// inner), contiguous; index I (int64 or int32) checked against `b` on the device (a bad one
// recorded in `fault`, its rows skipped; a negative one is bad, as torch's).
// out[o, i, :] = src[o, row(index[i]), :]; U is the unsigned integer of the element's size.
template <typename U, typename I>
void index_select_rows(const U* src, const I* index, U* out, std::int64_t outer, std::int64_t n,
                       std::int64_t inner, const IndexBounds& b, IndexFault* fault,
                       cudaStream_t stream);
// grad[o, row(index[i]), :] += src[o, i, :] with atomics (repeated indices add up; the order of
// the additions is the hardware's). T float, bf16, fp16 or double.
template <typename T, typename I>
void index_add_rows(const T* src, const I* index, T* grad, std::int64_t outer, std::int64_t n,
                    std::int64_t inner, const IndexBounds& b, IndexFault* fault,
                    cudaStream_t stream);

// --- reductions over any dims (reduce_dims.cu): the kernel table's sum/mean and amax. The kept
// dims index the outputs (row-major: a contiguous output's order), the reduced dims one output's
// elements; strides are the input's, in elements. One block per output, float accumulation
// (double for double); amax propagates NaN, as torch's.
struct ReduceLayout {
  int kept = 0, reduced = 0;
  std::int64_t kept_size[kMaxDims] = {}, kept_stride[kMaxDims] = {};
  std::int64_t reduced_size[kMaxDims] = {}, reduced_stride[kMaxDims] = {};
  std::int64_t outputs = 1, count = 1;
};
template <typename T>
void reduce_sum(const T* a, T* out, const ReduceLayout& l, double scale, cudaStream_t stream);
template <typename T>
void reduce_max(const T* a, T* out, const ReduceLayout& l, cudaStream_t stream);

// --- reductions (reduce.cu)
// out[c] = sum over rows of in[r, c] (the bias gradient of a linear layer), in float.
template <typename T>
void sum_over_rows(const T* in, float* out, std::int64_t rows, std::int64_t cols,
                   cudaStream_t stream);
// *out = sum of x[i]^2 in float (clip_grad_norm_); `out` is overwritten, not accumulated.
template <typename T>
void sum_of_squares(const T* x, float* out, std::int64_t n, cudaStream_t stream);

// --- layer norm over the last dim (layer_norm.cu): x (rows, cols), weight and bias (cols,
// optional) of P: float, or T when T is 16-bit. y = (x - mean) * rstd * weight + bias; mean
// and rstd (rows, float) are saved for backward.
template <typename T, typename P = float>
void layer_norm_forward(const T* x, const P* weight, const P* bias, T* y, float* mean, float* rstd,
                        std::int64_t rows, std::int64_t cols, float eps, cudaStream_t stream);
// The floats of device scratch layer_norm_backward needs for (rows, cols) (its partial sums).
std::int64_t layer_norm_backward_scratch(std::int64_t rows, std::int64_t cols);
// dx (rows, cols); dweight and dbias (cols, P, optional) are overwritten (zeros when rows is 0),
// the same bits on every run. `scratch` holds layer_norm_backward_scratch(rows, cols) floats.
template <typename T, typename P = float>
void layer_norm_backward(const T* dy, const T* x, const P* weight, const float* mean,
                         const float* rstd, T* dx, P* dweight, P* dbias, float* scratch,
                         std::int64_t rows, std::int64_t cols, cudaStream_t stream);

// --- causal softmax (softmax.cu): scores (batch, T, T); row i keeps keys j <= i, the rest 0.
// y = softmax(scale * x + causal mask); dx = scale * y * (dy - sum(dy * y)).
template <typename T>
void causal_softmax_forward(const T* x, T* y, std::int64_t batch, std::int64_t t, float scale,
                            cudaStream_t stream);
template <typename T>
void causal_softmax_backward(const T* y, const T* dy, T* dx, std::int64_t batch, std::int64_t t,
                             float scale, cudaStream_t stream);

// --- embedding (embedding.cu): out[i, :] = weight[index[i], :], weight (vocab, dim), index
// (n) int32. An index outside [0, vocab) gives a NaN row (the op layer checks on the host).
template <typename T>
void embedding_forward(const T* weight, std::int64_t vocab, const std::int32_t* index, T* out,
                       std::int64_t n, std::int64_t dim, cudaStream_t stream);
// dweight[index[i], :] += dout[i, :] in float (atomics: repeated tokens add up); dweight is
// accumulated into, not overwritten, as a gradient is.
template <typename T>
void embedding_backward(const T* dout, const std::int32_t* index, float* dweight,
                        std::int64_t vocab, std::int64_t n, std::int64_t dim, cudaStream_t stream);

// --- fused cross-entropy (cross_entropy.cu): logits (n, vocab), target (n) int32 with
// ignore_index rows contributing nothing. losses[i] (float) is row i's -log softmax[target];
// dlogits = dloss_scale * (softmax - onehot(target)), 0 on ignored rows (dloss_scale is 1/count
// for the mean). dlogits may alias logits (llm.c's fused classifier overwrites them).
template <typename T>
void cross_entropy_forward_backward(const T* logits, const std::int32_t* target, float* losses,
                                    T* dlogits, std::int64_t n, std::int64_t vocab,
                                    std::int32_t ignore_index, float dloss_scale,
                                    cudaStream_t stream);

// --- causal attention with the online softmax (attention.cu): q, k, v, o (batch, t, hd) with
// batch = B * heads and hd <= kMaxAttentionHeadDim (else fsdp::ValueError); o = softmax(scale *
// q k^T + causal mask) v without storing the scores; lse (batch, t) float is saved for backward.
// Backward: dq (T) overwritten, dk and dv (float: gathered with atomics) overwritten. One warp per
// row, slow but simple: bf16 and fp16 at head dims 64, 96 and 128 have the tiled tensor-core
// kernels (flash_attention.h: GPT-2's and the Llamas' cases), which the kernel table prefers.
constexpr int kMaxAttentionHeadDim = 128;
template <typename T>
void attention_forward(const T* q, const T* k, const T* v, T* o, float* lse, std::int64_t batch,
                       std::int64_t t, std::int64_t hd, float scale, cudaStream_t stream);
template <typename T>
void attention_backward(const T* q, const T* k, const T* v, const T* o, const T* dout,
                        const float* lse, T* dq, float* dk, float* dv, std::int64_t batch,
                        std::int64_t t, std::int64_t hd, float scale, cudaStream_t stream);

// --- max along a dim (max_dim.cu): a (outer, n, inner) contiguous, values and indices (outer,
// inner); NaN propagates (its first position), ties keep the first index. Backward: grad
// (outer, n, inner), zero-filled, gets g (outer, inner) at each index.
template <typename T>
void max_dim(const T* a, T* values, std::int64_t* indices, std::int64_t outer, std::int64_t n,
             std::int64_t inner, cudaStream_t stream);
template <typename T>
void max_dim_backward(T* grad, const T* g, const std::int64_t* indices, std::int64_t outer,
                      std::int64_t n, std::int64_t inner, cudaStream_t stream);

// --- scaled_dot_product_attention's general forms (sdpa_attention.cu): q (B, H, L, D), k
// (B, KV, S, D), v (B, KV, S, Dv) read through their strides (element (b, h, i, c) at b * batch +
// h * head + i * row + c), query head h using kv head h / (H / KV); scores = scale q k^T + mask
// (float, keys contiguous, its own strides; null: none), causal = query i sees keys j <= i.
// o (B, H, L, Dv) and lse (B, H, L) contiguous; a row with no key gives nan, or 0 with
// masked_rows_zero (torch's). D, Dv <= kMaxAttentionHeadDim (else fsdp::ValueError). Backward:
// dq (B, H, L, D) of the storage type, dk and dv (B, KV, S, D/Dv) float, all overwritten.
struct AttentionOperandStrides {
  std::int64_t batch = 0, head = 0, row = 0;
};
struct AttentionGeometry {
  std::int64_t B = 0, H = 1, KV = 1, L = 0, S = 0, D = 0, Dv = 0;
  float scale = 1.0f;
  bool causal = false, masked_rows_zero = false;
  AttentionOperandStrides q, k, v, mask;
};
template <typename T>
void sdpa_forward(const T* q, const T* k, const T* v, const float* mask, T* o, float* lse,
                  const AttentionGeometry& g, cudaStream_t stream);
template <typename T>
void sdpa_backward(const T* q, const T* k, const T* v, const float* mask, const T* o, const T* dout,
                   const float* lse, T* dq, float* dk, float* dv, const AttentionGeometry& g,
                   cudaStream_t stream);

// --- RMS norm over the last dim (rms_norm.cu): x (rows, cols), weight (cols, x's type,
// optional); y = weight * round(x * rstd), rstd = 1 / sqrt(mean(x^2) + eps) (rows, float) saved.
template <typename T>
void rms_norm_forward(const T* x, const T* weight, T* y, float* rstd, std::int64_t rows,
                      std::int64_t cols, float eps, cudaStream_t stream);
// dx (rows, cols); dweight (cols, float, optional) overwritten with sum_r dy * round(x * rstd).
template <typename T>
void rms_norm_backward(const T* dy, const T* x, const T* weight, const float* rstd, T* dx,
                       float* dweight, std::int64_t rows, std::int64_t cols, cudaStream_t stream);

// --- rotary embedding (rotary.cu): out (B, H, S, D) contiguous from x (strides x_batch, x_head,
// x_row; unit last stride) and the cos/sin tables (S, D) at b * table_batch (0: shared).
struct RotaryGeometry {
  std::int64_t B = 0, H = 0, S = 0, D = 0;
  std::int64_t x_batch = 0, x_head = 0, x_row = 0, table_batch = 0;
};
template <typename T>
void rotary(const T* x, const T* cos, const T* sin, T* out, const RotaryGeometry& g, bool transpose,
            cudaStream_t stream);

// --- optimizers over flat fp32 shards (optim.cu), torch's order of operations
// Hyper-parameters in double, as torch's and the CPU optimizer's.
struct AdamWArgs {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  std::int64_t step = 1;  // counts from 1 (bias correction)
};
void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::int64_t n,
                const AdamWArgs& args, cudaStream_t stream);
struct SgdArgs {
  float lr = 1e-3f, momentum = 0.0f, dampening = 0.0f, weight_decay = 0.0f;
  bool nesterov = false;
  bool first_step = false;  // the momentum buffer starts as this step's gradient
};
// momentum_buffer may be null when momentum is 0.
void sgd_step(float* param, const float* grad, float* momentum_buffer, std::int64_t n,
              const SgdArgs& args, cudaStream_t stream);

// --- the threads backend's reductions over ranks' buffers (collective_reduce.cu): comm's
// reduce semantics (comm/reduce_op.h) on device memory; the ranks' buffers passed by value.
constexpr int kMaxRankInputs = 64;
struct RankInputs {
  const void* ptr[kMaxRankInputs] = {};
};
enum class RankReduceOp { Sum, Avg, Max, Min };
enum class RankDType { Float32, Float64, Float16, BFloat16, Int64, Int32, UInt8, Bool };
// out[i] = op over in.ptr[0..n)[i], count elements; AVG divides by `divisor` (the group's size).
// out may be one of the inputs.
void reduce_ranks(RankReduceOp op, RankDType dtype, void* out, const RankInputs& in, int n,
                  std::int64_t count, int divisor, cudaStream_t stream);

}  // namespace fsdp::cuda
