#include "examples/tiny_lm.h"

#include <fstream>
#include <iterator>
#include <limits>

#include "core/error.h"
#include "core/traversal/wrapper_marker.h"

namespace fsdp::examples {

TinyLM::TinyLM(const TinyLMConfig& c, TensorOptions options) : Module(static_class()), config(c) {
  nn::EmbeddingOptions emb;
  emb.tensor = options;
  register_module("tok_emb", std::make_shared<nn::Embedding>(c.vocab, c.d_model, emb));
  register_module("pos_emb", std::make_shared<nn::Embedding>(c.context, c.d_model, emb));
  auto blocks = std::make_shared<nn::ModuleList>();
  for (std::int64_t i = 0; i < c.layers; ++i) {
    nn::TransformerEncoderLayerOptions o;
    o.dim_feedforward = 4 * c.d_model;
    o.dropout = c.dropout;
    o.activation = "gelu";
    o.batch_first = true;
    o.norm_first = true;
    o.tensor = options;
    blocks->append(std::make_shared<nn::TransformerEncoderLayer>(c.d_model, c.heads, o));
  }
  register_module("blocks", blocks);
  register_module("ln_f",
                  std::make_shared<nn::LayerNorm>(Shape{c.d_model}, 1e-5, true, true, options));
  register_module("head", std::make_shared<nn::Linear>(c.d_model, c.vocab, false, options));
  causal_mask_ = nn::Transformer::generate_square_subsequent_mask(
      c.context, options.with_requires_grad(false));
}

Tensor TinyLM::forward(const Tensor& tokens) {
  FSDP_CHECK(tokens.dim() == 2 && tokens.size(1) <= config.context, ValueError,
             "TinyLM: expected int64 tokens [batch, time <= {}], got shape {}", config.context,
             shape_str(tokens.shape()));
  const std::int64_t t = tokens.size(1);
  Tensor pos = arange(t).unsqueeze(0);
  Tensor x = add(call_child("tok_emb", tokens), call_child("pos_emb", pos));
  Tensor mask = causal_mask_.narrow(0, 0, t).narrow(1, 0, t);
  const auto& blocks = child("blocks");
  for (const auto& [name, block] : traversal::unwrapped(*blocks).child_slots()) {
    nn::Args a({nn::Value(x)}, {{"src_mask", nn::Value(mask)}, {"is_causal", nn::Value(true)}});
    x = (*block)(a).tensor();
  }
  x = call_child("ln_f", x);
  return call_child("head", x);
}

Tensor lm_loss(TinyLM& model, const Tensor& window) {
  const std::int64_t t = window.size(1) - 1;
  Tensor inputs = window.narrow(1, 0, t);
  Tensor targets = window.narrow(1, 1, t).contiguous();
  Tensor logits = model.forward(inputs);
  return cross_entropy(logits.reshape({-1, model.config.vocab}), targets.reshape({-1}));
}

ByteCorpus ByteCorpus::from_files(const std::vector<std::string>& paths) {
  std::vector<std::uint8_t> bytes;
  for (const auto& p : paths) {
    std::ifstream in(p, std::ios::binary);
    FSDP_CHECK(in.good(), RuntimeError, "cannot read text file {}", p);
    bytes.insert(bytes.end(), std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return ByteCorpus(std::move(bytes));
}

Tensor ByteCorpus::sample(std::int64_t batch, std::int64_t context, std::size_t begin,
                          std::size_t end, Generator& gen) const {
  const std::size_t span = static_cast<std::size_t>(context) + 1;
  FSDP_CHECK(end <= bytes_.size() && end >= begin + span, ValueError,
             "corpus range [{}, {}) is shorter than one window of {} bytes", begin, end, span);
  Tensor out = empty({batch, context + 1}, DType::Int64);
  auto* p = out.data<std::int64_t>();
  const std::size_t starts = end - begin - span + 1;
  for (std::int64_t b = 0; b < batch; ++b) {
    std::size_t s = begin + static_cast<std::size_t>(gen.next_u64() % starts);
    for (std::size_t i = 0; i < span; ++i) *p++ = bytes_[s + i];
  }
  return out;
}

}  // namespace fsdp::examples
