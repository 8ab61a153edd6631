// The CPU loss kernels: mse_loss and its backward (moved from core/functional/mse_loss.cpp).
#include "core/kernel_utils.h"
#include "core/kernels/cpu/cpu_kernels.h"

namespace fsdp::cpu {

void mse_loss(const Tensor& out, const Tensor& x, const Tensor& t, bool none, bool mean) {
  const std::int64_t n = x.numel();
  dispatch_float(x.dtype(), "mse_loss", [&]<typename T>() {
    const T* xp = x.data<T>();
    const T* tp = t.data<T>();
    if (none) {
      T* yp = out.data<T>();
      for (std::int64_t i = 0; i < n; ++i) yp[i] = (xp[i] - tp[i]) * (xp[i] - tp[i]);
    } else {
      double s = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const T d = xp[i] - tp[i];
        s += static_cast<double>(d) * d;
      }
      store_double(out.data_ptr(), out.dtype(), 0, mean ? s / static_cast<double>(n) : s);
    }
  });
}

void mse_loss_backward(const Tensor& d, const Tensor& x, const Tensor& t, const Tensor& g,
                       double scale) {
  const std::int64_t n = x.numel();
  dispatch_float(x.dtype(), "mse_loss", [&]<typename T>() {
    const T* xp = x.data<T>();
    const T* tp = t.data<T>();
    T* dp = d.data<T>();
    const T* gp = g.data<T>();
    if (g.numel() == n) {
      const T k = static_cast<T>(scale);
      for (std::int64_t i = 0; i < n; ++i) dp[i] = k * (xp[i] - tp[i]) * gp[i];
    } else {
      const T k = static_cast<T>(static_cast<double>(gp[0]) * scale);
      for (std::int64_t i = 0; i < n; ++i) dp[i] = k * (xp[i] - tp[i]);
    }
  });
}

}  // namespace fsdp::cpu
