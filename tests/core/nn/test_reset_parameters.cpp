// reset_parameters and to_empty: a layer built on the meta device, materialised with
// to_empty(cpu) and re-initialised under a seed, equals the layer built eagerly under that seed.
#include <boost/test/unit_test.hpp>

#include "core/autograd.h"
#include "core/nn/nn.h"

using namespace fsdp;
using namespace fsdp::nn;

namespace {

const TensorOptions kMetaF32(DType::Float32, kMeta);

// Builds make(options) eagerly under `seed`, and on the meta device, then materialises the meta
// one (to_empty + reset_parameters through the base class) under the same seed; both state dicts
// must match exactly.
// With `recursive`, every module of the tree is reset children first (reset_parameters_
// recursively), as FSDP materialises a unit; otherwise only the layer's own reset_parameters.
template <typename Make>
void check_meta_init_matches_eager(Make make, std::uint64_t seed, bool recursive = false) {
  manual_seed(seed);
  ModulePtr eager = make(TensorOptions());
  ModulePtr lazy = make(kMetaF32);
  for (const auto& [name, t] : lazy->state_dict()) BOOST_TEST(t.is_meta(), name);
  lazy->to_empty(kCPU);
  manual_seed(seed);
  Module& base = *lazy;
  if (recursive)
    reset_parameters_recursively(base);
  else
    base.reset_parameters();
  auto expected = eager->state_dict();
  auto got = lazy->state_dict();
  BOOST_REQUIRE(got.size() == expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    BOOST_TEST(got[i].first == expected[i].first);
    BOOST_TEST(got[i].second.device().is_cpu(), got[i].first);
    BOOST_TEST(got[i].second.to_vector() == expected[i].second.to_vector(), got[i].first);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(reset_parameters)

BOOST_AUTO_TEST_CASE(linear_from_meta_equals_eager) {
  check_meta_init_matches_eager(
      [](TensorOptions o) { return std::make_shared<Linear>(7, 5, true, o); }, 11);
  check_meta_init_matches_eager(
      [](TensorOptions o) { return std::make_shared<Linear>(4, 3, false, o); }, 12);
}

BOOST_AUTO_TEST_CASE(embedding_from_meta_equals_eager) {
  check_meta_init_matches_eager(
      [](TensorOptions o) { return std::make_shared<Embedding>(10, 4, std::nullopt, o); }, 21);
  // padding_idx's row is zeroed again.
  check_meta_init_matches_eager(
      [](TensorOptions o) { return std::make_shared<Embedding>(6, 3, 2, o); }, 22);
}

BOOST_AUTO_TEST_CASE(layer_norm_and_batch_norm_from_meta_equal_eager) {
  check_meta_init_matches_eager(
      [](TensorOptions o) { return std::make_shared<LayerNorm>(6, 1e-5, true, true, o); }, 31);
  check_meta_init_matches_eager(
      [](TensorOptions o) {
        BatchNormOptions bo;
        bo.tensor = o;
        return std::make_shared<BatchNorm1d>(4, bo);
      },
      32);
}

BOOST_AUTO_TEST_CASE(multihead_attention_from_meta_equals_eager) {
  // out_proj is a Linear of its own, reset before the attention's in_proj as it is built first.
  check_meta_init_matches_eager(
      [](TensorOptions o) { return std::make_shared<MultiheadAttention>(8, 2, 0.0, true, o); }, 41,
      true);
  check_meta_init_matches_eager(
      [](TensorOptions o) {
        MultiheadAttentionOptions mo;
        mo.add_bias_kv = true;
        mo.kdim = 3;
        mo.vdim = 5;
        mo.tensor = o;
        return std::make_shared<MultiheadAttention>(6, 3, mo);
      },
      42, true);
}

BOOST_AUTO_TEST_CASE(multihead_attention_reset_is_torchs_own_reset) {
  // torch's _reset_parameters: in_proj and bias_k/v redrawn, both biases zero, out_proj's weight
  // left to out_proj.
  MultiheadAttention mha(4, 2);
  auto out_proj = mha.child("out_proj");
  {
    autograd::NoGradGuard no_grad;
    Tensor(out_proj->param("weight")).fill_(3.0);
    Tensor(out_proj->param("bias")).fill_(3.0);
    Tensor(mha.param("in_proj_bias")).fill_(3.0);
  }
  auto in_proj = mha.param("in_proj_weight").to_vector();
  mha.reset_parameters();
  BOOST_TEST(out_proj->param("weight").to_vector() == std::vector<double>(16, 3.0));
  BOOST_TEST(out_proj->param("bias").to_vector() == std::vector<double>(4, 0.0));
  BOOST_TEST(mha.param("in_proj_bias").to_vector() == std::vector<double>(12, 0.0));
  BOOST_TEST(mha.param("in_proj_weight").to_vector() != in_proj);
}

BOOST_AUTO_TEST_CASE(transformer_encoder_layer_from_meta_equals_eager) {
  check_meta_init_matches_eager(
      [](TensorOptions o) {
        TransformerLayerOptions lo;
        lo.dim_feedforward = 16;
        lo.dropout = 0.0;
        lo.norm_first = true;
        lo.batch_first = true;
        lo.tensor = o;
        return std::make_shared<TransformerEncoderLayer>(8, 2, lo);
      },
      51, true);
}

BOOST_AUTO_TEST_CASE(reset_parameters_reinitialises_a_used_layer) {
  manual_seed(5);
  Linear fresh(3, 2);
  manual_seed(5);
  Linear used(3, 2);
  {
    autograd::NoGradGuard no_grad;
    Tensor(used.param("weight")).fill_(9.0);
    Tensor(used.param("bias")).fill_(9.0);
  }
  const TensorImpl* weight = used.param("weight").impl();
  manual_seed(5);
  used.reset_parameters();
  BOOST_TEST(used.param("weight").impl() == weight);
  BOOST_TEST(used.param("weight").to_vector() == fresh.param("weight").to_vector());
  BOOST_TEST(used.param("bias").to_vector() == fresh.param("bias").to_vector());

  // BatchNorm also resets its running statistics.
  BatchNorm1d bn(2);
  {
    autograd::NoGradGuard no_grad;
    Tensor(bn.buffer("running_mean")).fill_(3.0);
    Tensor(bn.buffer("num_batches_tracked")).fill_(4.0);
    Tensor(bn.param("weight")).fill_(2.0);
  }
  bn.reset_parameters();
  BOOST_TEST(bn.buffer("running_mean").to_vector() == (std::vector<double>{0, 0}));
  BOOST_TEST(bn.buffer("num_batches_tracked").item() == 0.0);
  BOOST_TEST(bn.param("weight").to_vector() == (std::vector<double>{1, 1}));
}

BOOST_AUTO_TEST_CASE(modules_without_parameters_reset_nothing) {
  auto lin = std::make_shared<Linear>(2, 2);
  auto seq = std::make_shared<Sequential>(std::vector<ModulePtr>{lin});
  auto before = lin->param("weight").to_vector();
  seq->reset_parameters();  // the default: this module's own parameters only (it has none)
  BOOST_TEST(lin->param("weight").to_vector() == before);
}

BOOST_AUTO_TEST_SUITE_END()
