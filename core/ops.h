// Differentiable tensor ops. Shapes broadcast as in PyTorch. float32 and float64 compute
// natively; float16/bfloat16 inputs compute in float32 and return their own dtype. Ops on meta
// tensors compute only the result's shape and dtype. Every op checks its inputs and throws an
// error naming the op, the shapes/dtypes involved and what was expected.
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "core/random.h"
#include "core/scalar.h"
#include "core/tensor.h"

namespace fsdp {

// --- elementwise, broadcasting
// Scalars (core/scalar.h) keep their kind, as libtorch's: int32 * 2 is int32, int32 * 2.0 is
// float32 (torch's wrapped-number promotion, scalar_result_type). alpha: a floating alpha with
// integral tensors is refused, as torch.
Tensor add(const Tensor& a, const Tensor& b, Scalar alpha = 1);  // a + alpha * b
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha = 1);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, Scalar b);
Tensor sub(const Tensor& a, Scalar b);  // refuses a bool tensor, as sub(Tensor, Tensor)
Tensor mul(const Tensor& a, Scalar b);
Tensor div(const Tensor& a, Scalar b);  // true division: integral tensors give float32
// Integral tensors to a negative integral power are refused, as torch.
Tensor pow(const Tensor& a, Scalar exponent);
Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor rsqrt(const Tensor& a);
Tensor abs(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor sigmoid(const Tensor& a);
Tensor relu(const Tensor& a);
Tensor gelu(const Tensor& a, const std::string& approximate = "none");  // "none" | "tanh"
Tensor silu(const Tensor& a);  // x * sigmoid(x) (SiLU, swish)
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
// mask: bool/uint8; the result keeps a's dtype (value converted to it, as torch).
Tensor masked_fill(const Tensor& a, const Tensor& mask, Scalar value);
// Comparisons (not differentiable) return bool tensors.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
// With a scalar: compared in scalar_result_type(a's dtype, b) (int32 == 2.5 is false).
Tensor eq(const Tensor& a, Scalar b);
Tensor ne(const Tensor& a, Scalar b);
Tensor lt(const Tensor& a, Scalar b);
Tensor le(const Tensor& a, Scalar b);
Tensor gt(const Tensor& a, Scalar b);
Tensor ge(const Tensor& a, Scalar b);
Tensor logical_not(const Tensor& a);

// --- reductions (dims may be negative; empty dims = all)
Tensor sum(const Tensor& a, const std::vector<std::int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& a, const std::vector<std::int64_t>& dims = {}, bool keepdim = false);
Tensor max(const Tensor& a);  // all elements
std::pair<Tensor, Tensor> max(const Tensor& a, std::int64_t dim,
                              bool keepdim = false);  // values, indices
Tensor amax(const Tensor& a, const std::vector<std::int64_t>& dims, bool keepdim = false);
Tensor argmax(const Tensor& a, std::int64_t dim, bool keepdim = false);
// Sums `a` down to `shape` (the reverse of broadcasting); used by broadcasting backwards.
Tensor sum_to(const Tensor& a, const Shape& shape);

// --- linear algebra (OpenBLAS)
Tensor mm(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);
Tensor matmul(const Tensor& a, const Tensor& b);  // torch.matmul semantics incl. broadcasting
Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor());

// --- shape and indexing
Tensor view(const Tensor& a, const Shape& shape);  // -1 allowed once
Tensor reshape(const Tensor& a, const Shape& shape);
Tensor transpose(const Tensor& a, std::int64_t d0, std::int64_t d1);
Tensor permute(const Tensor& a, const Shape& dims);
Tensor unsqueeze(const Tensor& a, std::int64_t dim);
Tensor squeeze(const Tensor& a, std::int64_t dim);
Tensor expand(const Tensor& a, const Shape& shape);  // -1 keeps a size
Tensor flatten(const Tensor& a, std::int64_t start_dim = 0, std::int64_t end_dim = -1);
Tensor narrow(const Tensor& a, std::int64_t dim, std::int64_t start, std::int64_t length);
Tensor select(const Tensor& a, std::int64_t dim, std::int64_t index);
Tensor contiguous(const Tensor& a);
Tensor clone(const Tensor& a);
Tensor to_dtype(const Tensor& a, DType dtype);  // differentiable between float dtypes
Tensor to_device(const Tensor& a, Device device);
Tensor cat(const std::vector<Tensor>& tensors, std::int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, std::int64_t dim = 0);
std::vector<Tensor> split(const Tensor& a, std::int64_t split_size, std::int64_t dim = 0);
std::vector<Tensor> split_with_sizes(const Tensor& a, const std::vector<std::int64_t>& sizes,
                                     std::int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& a, std::int64_t chunks, std::int64_t dim = 0);
Tensor index_select(const Tensor& a, std::int64_t dim, const Tensor& index);  // index: int64/int32

