#include "core/nn/transformer.h"

#include <limits>

#include "core/nn/activation.h"
#include "core/nn/container.h"
#include "core/nn/dropout.h"
#include "core/nn/init.h"
#include "core/nn/layer_norm.h"
#include "core/nn/linear.h"
#include "core/nn/multihead_attention.h"
#include "core/ops.h"
#include "core/traversal/wrapper_marker.h"

namespace fsdp::nn {

namespace {

void check_activation(const std::string& activation) {
  FSDP_CHECK(activation == "relu" || activation == "gelu", RuntimeError,
             "activation should be relu/gelu, not {}", activation);
}

Tensor activate(const std::string& activation, const Tensor& x) {
  return activation == "relu" ? relu(x) : gelu(x);
}

// The feed-forward and normalisation children shared by both layer kinds, in torch's order
// after the attention modules: linear1, dropout, linear2, norm1..norm{n}, dropout1..dropout{n}.
void register_ff_and_norms(Module& m, std::int64_t d_model, const TransformerLayerOptions& o,
                           int n) {
  const TensorOptions& t = o.tensor;
  m.register_module("linear1", std::make_shared<Linear>(d_model, o.dim_feedforward, o.bias, t));
  m.register_module("dropout", std::make_shared<Dropout>(o.dropout));
  m.register_module("linear2", std::make_shared<Linear>(o.dim_feedforward, d_model, o.bias, t));
  for (int i = 1; i <= n; ++i)
    m.register_module("norm" + std::to_string(i),
                      std::make_shared<LayerNorm>(d_model, o.layer_norm_eps, true, o.bias, t));
  for (int i = 1; i <= n; ++i)
    m.register_module("dropout" + std::to_string(i), std::make_shared<Dropout>(o.dropout));
}

MultiheadAttentionOptions attention_options(const TransformerLayerOptions& o) {
  return MultiheadAttentionOptions{
      .dropout = o.dropout, .bias = o.bias, .batch_first = o.batch_first, .tensor = o.tensor};
}

TransformerLayerOptions on_meta(TransformerLayerOptions o) {
  o.tensor = o.tensor.with_device(kMeta);
  return o;
}

// Calls an attention child through its slot with need_weights=False; returns the output.
Tensor attend(Module& m, const char* name, const Tensor& q, const Tensor& kv, const Tensor& mask,
              const Tensor& kpm, bool is_causal) {
  Args args({Value(q), Value(kv), Value(kv)},
            {{"attn_mask", mask.defined() ? Value(mask) : Value()},
             {"key_padding_mask", kpm.defined() ? Value(kpm) : Value()},
             {"need_weights", Value(false)},
             {"is_causal", Value(is_causal)}});
  return m.call_child(name, args)[0].tensor();
}

Value opt(const Tensor& t) {
  return t.defined() ? Value(t) : Value();
}

// layers.0, layers.1, ...: num_layers deep copies of `layer`.
std::shared_ptr<ModuleList> clones(const ModulePtr& layer, std::int64_t n) {
  FSDP_CHECK(layer != nullptr, ValueError, "the layer to clone must not be None");
  auto list = std::make_shared<ModuleList>();
  for (std::int64_t i = 0; i < n; ++i) list->append(deep_copy(*layer));
  return list;
}
}  // namespace

// --- TransformerEncoderLayer
TransformerEncoderLayer::TransformerEncoderLayer(std::int64_t d, std::int64_t h,
                                                 const TransformerEncoderLayerOptions& o)
    : Module(static_class()), d_model(d), nhead(h), options(o) {
  check_activation(o.activation);
  register_module("self_attn", std::make_shared<MultiheadAttention>(d, h, attention_options(o)));
  register_ff_and_norms(*this, d, o, 2);
}

Value TransformerEncoderLayer::forward(const Args& args) {
  EncoderArgs a;
  a.mask = optional_tensor_arg(args.get(1, "src_mask"), "src_mask");
  a.key_padding_mask =
      optional_tensor_arg(args.get(2, "src_key_padding_mask"), "src_key_padding_mask");
  a.is_causal = args.get(3, "is_causal").to_bool_or(false);
  return forward(args.tensor(0), a);
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const EncoderArgs& a) {
  Tensor x = src;
  if (options.norm_first) {
    x = add(x, sa_block(call_child("norm1", x), a));
    x = add(x, ff_block(call_child("norm2", x)));
  } else {
    x = call_child("norm1", add(x, sa_block(x, a)));
    x = call_child("norm2", add(x, ff_block(x)));
  }
  return x;
}

Tensor TransformerEncoderLayer::sa_block(const Tensor& x, const EncoderArgs& a) {
  Tensor y = attend(*this, "self_attn", x, x, a.mask, a.key_padding_mask, a.is_causal);
  return call_child("dropout1", y);
}

Tensor TransformerEncoderLayer::ff_block(const Tensor& x) {
  Tensor h = activate(options.activation, call_child("linear1", x));
  return call_child("dropout2", call_child("linear2", call_child("dropout", h)));
}

ModulePtr TransformerEncoderLayer::clone_structure() const {
  return std::make_shared<TransformerEncoderLayer>(d_model, nhead, on_meta(options));
}

// --- TransformerDecoderLayer
TransformerDecoderLayer::TransformerDecoderLayer(std::int64_t d, std::int64_t h,
                                                 const TransformerDecoderLayerOptions& o)
    : Module(static_class()), d_model(d), nhead(h), options(o) {
  check_activation(o.activation);
  register_module("self_attn", std::make_shared<MultiheadAttention>(d, h, attention_options(o)));
  register_module("multihead_attn",
                  std::make_shared<MultiheadAttention>(d, h, attention_options(o)));
  register_ff_and_norms(*this, d, o, 3);
}

Value TransformerDecoderLayer::forward(const Args& args) {
  DecoderArgs a;
  a.tgt_mask = optional_tensor_arg(args.get(2, "tgt_mask"), "tgt_mask");
  a.memory_mask = optional_tensor_arg(args.get(3, "memory_mask"), "memory_mask");
  a.tgt_key_padding_mask =
      optional_tensor_arg(args.get(4, "tgt_key_padding_mask"), "tgt_key_padding_mask");
  a.memory_key_padding_mask =
      optional_tensor_arg(args.get(5, "memory_key_padding_mask"), "memory_key_padding_mask");
  a.tgt_is_causal = args.get(6, "tgt_is_causal").to_bool_or(false);
  a.memory_is_causal = args.get(7, "memory_is_causal").to_bool_or(false);
  return forward(args.tensor(0), args.tensor(1), a);
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory,
                                        const DecoderArgs& a) {
  Tensor x = tgt;
  if (options.norm_first) {
    x = add(x, sa_block(call_child("norm1", x), a));
    x = add(x, mha_block(call_child("norm2", x), memory, a));
    x = add(x, ff_block(call_child("norm3", x)));
  } else {
    x = call_child("norm1", add(x, sa_block(x, a)));
    x = call_child("norm2", add(x, mha_block(x, memory, a)));
    x = call_child("norm3", add(x, ff_block(x)));
  }
  return x;
}

Tensor TransformerDecoderLayer::sa_block(const Tensor& x, const DecoderArgs& a) {
  Tensor y = attend(*this, "self_attn", x, x, a.tgt_mask, a.tgt_key_padding_mask, a.tgt_is_causal);
  return call_child("dropout1", y);
}

Tensor TransformerDecoderLayer::mha_block(const Tensor& x, const Tensor& memory,
                                          const DecoderArgs& a) {
  Tensor y = attend(*this, "multihead_attn", x, memory, a.memory_mask, a.memory_key_padding_mask,
                    a.memory_is_causal);
  return call_child("dropout2", y);
}

Tensor TransformerDecoderLayer::ff_block(const Tensor& x) {
  Tensor h = activate(options.activation, call_child("linear1", x));
  return call_child("dropout3", call_child("linear2", call_child("dropout", h)));
}

ModulePtr TransformerDecoderLayer::clone_structure() const {
  return std::make_shared<TransformerDecoderLayer>(d_model, nhead, on_meta(options));
}

// --- TransformerEncoder / TransformerDecoder
TransformerEncoder::TransformerEncoder(const ModulePtr& layer, std::int64_t n, ModulePtr norm)
    : Module(static_class()), num_layers(n) {
  register_module("layers", clones(layer, n));
  if (norm) register_module("norm", std::move(norm));
}

std::shared_ptr<ModuleList> TransformerEncoder::layers() const {
  return child_as<ModuleList>("layers");
}

Value TransformerEncoder::forward(const Args& args) {
  EncoderArgs a;
  a.mask = optional_tensor_arg(args.get(1, "mask"), "mask");
  a.key_padding_mask =
      optional_tensor_arg(args.get(2, "src_key_padding_mask"), "src_key_padding_mask");
  a.is_causal = args.get(3, "is_causal").to_bool_or(false);
  return forward(args.tensor(0), a);
}

Tensor TransformerEncoder::forward(const Tensor& src, const EncoderArgs& a) {
  Tensor x = src;
  for (const auto& [name, layer] : traversal::unwrapped(*child("layers")).child_slots()) {
    if (!layer) continue;
    x = (*layer)(Args({Value(x)}, {{"src_mask", opt(a.mask)},
                                   {"src_key_padding_mask", opt(a.key_padding_mask)},
                                   {"is_causal", Value(a.is_causal)}}))
            .tensor();
  }
  if (has_child("norm") && child("norm")) x = call_child("norm", x);
  return x;
}

ModulePtr TransformerEncoder::clone_structure() const {
  auto out = std::shared_ptr<TransformerEncoder>(new TransformerEncoder(num_layers));
  for (const auto& [name, c] : child_slots())
    out->register_module(name, c ? clone_structure_of(*c) : ModulePtr());
  return out;
}

TransformerDecoder::TransformerDecoder(const ModulePtr& layer, std::int64_t n, ModulePtr norm)
    : Module(static_class()), num_layers(n) {
  register_module("layers", clones(layer, n));
  if (norm) register_module("norm", std::move(norm));
}

std::shared_ptr<ModuleList> TransformerDecoder::layers() const {
  return child_as<ModuleList>("layers");
}

Value TransformerDecoder::forward(const Args& args) {
  DecoderArgs a;
  a.tgt_mask = optional_tensor_arg(args.get(2, "tgt_mask"), "tgt_mask");
  a.memory_mask = optional_tensor_arg(args.get(3, "memory_mask"), "memory_mask");
  a.tgt_key_padding_mask =
      optional_tensor_arg(args.get(4, "tgt_key_padding_mask"), "tgt_key_padding_mask");
  a.memory_key_padding_mask =
      optional_tensor_arg(args.get(5, "memory_key_padding_mask"), "memory_key_padding_mask");
  a.tgt_is_causal = args.get(6, "tgt_is_causal").to_bool_or(false);
  a.memory_is_causal = args.get(7, "memory_is_causal").to_bool_or(false);
  return forward(args.tensor(0), args.tensor(1), a);
}

Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory, const DecoderArgs& a) {
  Tensor x = tgt;
  for (const auto& [name, layer] : traversal::unwrapped(*child("layers")).child_slots()) {
    if (!layer) continue;
    x = (*layer)(Args({Value(x), Value(memory)},
                      {{"tgt_mask", opt(a.tgt_mask)},
                       {"memory_mask", opt(a.memory_mask)},
                       {"tgt_key_padding_mask", opt(a.tgt_key_padding_mask)},
                       {"memory_key_padding_mask", opt(a.memory_key_padding_mask)},
                       {"tgt_is_causal", Value(a.tgt_is_causal)},
                       {"memory_is_causal", Value(a.memory_is_causal)}}))
            .tensor();
  }
  if (has_child("norm") && child("norm")) x = call_child("norm", x);
  return x;
}

