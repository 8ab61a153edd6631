// transformers' GPT-2, Llama, Mistral, Qwen and Gemma (models/) under FSDP on 2 thread ranks, one
// unit per decoder block (the GradientCheckpointingLayer classes): the logits and, after an SGD
// step, the next logits equal the plain model's on the whole batch; a meta-built model materialised
// by FSDP with init_weights; activation checkpointing of the blocks; bfloat16 mixed precision. The
// blocks are called through their wrappers with the models' tuple-and-keyword calling convention.
#define BOOST_TEST_MODULE examples_models_fsdp
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "core/ops.h"
#include "core/optim/sgd.h"
#include "fsdp/fully_sharded_data_parallel.h"
#include "fsdp/summon_full_params.h"
#include "models/auto_model.h"
#include "models/load_weights.h"
#include "ops/checkpoint.h"
#include "ops/checkpoint_wrapper.h"
#include "policies/lambda_policy.h"
#include "tests/models/hf_fixture.h"
#include "tests/support/runtime_harness.h"

using namespace fsdp;
namespace bdata = boost::unit_test::data;

namespace {

std::shared_ptr<models::CausalLM> load(const std::string& name) {
  const std::string dir = testing::hf_fixture_dir(name);
  auto model = models::make_causal_lm(models::load_config(dir));
  models::load_safetensors_weights(*model, dir + "/model.safetensors");
  model->eval();  // no dropout: the ranks' and the reference's maths are the same
  return model;
}

// Logits before and after one SGD step (lr 0.5) on the mean loss over the rows of `ids`.
std::pair<Tensor, Tensor> train_step(nn::Module& model, const Tensor& ids) {
  optim::SGD sgd(model.parameters(), optim::SGDOptions{.lr = 0.5});
  const Tensor before = model(ids).tensor();
  const Tensor targets = cat({narrow(ids, 1, 1, ids.size(1) - 1), narrow(ids, 1, 0, 1)}, 1);
  models::causal_lm_loss(before, targets).backward();
  sgd.step();
  return {before.detach(), model(ids).tensor().detach()};
}

}  // namespace

BOOST_DATA_TEST_CASE(sharded_per_block_equals_the_plain_model,
                     bdata::make(testing::hf_fixture_models()), name) {
  const Tensor ids = testing::hf_expected(name).at("input_ids");  // [2, 9]
  auto reference = load(name);
  std::size_t blocks = 0;
  for (const auto& [path, m] : reference->named_modules())
    blocks += m->isinstance("GradientCheckpointingLayer");
  BOOST_TEST(blocks >= 2u);
  const auto [ref_before, ref_after] = train_step(*reference, ids);
  BOOST_TEST(max(abs(sub(ref_after, ref_before))).item() > 1e-2);  // the step moved the logits
  MixedPrecision bf16;
  bf16.param_dtype = DType::BFloat16;
  bf16.reduce_dtype = DType::BFloat16;
  testing::on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto sharded = FSDP::make(
        load(name), {.process_group = pg,
                     .auto_wrap_policy = policies::lambda_auto_wrap_policy([](nn::Module& m) {
                       return m.isinstance("GradientCheckpointingLayer");
                     })});
    std::size_t units = 0;
    for (const auto& [path, m] : sharded->named_modules())
      units += m->type_name() == "FullyShardedDataParallel";
    BOOST_TEST(units == 1 + blocks);  // the root and the blocks
    const std::int64_t r = pg->rank();
    const auto [before, after] = train_step(*sharded, narrow(ids, 0, r, 1));
    BOOST_TEST(testing::close(before, narrow(ref_before, 0, r, 1), 1e-5, 1e-5, "before") == "");
    BOOST_TEST(testing::close(after, narrow(ref_after, 0, r, 1), 1e-4, 1e-5, "after") == "");
  });
}

