// The meta-device models the policy benchmarks share with bench_torch_autowrap.py: transformer-
// like blocks (ModuleDict of four Linear(64,64), Sequential(Linear(64,256), GELU,
// Linear(256,64)), two LayerNorm(64)) between Embedding(1000,64) and Linear(64,1000); 12 modules
// a block, 4 + 12 * blocks in all.
#pragma once

#include <memory>
#include <vector>

#include "core/nn/nn.h"

namespace fsdp::bench {

inline const TensorOptions kMetaF32(DType::Float32, kMeta);

class Block : public nn::Module {
 public:
  FSDP_MODULE_CLASS(Block, nn::Module)
  Block() : nn::Module(static_class()) {
    auto attn = std::make_shared<nn::ModuleDict>();
    for (const char* n : {"q", "k", "v", "o"})
      attn->insert(n, std::make_shared<nn::Linear>(64, 64, true, kMetaF32));
    register_module("attn", attn);
    register_module("mlp", std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
                               std::make_shared<nn::Linear>(64, 256, true, kMetaF32),
                               std::make_shared<nn::GELU>(),
                               std::make_shared<nn::Linear>(256, 64, true, kMetaF32)}));
    register_module("ln1", std::make_shared<nn::LayerNorm>(64, 1e-5, true, true, kMetaF32));
    register_module("ln2", std::make_shared<nn::LayerNorm>(64, 1e-5, true, true, kMetaF32));
  }
};

class Model : public nn::Module {
 public:
  FSDP_MODULE_CLASS(Model, nn::Module)
  explicit Model(int blocks) : nn::Module(static_class()) {
    register_module("embed", std::make_shared<nn::Embedding>(1000, 64, std::nullopt, kMetaF32));
    auto list = std::make_shared<nn::ModuleList>();
    for (int i = 0; i < blocks; ++i) list->append(std::make_shared<Block>());
    register_module("blocks", list);
    register_module("head", std::make_shared<nn::Linear>(64, 1000, true, kMetaF32));
  }
};

inline nn::ModulePtr blocks_model(int blocks) {
  return std::make_shared<Model>(blocks);
}

}  // namespace fsdp::bench