ModulePtr TransformerDecoder::clone_structure() const {
  auto out = std::shared_ptr<TransformerDecoder>(new TransformerDecoder(num_layers));
  for (const auto& [name, c] : child_slots())
    out->register_module(name, c ? clone_structure_of(*c) : ModulePtr());
  return out;
}

// --- Transformer
Transformer::Transformer(const TransformerOptions& o)
    : Module(static_class()),
      d_model(o.d_model),
      nhead(o.nhead),
      batch_first(o.batch_first),
      options_(o) {
  TransformerLayerOptions lo{o.dim_feedforward, o.dropout,    o.activation, o.layer_norm_eps,
                             o.batch_first,     o.norm_first, o.bias,       o.tensor};
  auto final_norm = [&] {
    return std::make_shared<LayerNorm>(o.d_model, o.layer_norm_eps, true, o.bias, o.tensor);
  };
  if (o.custom_encoder) {
    register_module("encoder", o.custom_encoder);
  } else {
    auto layer = std::make_shared<TransformerEncoderLayer>(o.d_model, o.nhead, lo);
    register_module(
        "encoder", std::make_shared<TransformerEncoder>(layer, o.num_encoder_layers, final_norm()));
  }
  if (o.custom_decoder) {
    register_module("decoder", o.custom_decoder);
  } else {
    auto layer = std::make_shared<TransformerDecoderLayer>(o.d_model, o.nhead, lo);
    register_module(
        "decoder", std::make_shared<TransformerDecoder>(layer, o.num_decoder_layers, final_norm()));
  }
  options_.custom_encoder = nullptr;  // not kept: the modules live in the child slots
  options_.custom_decoder = nullptr;
  reset_parameters();
}

