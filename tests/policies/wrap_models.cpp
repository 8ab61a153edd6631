#include "tests/policies/wrap_models.h"

#include "core/traversal/wrapper_marker.h"

namespace fsdp::testing {

using nn::ModulePtr;

RecordingWrapper::RecordingWrapper(ModulePtr module, policies::WrapperOptions opts)
    : nn::Module(static_class()), options(std::move(opts)) {
  register_module("_wrapped_module", std::move(module));
  traversal::mark_as_wrapper(*this, "RecordingWrapper");
}

int& RecordingWrapper::constructed() {
  thread_local int count = 0;
  return count;
}

policies::WrapperFn RecordingWrapper::wrapper_fn() {
  return [](ModulePtr m, const policies::WrapperOptions& o) -> ModulePtr {
    ++constructed();
    return std::make_shared<RecordingWrapper>(std::move(m), o);
  };
}

bool is_recording_wrapper(const ModulePtr& m) {
  return std::dynamic_pointer_cast<RecordingWrapper>(m) != nullptr;
}

namespace {
void freeze(nn::Module& m) {
  for (auto& p : m.parameters()) p.requires_grad_(false);
}
}  // namespace

BatchNormNet::BatchNormNet() : nn::Module(static_class()) {
  register_module("lin", std::make_shared<nn::Linear>(10, 10, false));
  register_module("bn1", std::make_shared<nn::BatchNorm1d>(10));
  register_module("bn2", std::make_shared<nn::BatchNorm2d>(10));
  register_module("bn3", std::make_shared<nn::BatchNorm3d>(10));
  register_module("sync_bn", std::make_shared<nn::SyncBatchNorm>(10));
}

LoraAttention::LoraAttention() : nn::Module(static_class()) {
  register_module("q_proj", std::make_shared<nn::Linear>(32, 32, false));
  register_module("lora_A", std::make_shared<nn::Linear>(32, 8, false));
  register_module("lora_B", std::make_shared<nn::Linear>(8, 32, false));
  register_module("k_proj", std::make_shared<nn::Linear>(32, 32, false));
  register_module("v_proj", std::make_shared<nn::Linear>(32, 32, false));
  register_module("o_proj", std::make_shared<nn::Linear>(32, 32, false));
  for (const char* name : {"q_proj", "k_proj", "v_proj", "o_proj"}) freeze(*child(name));
}

LoraMLP::LoraMLP() : nn::Module(static_class()) {
  register_module("proj1", std::make_shared<nn::Linear>(32, 128, false));
  register_module("proj2", std::make_shared<nn::Linear>(128, 32, false));
  freeze(*child("proj1"));
  freeze(*child("proj2"));
}

LoraDecoder::LoraDecoder() : nn::Module(static_class()) {
  register_module("attn", std::make_shared<LoraAttention>());
  register_module("mlp", std::make_shared<LoraMLP>());
  register_module("inp_layernorm", std::make_shared<nn::LayerNorm>(32));
  register_module("post_attn_layernorm", std::make_shared<nn::LayerNorm>(32));
  freeze(*child("inp_layernorm"));
  freeze(*child("post_attn_layernorm"));
}

LoraModel::LoraModel() : nn::Module(static_class()) {
  register_module("embed_tokens", std::make_shared<nn::Embedding>(100, 32));
  auto layers = std::make_shared<nn::ModuleList>();
  for (int i = 0; i < 4; ++i) layers->append(std::make_shared<LoraDecoder>());
  register_module("layers", layers);
  register_module("norm", std::make_shared<nn::LayerNorm>(32));
  freeze(*child("embed_tokens"));
  freeze(*child("norm"));
}

TransformerWithSharedParams::TransformerWithSharedParams(bool add_bn, TensorOptions options)
    : nn::Module(static_class()) {
  const std::int64_t d_vocab = 23, d_model = 16;
  auto embed = register_module(
      "embed_tokens", std::make_shared<nn::Embedding>(d_vocab, d_model, std::nullopt, options));
  nn::TransformerOptions t;
  t.d_model = d_model;
  t.num_encoder_layers = 2;
  t.num_decoder_layers = 2;
  t.dim_feedforward = 8;
  t.dropout = 0.1;
  t.tensor = options;
  register_module("transformer", std::make_shared<nn::Transformer>(t));
  auto out =
      register_module("output_proj", std::make_shared<nn::Linear>(d_model, d_vocab, true, options));
  out->set_parameter("weight", embed->param("weight"));  // tied
  register_buffer("vocab_bias", ones({d_model}, options));
  register_buffer("long_buffer", zeros({d_model}, options.with_dtype(DType::Int64)));
  if (add_bn)
    register_module("bn", std::make_shared<nn::BatchNorm1d>(2, 1e-5, 0.1, true, true, options));
  else
    register_module("bn", std::make_shared<nn::Identity>());
}

std::shared_ptr<nn::Sequential> nested_sequential_model(TensorOptions o) {
  auto lin = [&] { return std::make_shared<nn::Linear>(5, 5, true, o); };
  return std::make_shared<nn::Sequential>(std::vector<ModulePtr>{
      lin(), lin(), std::make_shared<nn::Sequential>(std::vector<ModulePtr>{lin(), lin()})});
}

std::shared_ptr<nn::Sequential> nested_chain(std::int64_t depth, TensorOptions o) {
  // Built bottom-up so that no recursion is needed.
  std::shared_ptr<nn::Sequential> level;
  for (std::int64_t i = 0; i < depth; ++i) {
    auto s = std::make_shared<nn::Sequential>();
    s->append(std::make_shared<nn::Linear>(4, 4, true, o));
    if (level) s->append(level);
    level = s;
  }
  return level;
}

}  // namespace fsdp::testing
