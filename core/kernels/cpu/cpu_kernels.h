// The CPU kernel table: the loops the ops ran inline before device dispatch, one file per family
// (elementwise, reduce, copy, random, linalg, attention, activations, softmax, layer_norm,
// rms_norm, rotary, batch_norm, classification_loss, losses, norms, optim).
#pragma once

#include "core/kernels/kernel_table.h"

namespace fsdp {

extern const KernelTable kCpuKernels;

namespace cpu {

void binary(BinaryKind kind, const Tensor& out, const Tensor& a, const Tensor& b, double alpha);
void unary(UnaryKind kind, const Tensor& out, const Tensor& a, double scalar);
void compare(CompareKind kind, const Tensor& out, const Tensor& a, const Tensor& b);
void eq_scalar(const Tensor& out, const Tensor& a, double b);
void logical_not(const Tensor& out, const Tensor& a);
void where(const Tensor& out, const Tensor& condition, const Tensor& a, const Tensor& b);
void masked_fill(const Tensor& out, const Tensor& a, const Tensor& mask, double value);

void sum(const Tensor& out, const Tensor& a, const std::vector<bool>& mask, bool mean,
         std::int64_t count);
void amax(const Tensor& out, const Tensor& a, const std::vector<bool>& mask);
void max_dim(const Tensor& values, const Tensor& indices, const Tensor& a, std::int64_t dim);
void max_dim_backward(const Tensor& grad, const Tensor& g, const Tensor& indices, std::int64_t dim);

void copy(const Tensor& dst, const Tensor& src);
void copy_broadcast(const Tensor& dst, const Tensor& src);
void fill(const Tensor& t, double value);
void store_values(const Tensor& t, const std::vector<double>& values);
void index_select(const Tensor& out, const Tensor& src, const Tensor& index,
                  const IndexBounds& bounds, std::int64_t outer, std::int64_t inner);
void index_add(const Tensor& grad, const Tensor& src, const Tensor& index,
               const IndexBounds& bounds, std::int64_t outer, std::int64_t inner);

void random(const RandomSpec& spec, const Tensor& t, Generator& g);

void bmm(const Tensor& out, const Tensor& a, const Tensor& b);
void linear(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias);
void linear_backward16(const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& g,
                       const Tensor& x, const Tensor& w, std::int64_t in_features);

void split_heads(const std::vector<Tensor>& heads, const Tensor& packed, const HeadsLayout& layout,
                 double first_divisor);
void merge_heads(const Tensor& packed, const std::vector<Tensor>& heads, const HeadsLayout& layout,
                 double first_divisor);
void blocked_attention(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                       const Tensor& v, const Tensor& mask, const AttentionDims& dims);
void blocked_attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& mask, const Tensor& out, const Tensor& lse,
                                const Tensor& dout, const AttentionDims& dims);

void activation(ActivationKind kind, const Tensor& y, const Tensor& x);
void activation_backward(ActivationKind kind, const Tensor& dx, const Tensor& saved,
                         const Tensor& g);

void masked_scale(const Tensor& y, const Tensor& x, const Tensor& mask, double scale);

void softmax(const Tensor& y, const Tensor& x, std::int64_t outer, std::int64_t n,
             std::int64_t inner, bool log);
void softmax_backward(const Tensor& dx, const Tensor& y, const Tensor& g, std::int64_t outer,
                      std::int64_t n, std::int64_t inner, bool log);
void masked_softmax(const Tensor& y, const Tensor& x, const Tensor& m, std::int64_t mask_stride);

void rms_norm(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& w, std::int64_t n,
              double eps);
void rms_norm_backward(const Tensor& dx, const Tensor& dw, const Tensor& x, const Tensor& w,
                       const Tensor& rstd, const Tensor& g, std::int64_t n);
void rotary(const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin,
            std::int64_t table_batch, bool transpose);

void layer_norm(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                const Tensor& w, const Tensor& b, std::int64_t n, double eps);
void layer_norm_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& x,
                         const Tensor& w, const Tensor& mean, const Tensor& rstd, const Tensor& g,
                         std::int64_t n);

void cross_entropy(const Tensor& losses, const Tensor& lse, const Tensor& x, const Tensor& targets,
                   const NcsLayout& layout, const IndexBounds& bounds, double label_smoothing);
void cross_entropy_backward(const Tensor& dx, const Tensor& x, const Tensor& lse,
                            const Tensor& targets, const Tensor& grads, const NcsLayout& layout,
                            const IndexBounds& bounds, double label_smoothing);
void nll_loss(const Tensor& losses, const Tensor& x, const Tensor& targets, const NcsLayout& layout,
              const IndexBounds& bounds);
void nll_loss_backward(const Tensor& dx, const Tensor& targets, const Tensor& grads,
                       const NcsLayout& layout, const IndexBounds& bounds);
void sum_in_order(const Tensor& out, const Tensor& count, const Tensor& values,
                  const Tensor& targets, std::int64_t ignore_index);

void batch_norm_stats(const Tensor& mean, const Tensor& var, const Tensor& x,
                      const NcsLayout& layout);
void running_update(const Tensor& running, const Tensor& value, double momentum);
void batch_norm(const Tensor& y, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                const Tensor& w, const Tensor& b, const NcsLayout& layout);
void batch_norm_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& x,
                         const Tensor& g, const Tensor& mean, const Tensor& invstd, const Tensor& w,
                         const NcsLayout& layout, bool training);

void mse_loss(const Tensor& out, const Tensor& x, const Tensor& t, bool none, bool mean);
void mse_loss_backward(const Tensor& d, const Tensor& x, const Tensor& t, const Tensor& g,
                       double scale);

void norm_partial(const Tensor& out, const Tensor& t, double p);
void clamp_(const Tensor& t, double lo, double hi);
void embedding_renorm_(const Tensor& weight, const std::vector<std::int64_t>& rows, double max_norm,
                       double norm_type);

void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                 const Tensor& exp_avg_sq, const Tensor& max_exp_avg_sq,
                 const optim::AdamScalars& scalars);
void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                const optim::SgdScalars& scalars);

}  // namespace cpu
}  // namespace fsdp
