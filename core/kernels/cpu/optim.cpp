// The CPU optimizer updates: the flat loops of core/optim/update_kernels.h over one parameter
// (moved from core/optim/adam.cpp and sgd.cpp).
#include "core/kernel_utils.h"
#include "core/kernels/cpu/cpu_kernels.h"

namespace fsdp::cpu {

void adam_update(const Tensor& p, const Tensor& grad, const Tensor& m, const Tensor& v,
                 const Tensor& vmax, const optim::AdamScalars& k) {
  dispatch_float(p.dtype(), "adam_update", [&]<typename T>() {
    optim::adam_update_flat<T>(p.data<T>(), grad.data<T>(), m.data<T>(), v.data<T>(),
                               vmax.defined() ? vmax.data<T>() : nullptr, p.numel(), k);
  });
}

void sgd_update(const Tensor& p, const Tensor& grad, const Tensor& buf,
                const optim::SgdScalars& k) {
  dispatch_float(p.dtype(), "sgd_update", [&]<typename T>() {
    optim::sgd_update_flat<T>(p.data<T>(), grad.data<T>(), buf.defined() ? buf.data<T>() : nullptr,
                              p.numel(), k);
  });
}

}  // namespace fsdp::cpu
