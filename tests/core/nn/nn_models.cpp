#include "tests/core/nn/nn_models.h"

#include "core/error.h"

namespace fsdp::nn::testing {

ModulePtr structure_model(const std::string& name, TensorOptions t) {
  using std::make_shared;
  if (name == "linear") return make_shared<Linear>(5, 5, true, t);
  if (name == "linear_nobias") return make_shared<Linear>(3, 2, false, t);
  if (name == "embedding") return make_shared<Embedding>(10, 3, -1, t);
  if (name == "layer_norm") return make_shared<LayerNorm>(Shape{4, 5}, 1e-5, false, true, t);
  if (name == "bn1d") return make_shared<BatchNorm1d>(4, 1e-5, 0.1, true, true, t);
  if (name == "bn2d_untracked")
    return make_shared<BatchNorm2d>(4, 1e-5, std::nullopt, false, false, t);
  if (name == "sync_bn") return make_shared<SyncBatchNorm>(6, 1e-5, 0.1, true, true, t);
  if (name == "mha") return make_shared<MultiheadAttention>(8, 2, 0.0, true, t);
  if (name == "mha_kdim_bias_kv")
    return make_shared<MultiheadAttention>(
        8, 2, MultiheadAttentionOptions{.add_bias_kv = true, .kdim = 4, .vdim = 6, .tensor = t});
  if (name == "encoder_layer")
    return make_shared<TransformerEncoderLayer>(
        16, 4, TransformerLayerOptions{.dim_feedforward = 32, .tensor = t});
  if (name == "decoder_layer")
    return make_shared<TransformerDecoderLayer>(
        16, 4, TransformerLayerOptions{.dim_feedforward = 32, .tensor = t});
  if (name == "transformer_small")
    return make_shared<Transformer>(TransformerOptions{.d_model = 16,
                                                       .nhead = 4,
                                                       .num_encoder_layers = 2,
                                                       .num_decoder_layers = 1,
                                                       .dim_feedforward = 32,
                                                       .tensor = t});
  if (name == "transformer_default")
    return make_shared<Transformer>(TransformerOptions{.tensor = t});
  if (name == "containers") {
    auto list = make_shared<ModuleList>(
        std::vector<ModulePtr>{make_shared<Linear>(8, 8, true, t), make_shared<Identity>(),
                               make_shared<LayerNorm>(8, 1e-5, true, true, t)});
    auto dict = make_shared<ModuleDict>(std::vector<std::pair<std::string, ModulePtr>>{
        {"norm", make_shared<BatchNorm1d>(8, 1e-5, 0.1, true, true, t)},
        {"emb", make_shared<Embedding>(5, 8, 0, t)}});
    return make_shared<Sequential>(
        std::vector<ModulePtr>{make_shared<Linear>(4, 8, true, t), make_shared<ReLU>(),
                               make_shared<Dropout>(0.25), make_shared<GELU>(), list, dict,
                               make_shared<BatchNorm3d>(8, 1e-3, std::nullopt, true, true, t),
                               make_shared<GELU>("tanh"), make_shared<ReLU>(true)});
  }
  throw KeyError("structure_model: unknown case " + name);
}

}  // namespace fsdp::nn::testing
