// torch.nn.Transformer and its parts: TransformerEncoderLayer, TransformerDecoderLayer,
// TransformerEncoder, TransformerDecoder. Child names and order follow torch exactly, so FQNs
// ("encoder.layers.0.self_attn.in_proj_weight") and state dicts map 1:1.
#pragma once

#include <memory>
#include <string>

#include "core/module.h"
#include "core/nn/cloneable.h"

namespace fsdp::nn {

class ModuleList;

// torch's keyword arguments after (d_model, nhead) of the encoder and decoder layers.
struct TransformerLayerOptions {
  std::int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  std::string activation = "relu";  // "relu" | "gelu"
  double layer_norm_eps = 1e-5;
  bool batch_first = false;
  bool norm_first = false;
  bool bias = true;
  TensorOptions tensor = {};
};
using TransformerEncoderLayerOptions = TransformerLayerOptions;
using TransformerDecoderLayerOptions = TransformerLayerOptions;

// The optional inputs of an encoder layer / encoder.
struct EncoderArgs {
  Tensor mask;
  Tensor key_padding_mask;
  bool is_causal = false;
};
// The optional inputs of a decoder layer / decoder.
struct DecoderArgs {
  Tensor tgt_mask;
  Tensor memory_mask;
  Tensor tgt_key_padding_mask;
  Tensor memory_key_padding_mask;
  bool tgt_is_causal = false;
  bool memory_is_causal = false;
};

// Children: self_attn, linear1, dropout, linear2, norm1, norm2, dropout1, dropout2.
class TransformerEncoderLayer : public Module, public Cloneable {
 public:
  FSDP_MODULE_CLASS(TransformerEncoderLayer, Module)
  TransformerEncoderLayer(std::int64_t d_model, std::int64_t nhead,
                          const TransformerEncoderLayerOptions& o = {});
  // (src, src_mask=None, src_key_padding_mask=None, is_causal=False)
  Value forward(const Args& args) override;
  Tensor forward(const Tensor& src, const EncoderArgs& a = {});
  ModulePtr clone_structure() const override;

  const std::int64_t d_model;
  const std::int64_t nhead;
  const TransformerLayerOptions options;

 private:
  Tensor sa_block(const Tensor& x, const EncoderArgs& a);
  Tensor ff_block(const Tensor& x);
};

// Children: self_attn, multihead_attn, linear1, dropout, linear2, norm1, norm2, norm3,
// dropout1, dropout2, dropout3.
class TransformerDecoderLayer : public Module, public Cloneable {
 public:
  FSDP_MODULE_CLASS(TransformerDecoderLayer, Module)
  TransformerDecoderLayer(std::int64_t d_model, std::int64_t nhead,
                          const TransformerDecoderLayerOptions& o = {});
  // (tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
  //  memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False)
  Value forward(const Args& args) override;
  Tensor forward(const Tensor& tgt, const Tensor& memory, const DecoderArgs& a = {});
  ModulePtr clone_structure() const override;

  const std::int64_t d_model;
  const std::int64_t nhead;
  const TransformerLayerOptions options;

 private:
  Tensor sa_block(const Tensor& x, const DecoderArgs& a);
  Tensor mha_block(const Tensor& x, const Tensor& memory, const DecoderArgs& a);
  Tensor ff_block(const Tensor& x);
};

// A stack of num_layers deep copies of encoder_layer (child "layers", a ModuleList) and an
// optional final norm (child "norm", only registered when given).
class TransformerEncoder : public Module, public Cloneable {
 public:
  FSDP_MODULE_CLASS(TransformerEncoder, Module)
  TransformerEncoder(const ModulePtr& encoder_layer, std::int64_t num_layers,
                     ModulePtr norm = nullptr);
  // (src, mask=None, src_key_padding_mask=None, is_causal=None)
  Value forward(const Args& args) override;
  Tensor forward(const Tensor& src, const EncoderArgs& a = {});
  ModulePtr clone_structure() const override;
  std::shared_ptr<ModuleList> layers() const;

  const std::int64_t num_layers;

 private:
  explicit TransformerEncoder(std::int64_t n) : Module(static_class()), num_layers(n) {}
};

class TransformerDecoder : public Module, public Cloneable {
 public:
  FSDP_MODULE_CLASS(TransformerDecoder, Module)
  TransformerDecoder(const ModulePtr& decoder_layer, std::int64_t num_layers,
                     ModulePtr norm = nullptr);
  // (tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
  //  memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False)
  Value forward(const Args& args) override;
  Tensor forward(const Tensor& tgt, const Tensor& memory, const DecoderArgs& a = {});
  ModulePtr clone_structure() const override;
  std::shared_ptr<ModuleList> layers() const;

  const std::int64_t num_layers;

 private:
  explicit TransformerDecoder(std::int64_t n) : Module(static_class()), num_layers(n) {}
};

struct TransformerOptions {
  std::int64_t d_model = 512;
  std::int64_t nhead = 8;
  std::int64_t num_encoder_layers = 6;
  std::int64_t num_decoder_layers = 6;
  std::int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  std::string activation = "relu";
  ModulePtr custom_encoder;
  ModulePtr custom_decoder;
  double layer_norm_eps = 1e-5;
  bool batch_first = false;
  bool norm_first = false;
  bool bias = true;
  TensorOptions tensor = {};
};

// Children encoder and decoder (each with a final LayerNorm); every parameter with more than one
// dimension is then re-initialised with xavier_uniform_, as torch's _reset_parameters.
class Transformer : public Module, public Cloneable {
 public:
  FSDP_MODULE_CLASS(Transformer, Module)
  explicit Transformer(const TransformerOptions& o = {});
  // (src, tgt, src_mask=None, tgt_mask=None, memory_mask=None, src_key_padding_mask=None,
  //  tgt_key_padding_mask=None, memory_key_padding_mask=None, src_is_causal=None,
  //  tgt_is_causal=None, memory_is_causal=False)
  Value forward(const Args& args) override;
  Tensor forward(const Tensor& src, const Tensor& tgt, const EncoderArgs& enc = {},
                 const DecoderArgs& dec = {});
  ModulePtr clone_structure() const override;
  // torch's _reset_parameters: xavier_uniform_ on every parameter of more than one dimension.
  // The constructor calls it after building the encoder and decoder.
  void reset_parameters() override;
  // A float (sz, sz) mask: -inf above the diagonal, 0 elsewhere.
  static Tensor generate_square_subsequent_mask(std::int64_t sz, TensorOptions options = {});

  const std::int64_t d_model;
  const std::int64_t nhead;
  const bool batch_first;

 private:
  TransformerOptions options_;
};

}  // namespace fsdp::nn
