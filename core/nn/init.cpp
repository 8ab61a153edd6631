#include "core/nn/init.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/autograd.h"
#include "core/kernels/kernel_table.h"
#include "core/module.h"
#include "core/warnings.h"

namespace fsdp::nn::init {

namespace {

// Fills `t` with values drawn by `draw` (called once per element, in row-major order). The
// generators are the host's: values are drawn a chunk at a time and stored by t's device.
template <typename Draw>
Tensor fill_random(const Tensor& t, const char* op, Draw&& draw) {
  const Device dev = common_device(op, {&t});
  if (dev.is_meta()) return t;
  autograd::NoGradGuard no_grad;
  // Non-contiguous views are filled through a contiguous buffer (rare: parameters are dense).
  Tensor dst = t.is_contiguous() ? t : new_tensor(t.shape(), t.dtype(), dev);
  const std::int64_t n = dst.numel();
  constexpr std::int64_t kChunk = std::int64_t(1) << 14;
  std::vector<double> values;
  Tensor flat = dst.reshape({n});
  for (std::int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const std::int64_t len = std::min(kChunk, n - i0);
    values.resize(static_cast<std::size_t>(len));
    for (double& v : values) v = draw();
    kernels(dev).store_values(len == n ? flat : flat.narrow(0, i0, len), values);
  }
  if (!dst.is_same(t)) {
    Tensor target = t;
    target.copy_(dst);
  } else {
    t.storage()->bump_version();
  }
  return t;
}

Generator& pick(Generator* gen) {
  return gen ? *gen : default_generator();
}

bool zero_element(const Tensor& t) {
  if (t.numel() != 0) return false;
  warn("Initializing zero-element tensors is a no-op", "UserWarning");
  return true;
}

double kaiming_std(const Tensor& t, double a, const std::string& mode,
                   const std::string& nonlinearity) {
  FSDP_CHECK(mode == "fan_in" || mode == "fan_out", ValueError,
             "Mode {} not supported, please use one of fan_in, fan_out", mode);
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  double fan = static_cast<double>(mode == "fan_in" ? fan_in : fan_out);
  return calculate_gain(nonlinearity, a) / std::sqrt(fan);
}

double xavier_std(const Tensor& t, double gain) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  return gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
}

}  // namespace

double calculate_gain(const std::string& nl, std::optional<double> param) {
  static const char* const kLinear[] = {"linear",           "conv1d",           "conv2d",
                                        "conv3d",           "conv_transpose1d", "conv_transpose2d",
                                        "conv_transpose3d", "sigmoid"};
  for (const char* name : kLinear)
    if (nl == name) return 1.0;
  if (nl == "tanh") return 5.0 / 3.0;
  if (nl == "relu") return std::sqrt(2.0);
  if (nl == "leaky_relu") {
    double slope = param.value_or(0.01);
    return std::sqrt(2.0 / (1.0 + slope * slope));
  }
  if (nl == "selu") return 3.0 / 4.0;
  throw ValueError(fmt::format("Unsupported nonlinearity {}", nl));
}

std::pair<std::int64_t, std::int64_t> calculate_fan_in_and_fan_out(const Tensor& t) {
  FSDP_CHECK(t.dim() >= 2, ValueError,
             "Fan in and fan out can not be computed for tensor with fewer than 2 dimensions "
             "(got shape {})",
             shape_str(t.shape()));
  std::int64_t receptive = 1;
  for (std::int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

Tensor uniform_(const Tensor& t, double a, double b, Generator* gen) {
  Generator& g = pick(gen);
  const double width = b - a;
  return fill_random(t, "uniform_", [&] { return a + width * g.uniform(); });
}

Tensor normal_(const Tensor& t, double mean, double std, Generator* gen) {
  FSDP_CHECK(std >= 0.0, RuntimeError, "normal_ expects std >= 0.0, but found std {}", std);
  Generator& g = pick(gen);
  return fill_random(t, "normal_", [&] { return mean + std * g.normal(); });
}

Tensor constant_(const Tensor& t, double value) {
  autograd::NoGradGuard no_grad;
  Tensor target = t;
  target.fill_(value);
  return t;
}
Tensor ones_(const Tensor& t) {
  return constant_(t, 1.0);
}
Tensor zeros_(const Tensor& t) {
  return constant_(t, 0.0);
}

Tensor xavier_uniform_(const Tensor& t, double gain, Generator* gen) {
  double bound = std::sqrt(3.0) * xavier_std(t, gain);
  return uniform_(t, -bound, bound, gen);
}

Tensor xavier_normal_(const Tensor& t, double gain, Generator* gen) {
  return normal_(t, 0.0, xavier_std(t, gain), gen);
}

Tensor kaiming_uniform_(const Tensor& t, double a, const std::string& mode,
                        const std::string& nonlinearity, Generator* gen) {
  if (zero_element(t)) return t;
  double bound = std::sqrt(3.0) * kaiming_std(t, a, mode, nonlinearity);
  return uniform_(t, -bound, bound, gen);
}

Tensor kaiming_normal_(const Tensor& t, double a, const std::string& mode,
                       const std::string& nonlinearity, Generator* gen) {
  if (zero_element(t)) return t;
  return normal_(t, 0.0, kaiming_std(t, a, mode, nonlinearity), gen);
}

}  // namespace fsdp::nn::init

namespace fsdp::nn {
void reset_parameters_recursively(Module& module) {
  module.apply([](Module& m) { m.reset_parameters(); });
}
}  // namespace fsdp::nn
