// The helper models of upstream's test_wrap.py and common_fsdp.py, built from core/nn with
// torch's exact shapes, plus a wrapper that records its options (for policy tests without FSDP).
#pragma once

#include <memory>

#include "core/module.h"
#include "core/nn/nn.h"
#include "policies/options.h"
#include "policies/wrapper_fn.h"

namespace fsdp::testing {

// Records the options it was built with; marked as a wrapper of class "RecordingWrapper".
class RecordingWrapper : public nn::Module {
 public:
  FSDP_MODULE_CLASS(RecordingWrapper, nn::Module)
  RecordingWrapper(nn::ModulePtr module, policies::WrapperOptions options);
  static policies::WrapperFn wrapper_fn();  // also counts constructions in `constructed()`
  static int& constructed();
  const nn::ModulePtr& module() const { return child("_wrapped_module"); }
  nn::Value forward(const nn::Args& args) override { return (*module())(args); }
  policies::WrapperOptions options;
};
bool is_recording_wrapper(const nn::ModulePtr& m);

// lin = Linear(10, 10, bias=False), bn1..bn3 = BatchNorm1d/2d/3d(10), sync_bn = SyncBatchNorm(10).
class BatchNormNet : public nn::Module {
 public:
  FSDP_MODULE_CLASS(BatchNormNet, nn::Module)
  BatchNormNet();
};

class LoraAttention : public nn::Module {
 public:
  FSDP_MODULE_CLASS(LoraAttention, nn::Module)
  LoraAttention();
};
class LoraMLP : public nn::Module {
 public:
  FSDP_MODULE_CLASS(LoraMLP, nn::Module)
  LoraMLP();
};
class LoraDecoder : public nn::Module {
 public:
  FSDP_MODULE_CLASS(LoraDecoder, nn::Module)
  LoraDecoder();
};
// embed_tokens (frozen), layers = ModuleList of 4 LoraDecoder, norm (frozen).
class LoraModel : public nn::Module {
 public:
  FSDP_MODULE_CLASS(LoraModel, nn::Module)
  LoraModel();
};

// common_fsdp.TransformerWithSharedParams (NO_FSDP construction): embed_tokens Embedding(23, 16),
// transformer Transformer(16, 2+2 layers, ff 8, dropout 0.1), output_proj Linear(16, 23) whose
// weight is embed_tokens.weight, buffers vocab_bias/long_buffer, bn BatchNorm1d(2) or Identity.
class TransformerWithSharedParams : public nn::Module {
 public:
  FSDP_MODULE_CLASS(TransformerWithSharedParams, nn::Module)
  explicit TransformerWithSharedParams(bool add_bn = true, TensorOptions options = {});
};

// Sequential(Linear(5,5), Linear(5,5), Sequential(Linear(5,5), Linear(5,5))).
std::shared_ptr<nn::Sequential> nested_sequential_model(TensorOptions options = {});

// A chain of `depth` nested Sequentials, each holding one Linear(4, 4) then the next level.
std::shared_ptr<nn::Sequential> nested_chain(std::int64_t depth,
                                             TensorOptions options = TensorOptions(DType::Float32,
                                                                                   kMeta));

}  // namespace fsdp::testing