BOOST_AUTO_TEST_CASE(built_on_meta_and_materialised_by_fsdp_with_init_weights) {
  // Each rank builds the model on the meta device; FSDP gives each unit's modules storage and
  // calls init_weights on them one at a time: transformers' init (ones in the norms, the
  // padding row zero) and the rotary frequencies as the CPU-built model's.
  const auto config = models::load_config(testing::hf_fixture_dir("llama_gqa"));  // pad 0
  auto cpu = models::make_causal_lm(config);
  testing::on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto meta = models::make_causal_lm(config, TensorOptions(DType::Float32, kMeta));
    const auto norm_module = meta->get_submodule("model.layers.1.input_layernorm");
    const auto up_proj = meta->get_submodule("model.layers.0.mlp.up_proj");
    auto sharded =
        FSDP::make(meta, {.process_group = pg,
                          .auto_wrap_policy = policies::lambda_auto_wrap_policy([](nn::Module& m) {
                            return m.isinstance("GradientCheckpointingLayer");
                          }),
                          .param_init_fn = [meta](nn::Module& m) { meta->init_weights(m); }});
    BOOST_TEST(testing::close(meta->get_submodule("model.rotary_emb")->buffer("inv_freq"),
                              cpu->get_submodule("model.rotary_emb")->buffer("inv_freq"), 0, 0,
                              "inv_freq") == "");
    {
      SummonFullParams full(*sharded);
      const Tensor emb = meta->get_submodule("model.embed_tokens")->param("weight");
      BOOST_TEST(max(abs(select(emb, 0, 0))).item() == 0.0);
      BOOST_TEST(max(abs(emb)).item() > 0.0);
      const Tensor norm = norm_module->param("weight");
      BOOST_TEST(max(abs(add(norm, -1.0))).item() == 0.0);
      const Tensor w = up_proj->param("weight");  // N(0, initializer_range 0.2), not kaiming's
      BOOST_TEST(std::sqrt(mean(mul(w, w)).item()) == 0.2, boost::test_tools::tolerance(0.1));
    }
    const Tensor ids = testing::hf_expected("llama_gqa").at("input_ids");
    const Tensor logits = (*sharded)(narrow(ids, 0, pg->rank(), 1)).tensor();
    BOOST_TEST(logits.shape() == (Shape{1, 9, 113}));
  });
}

BOOST_DATA_TEST_CASE(activation_checkpointing_of_the_blocks_keeps_the_gradients,
                     bdata::make(std::vector<std::string>{"gpt2_tied", "llama_gqa",
                                                          "gemma3_sliding_rope", "gemma2_softcap"}),
                     name) {
  // checkpoint_activations(full / selective) over the decoder blocks, as finetune's
  // --checkpoint-activations: the loss and every gradient equal the plain model's.
  const Tensor ids = testing::hf_expected(name).at("input_ids");
  const auto grads = [&](const std::string& mode) {
    auto model = load(name);
    ops::checkpoint_activations(
        model, mode,
        nn::ClassSet{"GPT2Block", "LlamaDecoderLayer", "Gemma3DecoderLayer", "Gemma2DecoderLayer"});
    const Tensor targets = cat({narrow(ids, 1, 1, ids.size(1) - 1), narrow(ids, 1, 0, 1)}, 1);
    const Tensor loss = models::causal_lm_loss(model->forward(ids), targets);
    const std::int64_t recomputed = ops::checkpoint_recompute_count();
    loss.backward();
    BOOST_TEST((ops::checkpoint_recompute_count() > recomputed) == (mode != "none"));
    std::vector<Tensor> out = {loss.detach()};
    for (const auto& [fqn, p] : model->named_parameters()) out.push_back(p.grad());
    return out;
  };
  const auto plain = grads("none");
  for (const std::string mode : {"full", "selective"}) {
    const auto checkpointed = grads(mode);
    BOOST_REQUIRE(checkpointed.size() == plain.size());
    for (std::size_t i = 0; i < plain.size(); ++i)
      BOOST_TEST(testing::close(checkpointed[i], plain[i], 1e-6, 1e-7, mode) == "");
  }
}

BOOST_DATA_TEST_CASE(bfloat16_mixed_precision_stays_near_float32,
                     bdata::make(std::vector<std::string>{"gpt2_tied", "llama_gqa",
                                                          "gemma3_sliding_rope", "gemma2_softcap"}),
                     name) {
  // FSDP's MixedPrecision(param_dtype=reduce_dtype=bfloat16) per block: the logits within
  // bfloat16's rounding of the float32 model's, and a training step runs.
  const Tensor ids = testing::hf_expected(name).at("input_ids");
  const Tensor reference = load(name)->forward(ids).detach();
  MixedPrecision bf16;
  bf16.param_dtype = DType::BFloat16;
  bf16.reduce_dtype = DType::BFloat16;
  testing::on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto sharded = FSDP::make(
        load(name), {.process_group = pg,
                     .auto_wrap_policy = policies::lambda_auto_wrap_policy(
                         [](nn::Module& m) { return m.isinstance("GradientCheckpointingLayer"); }),
                     .mixed_precision = bf16});
    const Tensor rows = narrow(ids, 0, pg->rank(), 1);
    const auto [before, after] = train_step(*sharded, rows);
    BOOST_TEST(before.dtype() == DType::BFloat16);  // computed in bfloat16
    const Tensor want = narrow(reference, 0, pg->rank(), 1);
    BOOST_TEST(max(abs(sub(to_dtype(before, DType::Float32), want))).item() <=
               0.1 * max(abs(want)).item());
    BOOST_TEST(max(abs(sub(to_dtype(after, DType::Float32), want))).item() > 0);
  });
}
