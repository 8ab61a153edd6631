#include "fsdp/clip_grad_norm.h"

#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops.h"
#include "fsdp/runtime.h"

namespace fsdp {

double clip_grad_norm_(FullyShardedDataParallel& root, double max_norm, double norm_type) {
  FSDP_CHECK(root.runtime().root_state().units.front() == &root.runtime(), RuntimeError,
             "clip_grad_norm_ should only be called on the root FSDP instance");
  FSDP_CHECK(norm_type >= 1.0 || std::isinf(norm_type), ValueError,
             "clip_grad_norm_: norm_type must be >= 1 or inf, got {}", norm_type);
  const bool inf = std::isinf(norm_type);
  autograd::NoGradGuard no_grad;
  double sharded = 0, replicated = 0;  // sum of |g|^p (or max |g|)
  std::vector<Tensor> grads;
  for (auto* unit : root.fsdp_units()) {
    auto* h = unit->handle();
    if (h == nullptr || !h->flat_param().grad().defined()) continue;
    const Tensor g = h->flat_param().grad();
    grads.push_back(g);
    double local = 0;
    for (double v : g.to_vector()) {
      const double a = std::fabs(v);
      local = inf ? std::max(local, a) : local + std::pow(a, norm_type);
    }
    double& acc = h->sharded() ? sharded : replicated;
    acc = inf ? std::max(acc, local) : acc + local;
  }
  auto& group = *root.process_group();
  if (group.size() > 1) {
    double v = sharded;
    group.all_reduce(&v, 1, DType::Float64, inf ? comm::ReduceOp::Max : comm::ReduceOp::Sum);
    sharded = v;
  }
  const double total =
      inf ? std::max(sharded, replicated) : std::pow(sharded + replicated, 1.0 / norm_type);
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1.0)
    for (auto& g : grads) mul_(g, coef);
  return total;
}

}  // namespace fsdp
