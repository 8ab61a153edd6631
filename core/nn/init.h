// torch.nn.init: in-place initialisers with PyTorch's fan computations and gains. They run
// without recording autograd history, skip meta tensors (no storage: building a model on the
// meta device costs no per-element work) and draw from `generator` or this thread's default.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "core/random.h"
#include "core/tensor.h"

namespace fsdp::nn::init {

// The recommended gain for a nonlinearity ("linear", "conv1d".., "sigmoid", "tanh", "relu",
// "leaky_relu" (param = negative slope, default 0.01), "selu"); ValueError otherwise.
double calculate_gain(const std::string& nonlinearity, std::optional<double> param = std::nullopt);
// (fan_in, fan_out) of a weight of at least 2 dimensions (ValueError otherwise).
std::pair<std::int64_t, std::int64_t> calculate_fan_in_and_fan_out(const Tensor& tensor);

Tensor uniform_(const Tensor& tensor, double a = 0.0, double b = 1.0, Generator* gen = nullptr);
Tensor normal_(const Tensor& tensor, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
Tensor constant_(const Tensor& tensor, double value);
Tensor ones_(const Tensor& tensor);
Tensor zeros_(const Tensor& tensor);
Tensor xavier_uniform_(const Tensor& tensor, double gain = 1.0, Generator* gen = nullptr);
Tensor xavier_normal_(const Tensor& tensor, double gain = 1.0, Generator* gen = nullptr);
// mode: "fan_in" | "fan_out"; `a` is the negative slope for leaky_relu.
Tensor kaiming_uniform_(const Tensor& tensor, double a = 0.0, const std::string& mode = "fan_in",
                        const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
Tensor kaiming_normal_(const Tensor& tensor, double a = 0.0, const std::string& mode = "fan_in",
                       const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);

}  // namespace fsdp::nn::init

namespace fsdp::nn {
class Module;
// Calls reset_parameters() on every module of the tree, children first (Module::apply's order),
// which is the order in which constructors initialise: a model built on the meta device and
// materialised with to_empty and this equals the model built eagerly under the same seed (up to
// what constructors copy, such as TransformerEncoder's deep-copied layers).
void reset_parameters_recursively(Module& module);
}  // namespace fsdp::nn
