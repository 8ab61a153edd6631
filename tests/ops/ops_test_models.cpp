#include "tests/ops/ops_test_models.h"

#include <algorithm>
#include <cmath>

namespace fsdp::ops_test {

std::shared_ptr<nn::Sequential> transformer_stack(int layers, DType dtype, double dropout,
                                                  std::uint64_t seed) {
  manual_seed(seed);
  nn::TransformerLayerOptions o;
  o.dim_feedforward = 16;
  o.dropout = dropout;
  o.batch_first = true;
  o.tensor = TensorOptions(dtype);
  auto seq = std::make_shared<nn::Sequential>();
  for (int i = 0; i < layers; ++i)
    seq->append(std::make_shared<nn::TransformerEncoderLayer>(8, 2, o));
  return seq;
}

std::vector<Tensor> grads(nn::Module& m) {
  std::vector<Tensor> out;
  for (const auto& [name, p] : m.named_parameters()) out.push_back(p.grad());
  return out;
}

double max_abs_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto x = a[i].to_vector(), y = b[i].to_vector();
    for (std::size_t k = 0; k < x.size(); ++k) d = std::max(d, std::abs(x[k] - y[k]));
  }
  return d;
}

}  // namespace fsdp::ops_test