// --- neural-network functions (torch.nn.functional)
Tensor softmax(const Tensor& a, std::int64_t dim);
Tensor log_softmax(const Tensor& a, std::int64_t dim);
Tensor layer_norm(const Tensor& input, const Shape& normalized_shape,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  double eps = 1e-5);
// Updates running stats in place when training (momentum as torch; nullopt = cumulative average,
// which needs num_batches_tracked).
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps);
// LlamaRMSNorm over the last dim: x * rsqrt(mean(x^2) + eps) computed in float32 (float64
// natively), rounded to x's dtype, then times weight (optional), in their promoted dtype.
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps);
// Rotary position embedding as Hugging Face applies it: x (B, H, S, D), cos and sin (S, D) or
// (B, S, D) of x's dtype (cat(freqs, freqs), rotary_cos_sin); out = x cos + rotate_half(x) sin
// with rotate_half(x) = cat(-x[D/2:], x[:D/2]). Differentiable in x only.
Tensor apply_rotary(const Tensor& x, const Tensor& cos, const Tensor& sin);
// Llama's default inverse frequencies 1 / theta^(2i / dim), i < dim / 2, float32 as transformers
// computes them (powf, then a float32 divide).
Tensor rotary_inv_freq(std::int64_t dim, double theta, Device device = Device());
// cos and sin tables (S, 2 * inv_freq.size(0)) of positions [p0, p0 + S): cat(freqs, freqs) with
// freqs = float(pos) * inv_freq in float32, then cast to `dtype`; on inv_freq's device.
std::pair<Tensor, Tensor> rotary_cos_sin(const Tensor& inv_freq, std::int64_t p0, std::int64_t S,
                                         DType dtype);
// torch.nn.functional.scaled_dot_product_attention: q (B, H, L, D), k (B, KV, S, D), v (B, KV,
// S, Dv) -> (B, H, L, Dv); attn_mask bool (true = attend) or additive float, broadcastable to
// (B, H, L, S); is_causal: query i sees keys j <= i; scale defaults to 1/sqrt(D); enable_gqa:
// H % KV == 0, query head n uses kv head n / (H / KV). Blocked online softmax (no (L, S) matrix);
// differentiable in q, k and v (not the mask); a row with every key masked gives 0, as torch's.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask = {}, bool is_causal = false,
                                    std::optional<double> scale = {}, bool enable_gqa = false);
// torch.nn.functional.embedding: rows of weight (num_embeddings, embedding_dim) by indices in
// [0, num_embeddings) (others refused, naming the index and its position); padding_idx (nullopt:
// none; negative counts from the end, as libtorch's EmbeddingFuncOptions): that row gets no
// gradient.
Tensor embedding(const Tensor& weight, const Tensor& indices,
                 std::optional<std::int64_t> padding_idx = std::nullopt);
// padding_idx as a row in [0, num_embeddings) (-1: the last), or AssertionError with torch's
// message when outside [-num_embeddings, num_embeddings); nullopt stays nullopt.
std::optional<std::int64_t> embedding_padding_row(std::optional<std::int64_t> padding_idx,
                                                  std::int64_t num_embeddings);
Tensor dropout(const Tensor& a, double p, bool training, Generator* generator = nullptr);
// reduction: "mean" | "sum" | "none". input (N, C) or (N, C, d1...) or (C); target class indices.
Tensor cross_entropy(const Tensor& input, const Tensor& target, std::int64_t ignore_index = -100,
                     const std::string& reduction = "mean", double label_smoothing = 0.0);
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, std::int64_t ignore_index = -100,
                const std::string& reduction = "mean");
Tensor mse_loss(const Tensor& input, const Tensor& target, const std::string& reduction = "mean");

// --- random (default generator of this thread unless one is given); not differentiable
Tensor rand(const Shape& shape, TensorOptions options = {}, Generator* generator = nullptr);
Tensor randn(const Shape& shape, TensorOptions options = {}, Generator* generator = nullptr);
Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape,
               TensorOptions options = DType::Int64, Generator* generator = nullptr);
Tensor& uniform_(Tensor& t, double low, double high, Generator* generator = nullptr);
Tensor& normal_(Tensor& t, double mean, double std, Generator* generator = nullptr);

// --- in-place updates (optimizers, FSDP); not recorded by autograd; require no-grad or leaves
// A result type `a` cannot hold (int32 tensor, float operand) is refused, as torch.
Tensor& add_(Tensor& a, const Tensor& b, Scalar alpha = 1);
Tensor& mul_(Tensor& a, Scalar b);

// --- operators
inline Tensor operator+(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
inline Tensor operator-(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}
inline Tensor operator*(const Tensor& a, const Tensor& b) {
  return mul(a, b);
}
inline Tensor operator/(const Tensor& a, const Tensor& b) {
  return div(a, b);
}
inline Tensor operator+(const Tensor& a, Scalar b) {
  return add(a, b);
}
inline Tensor operator-(const Tensor& a, Scalar b) {
  return sub(a, b);
}
inline Tensor operator*(const Tensor& a, Scalar b) {
  return mul(a, b);
}
inline Tensor operator/(const Tensor& a, Scalar b) {
  return div(a, b);
}
inline Tensor operator+(Scalar a, const Tensor& b) {
  return add(b, a);
}
inline Tensor operator*(Scalar a, const Tensor& b) {
  return mul(b, a);
}
inline Tensor operator-(const Tensor& a) {
  return neg(a);
}

// Are a and b close elementwise (|a-b| <= atol + rtol*|b|)? Shapes must match.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);

// Broadcast shape of two shapes, or throws naming `op` and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace fsdp