void Transformer::reset_parameters() {
  // Through the children: in the constructor this module is not yet owned by a shared_ptr, which
  // the traversals need. Tied parameters (a custom encoder shared with the decoder) are
  // initialised twice.
  for (const auto& c : children())
    for (auto& p : c->parameters())
      if (p.dim() > 1) init::xavier_uniform_(p);
}

Value Transformer::forward(const Args& args) {
  auto t = [&](std::size_t i, const char* name) {
    return optional_tensor_arg(args.get(i, name), name);
  };
  EncoderArgs enc{t(2, "src_mask"), t(5, "src_key_padding_mask"),
                  args.get(8, "src_is_causal").to_bool_or(false)};
  DecoderArgs dec{t(3, "tgt_mask"),
                  t(4, "memory_mask"),
                  t(6, "tgt_key_padding_mask"),
                  t(7, "memory_key_padding_mask"),
                  args.get(9, "tgt_is_causal").to_bool_or(false),
                  args.get(10, "memory_is_causal").to_bool_or(false)};
  return forward(args.tensor(0), args.tensor(1), enc, dec);
}

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt, const EncoderArgs& enc,
                            const DecoderArgs& dec) {
  const bool batched = src.dim() == 3;
  const std::int64_t batch_dim = batch_first ? 0 : 1;
  FSDP_CHECK(!batched || src.size(batch_dim) == tgt.size(batch_dim), RuntimeError,
             "the batch number of src and tgt must be equal (src {}, tgt {})",
             shape_str(src.shape()), shape_str(tgt.shape()));
  FSDP_CHECK(src.size(-1) == d_model && tgt.size(-1) == d_model, RuntimeError,
             "the feature number of src and tgt must be equal to d_model (src {}, tgt {}, "
             "d_model {})",
             shape_str(src.shape()), shape_str(tgt.shape()), d_model);
  Tensor memory =
      (*child("encoder"))(Args({Value(src)}, {{"mask", opt(enc.mask)},
                                              {"src_key_padding_mask", opt(enc.key_padding_mask)},
                                              {"is_causal", Value(enc.is_causal)}}))
          .tensor();
  return (*child("decoder"))(Args({Value(tgt), Value(memory)},
                                  {{"tgt_mask", opt(dec.tgt_mask)},
                                   {"memory_mask", opt(dec.memory_mask)},
                                   {"tgt_key_padding_mask", opt(dec.tgt_key_padding_mask)},
                                   {"memory_key_padding_mask", opt(dec.memory_key_padding_mask)},
                                   {"tgt_is_causal", Value(dec.tgt_is_causal)},
                                   {"memory_is_causal", Value(dec.memory_is_causal)}}))
      .tensor();
}

ModulePtr Transformer::clone_structure() const {
  TransformerOptions o = options_;
  o.tensor = o.tensor.with_device(kMeta);
  o.custom_encoder = clone_structure_of(*child("encoder"));
  o.custom_decoder = clone_structure_of(*child("decoder"));
  return std::make_shared<Transformer>(o);
}

Tensor Transformer::generate_square_subsequent_mask(std::int64_t sz, TensorOptions options) {
  std::vector<double> v(static_cast<std::size_t>(sz * sz), 0.0);
  for (std::int64_t i = 0; i < sz; ++i)
    for (std::int64_t j = i + 1; j < sz; ++j)
      v[static_cast<std::size_t>(i * sz + j)] = -std::numeric_limits<double>::infinity();
  const TensorOptions o(options.dtype, options.device);
  // from_vector writes on the host and copies to a device; a meta mask has no values.
  return o.device.is_meta() ? empty({sz, sz}, o) : from_vector(v, {sz, sz}, o);
}

}  // namespace fsdp::nn
