// Models and helpers shared by the ops tests.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/dispatch/dispatch_mode.h"
#include "core/nn/nn.h"
#include "core/ops.h"

namespace fsdp::ops_test {

// A stack of batch-first TransformerEncoderLayers (d_model 8, 2 heads, feed-forward 16).
std::shared_ptr<nn::Sequential> transformer_stack(int layers, DType dtype, double dropout = 0.0,
                                                  std::uint64_t seed = 0);

// Every parameter's gradient, in named_parameters() order.
std::vector<Tensor> grads(nn::Module& m);

// Largest |a - b| over two lists of tensors of equal shapes.
double max_abs_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b);

// A mode that records the names of the ops it sees and runs them.
class RecordingMode : public dispatch::DispatchMode {
 public:
  std::string name() const override { return "RecordingMode"; }
  nn::Value handle(const dispatch::OpCall& call) override {
    ops.push_back(call.name());
    return call.run();
  }
  std::vector<std::string> ops;
};

}  // namespace fsdp::ops_test
