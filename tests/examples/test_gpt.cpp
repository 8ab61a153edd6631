// examples/gpt and examples/gpt_data: the GPT's structure, initialisation and data order, and
// single-process training against PyTorch's per-step losses (tools/torch_reference/
// gen_gpt_fixtures.py -> tests/fixtures/gpt/: the same weights, data order and optimizers).
#define BOOST_TEST_MODULE examples_gpt
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <nlohmann/json.hpp>

#include "core/io/safetensors.h"
#include "core/memory.h"
#include "core/nn/nn.h"
#include "core/ops.h"
#include "core/optim/optim.h"
#include "core/random.h"
#include "examples/gpt.h"
#include "examples/gpt_data.h"
#include "tests/support/fixture.h"

using namespace fsdp;
using examples::GPT;
using examples::GPTConfig;

namespace {

const GPTConfig kTiny{.layers = 2, .d_model = 32, .heads = 4, .seq = 16, .vocab = 256};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  BOOST_REQUIRE_MESSAGE(in.good(), "cannot read " << path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string row_string(const Tensor& t, std::int64_t row) {
  std::string s;
  for (auto v : t.select(0, row).to_int_vector()) s.push_back(static_cast<char>(v));
  return s;
}

// Loads the fixture's initial weights by FQN; head.weight is tok_emb.weight's tensor.
void load_fixture_weights(GPT& gpt) {
  auto file = io::load_safetensors(testing::fixture_path("gpt/init.safetensors"));
  std::vector<std::pair<std::string, Tensor>> state = file.tensors;
  for (const auto& [name, t] : file.tensors)
    if (name == "tok_emb.weight") state.emplace_back("head.weight", t);
  gpt.load_state_dict(state, /*strict=*/true);
}

// A wrapper in a block's slot: counts its calls and runs the original block.
class CountingWrapper : public nn::Module {
 public:
  FSDP_MODULE_CLASS(CountingWrapper, nn::Module)
  explicit CountingWrapper(nn::ModulePtr inner) : Module(static_class()) {
    register_module("inner", std::move(inner));
  }
  nn::Value forward(const nn::Args& args) override {
    ++calls;
    return call_child("inner", args);
  }
  int calls = 0;
};

}  // namespace

BOOST_AUTO_TEST_CASE(fqns_shapes_and_tie) {
  auto gpt = std::make_shared<GPT>(kTiny);
  std::vector<std::string> want = {"tok_emb.weight", "pos_emb.weight"};
  for (int i = 0; i < 2; ++i)
    for (const char* p :
         {"self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
          "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight",
          "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"})
      want.push_back("blocks." + std::to_string(i) + "." + p);
  want.insert(want.end(), {"ln_f.weight", "ln_f.bias"});
  std::vector<std::string> names;
  std::map<std::string, Shape> shapes;
  for (const auto& [name, p] : gpt->named_parameters()) {
    names.push_back(name);
    shapes[name] = p.shape();
  }
  BOOST_TEST(names == want, boost::test_tools::per_element());
  BOOST_TEST(shapes["tok_emb.weight"] == (Shape{256, 32}));
  BOOST_TEST(shapes["pos_emb.weight"] == (Shape{16, 32}));
  BOOST_TEST(shapes["blocks.1.self_attn.in_proj_weight"] == (Shape{96, 32}));
  BOOST_TEST(shapes["blocks.1.self_attn.out_proj.weight"] == (Shape{32, 32}));
  BOOST_TEST(shapes["blocks.0.linear1.weight"] == (Shape{128, 32}));
  BOOST_TEST(shapes["blocks.0.linear2.weight"] == (Shape{32, 128}));
  BOOST_TEST(shapes["ln_f.bias"] == (Shape{32}));

  // The head holds the embedding's tensor object; the state dict lists it under both names.
  const Tensor& emb = gpt->child("tok_emb")->param("weight");
  BOOST_TEST(gpt->child("head")->param("weight").is_same(emb));
  const bool no_bias =
      !gpt->child("head")->has_parameter("bias") || !gpt->child("head")->param("bias").defined();
  BOOST_TEST(no_bias);
  std::vector<std::string> keys;
  for (const auto& [k, t] : gpt->state_dict()) keys.push_back(k);
  BOOST_TEST(keys.back() == "head.weight");
  BOOST_TEST(keys.size() == want.size() + 1);
  BOOST_TEST(gpt->num_parameters() == 256 * 32 + 16 * 32 + 2 * 12704 + 64);

  // The blocks are torch's pre-norm GELU encoder layers without dropout.
  auto block = gpt->child("blocks")->child_as<nn::TransformerEncoderLayer>("0");
  BOOST_REQUIRE(block != nullptr);
  BOOST_TEST(block->options.norm_first);
  BOOST_TEST(block->options.batch_first);
  BOOST_TEST(block->options.activation == "gelu");
  BOOST_TEST(block->options.dropout == 0.0);
  BOOST_TEST(block->options.dim_feedforward == 128);
}

BOOST_AUTO_TEST_CASE(meta_gpt_allocates_no_bytes) {
  auto stats = std::make_shared<MemoryStats>();
  std::shared_ptr<GPT> gpt;
  {
    MemoryStatsScope scope(stats);
    gpt = std::make_shared<GPT>(GPTConfig{}, TensorOptions(DType::Float32, kMeta));
    examples::gpt_init(*gpt);  // skips meta tensors
  }
  BOOST_TEST(stats->num_allocs.load() == 0);
  BOOST_TEST(stats->peak_bytes.load() == 0);
  for (const auto& [name, p] : gpt->named_parameters()) BOOST_TEST(p.is_meta(), name);
  BOOST_TEST(gpt->num_parameters() == 256 * 256 + 128 * 256 + 4 * 789760 + 512);
  BOOST_TEST(gpt->child("head")->param("weight").is_same(gpt->child("tok_emb")->param("weight")));
}

BOOST_AUTO_TEST_CASE(gpt2_initialisation) {
  auto gpt = std::make_shared<GPT>(kTiny);
  manual_seed(7);
  examples::gpt_init(*gpt);
  for (const auto& [name, p] : gpt->named_parameters()) {
    const auto v = p.to_vector();
    const bool is_norm = name.find("norm") != std::string::npos || name.rfind("ln_f", 0) == 0;
    if (is_norm && name.ends_with("weight")) {
      BOOST_TEST(v == std::vector<double>(v.size(), 1.0), name);
    } else if (name.ends_with("bias")) {
      BOOST_TEST(v == std::vector<double>(v.size(), 0.0), name);
    } else {
      double sum = 0, sq = 0;
      for (double x : v) sum += x, sq += x * x;
      const double n = static_cast<double>(v.size()), mean = sum / n;
      const double sd = std::sqrt(sq / n - mean * mean);
      BOOST_TEST(std::abs(mean) < 5 * 0.02 / std::sqrt(n), name << " mean " << mean);
      BOOST_TEST(std::abs(sd - 0.02) < 6 * 0.02 / std::sqrt(2 * n), name << " std " << sd);
    }
  }
  // The same seed draws the same weights; initialising one block leaves the rest alone.
  auto again = std::make_shared<GPT>(kTiny);
  manual_seed(7);
  examples::gpt_init(*again);
  const auto first = gpt->named_parameters(), second = again->named_parameters();
  for (std::size_t i = 0; i < first.size(); ++i)
    BOOST_TEST(first[i].second.to_vector() == second[i].second.to_vector(), first[i].first);
  manual_seed(8);
  examples::gpt_init(*again->get_submodule("blocks.1"));
  const auto third = again->named_parameters();
  for (std::size_t i = 0; i < first.size(); ++i) {
    const bool in_block = first[i].first.rfind("blocks.1.", 0) == 0;
    const bool is_weight =
        first[i].first.ends_with("_weight") ||
        (first[i].first.ends_with(".weight") && first[i].first.find("norm") == std::string::npos);
    const bool same = first[i].second.to_vector() == third[i].second.to_vector();
    BOOST_TEST(same == !(in_block && is_weight), first[i].first);
  }
}

BOOST_AUTO_TEST_CASE(forward_is_causal_and_runs_blocks_through_their_slots) {
  auto gpt = std::make_shared<GPT>(kTiny);
  manual_seed(1);
  examples::gpt_init(*gpt);
  Tensor idx = from_vector(std::vector<std::int64_t>{1, 5, 9, 200, 3, 3, 7, 255, 0, 42}, {2, 5});
  Tensor logits = gpt->forward(idx);
  BOOST_TEST(logits.shape() == (Shape{2, 5, 256}));
  // Changing token 2 of row 0 changes row 0's logits at positions >= 2 only.
  Tensor changed = idx.clone();
  changed.data<std::int64_t>()[2] = 100;
  Tensor other = gpt->forward(changed);
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t t = 0; t < 5; ++t) {
      const bool same = logits.select(0, b).select(0, t).to_vector() ==
                        other.select(0, b).select(0, t).to_vector();
      BOOST_TEST(same == (b == 1 || t < 2), "row " << b << " position " << t);
    }
  // A wrapper placed in a block's slot runs, and the result is unchanged.
  auto blocks = std::dynamic_pointer_cast<nn::ModuleList>(gpt->child("blocks"));
  auto wrapper = std::make_shared<CountingWrapper>((*blocks)[1]);
  blocks->set(1, wrapper);
  Tensor wrapped = (*gpt)(idx).tensor();
  BOOST_TEST(wrapper->calls == 1);
  BOOST_TEST(wrapped.to_vector() == logits.to_vector(), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(forward_rejects_bad_input) {
  auto gpt = std::make_shared<GPT>(kTiny, TensorOptions(DType::Float32, kMeta));
  auto expect = [&](const Tensor& idx, const std::string& msg) {
    try {
      gpt->forward(idx);
      BOOST_ERROR("no error for " << msg);
    } catch (const ValueError& e) {
      BOOST_TEST(std::string(e.what()) == msg);
    }
  };
  expect(zeros({2, 17}, DType::Int64),
         "GPT: expected int64 token ids [batch, time] with 1 <= time <= 16, got int64 [2, 17]");
  expect(zeros({2, 4}),
         "GPT: expected int64 token ids [batch, time] with 1 <= time <= 16, got float32 [2, 4]");
}

BOOST_AUTO_TEST_CASE(data_order_world_two_equals_world_one) {
  const std::string text = "abcdefghijklmnopqrstuvwxyz";  // 26 bytes: starts mod 26 - 4 - 1 = 21
  // Step 1, world 2, batch 2: G = 4, offsets (4 + j) * 4 mod 21 = 16, 20, 3, 7.
  auto r0 = examples::gpt_batch(text, 1, 2, 2, 0, 4);
  auto r1 = examples::gpt_batch(text, 1, 2, 2, 1, 4);
  BOOST_TEST(r0.inputs.shape() == (Shape{2, 4}));
  BOOST_TEST(r0.inputs.dtype() == DType::Int64);
  BOOST_TEST(row_string(r0.inputs, 0) == "qrst");
  BOOST_TEST(row_string(r0.targets, 0) == "rstu");
  BOOST_TEST(row_string(r0.inputs, 1) == "uvwx");
  BOOST_TEST(row_string(r0.targets, 1) == "vwxy");
  BOOST_TEST(row_string(r1.inputs, 0) == "defg");
  BOOST_TEST(row_string(r1.inputs, 1) == "hijk");
  BOOST_TEST(row_string(r1.targets, 1) == "ijkl");
  // One rank with the global batch sees rank 0's rows then rank 1's.
  auto all = examples::gpt_batch(text, 1, 4, 1, 0, 4);
  BOOST_TEST(all.inputs.to_int_vector() == cat({r0.inputs, r1.inputs}, 0).to_int_vector(),
             boost::test_tools::per_element());
  BOOST_TEST(all.targets.to_int_vector() == cat({r0.targets, r1.targets}, 0).to_int_vector(),
             boost::test_tools::per_element());
  // Step 0 starts at byte 0; bytes are unsigned.
  auto first = examples::gpt_batch(std::string("\xff\x01\x02\x03\x04\x05\x06", 7), 0, 1, 1, 0, 3);
  BOOST_TEST(first.inputs.to_int_vector() == (std::vector<std::int64_t>{255, 1, 2}),
             boost::test_tools::per_element());
  BOOST_TEST(first.targets.to_int_vector() == (std::vector<std::int64_t>{1, 2, 3}),
             boost::test_tools::per_element());
  // A file too short for one sequence and its target.
  try {
    examples::gpt_batch("abcde", 0, 1, 1, 0, 4);
    BOOST_ERROR("no error for a 5-byte file at seq 4");
  } catch (const ValueError& e) {
    BOOST_TEST(std::string(e.what()) ==
               "gpt_batch: the data has 5 bytes; sequences of 4 need more than seq + 1 = 5");
  }
  BOOST_CHECK_THROW(examples::gpt_batch(text, 0, 1, 2, 2, 4), ValueError);
}

// Single-process training from PyTorch's initial weights, on the same data order, with the
// same optimizer: every step's loss equals PyTorch's within 1e-5 relative.
BOOST_AUTO_TEST_CASE(training_matches_pytorch) {
  std::ifstream in(testing::fixture_path("gpt/losses.json"));
  const auto ref = nlohmann::json::parse(in);
  const auto& c = ref.at("config");
  const GPTConfig cfg{.layers = c.at("layers"),
                      .d_model = c.at("d_model"),
                      .heads = c.at("heads"),
                      .seq = c.at("seq"),
                      .vocab = 256};
  const std::int64_t batch = ref.at("batch");
  const std::string data = read_file(testing::fixture_path("gpt/data.txt"));
  for (const char* name : {"sgd", "adamw"}) {
    BOOST_TEST_CONTEXT("optimizer " << name) {
      const auto& run = ref.at("runs").at(name);
      auto gpt = std::make_shared<GPT>(cfg);
      load_fixture_weights(*gpt);
      std::unique_ptr<optim::Optimizer> opt;
      if (std::string(name) == "sgd") {
        opt =
            std::make_unique<optim::SGD>(gpt->parameters(), optim::SGDOptions{.lr = run.at("lr")});
      } else {
        optim::AdamWOptions o;
        o.lr = run.at("lr");
        opt = std::make_unique<optim::AdamW>(gpt->parameters(), o);
      }
      const auto losses = run.at("losses").get<std::vector<double>>();
      for (std::size_t step = 0; step < losses.size(); ++step) {
        auto b = examples::gpt_batch(data, static_cast<std::int64_t>(step), batch, 1, 0, cfg.seq);
        Tensor loss = examples::gpt_loss(*gpt, b.inputs, b.targets);
        opt->zero_grad();
        loss.backward();
        opt->step();
        const double got = loss.item(), want = losses[step];
        BOOST_TEST(
            std::abs(got - want) <= 1e-5 * std::abs(want),
            "step " << step << std::setprecision(9) << " loss " << got << " PyTorch " << want);
      }
    }
  }
}

// torch accepts the causal mask as floats (-inf above the diagonal) or as bools (true = masked);
// the blocks give the same output for both.
BOOST_AUTO_TEST_CASE(causal_bool_mask_equals_float_mask) {
  auto gpt = std::make_shared<GPT>(kTiny);
  manual_seed(2);
  examples::gpt_init(*gpt);
  auto& block = *gpt->child("blocks")->child("0");
  Tensor x = randn({2, 5, 32});
  Tensor float_mask = nn::Transformer::generate_square_subsequent_mask(5);
  Tensor bool_mask = lt(float_mask, zeros({5, 5}));  // true above the diagonal
  BOOST_TEST(bool_mask.dtype() == DType::Bool);
  Tensor a = block(nn::Args({nn::Value(x)}, {{"src_mask", nn::Value(float_mask)}})).tensor();
  Tensor b = block(nn::Args({nn::Value(x)}, {{"src_mask", nn::Value(bool_mask)}})).tensor();
  Tensor none = block(nn::Args({nn::Value(x)})).tensor();
  BOOST_TEST(a.to_vector() == b.to_vector(), boost::test_tools::per_element());
  BOOST_TEST(a.to_vector() != none.to_vector());
}

// The checkpoint train_gpt writes: named_parameters (the tied weight once, as tok_emb.weight)
// as safetensors; a fresh GPT loaded from it computes the same logits.
BOOST_AUTO_TEST_CASE(checkpoint_round_trip) {
  auto gpt = std::make_shared<GPT>(kTiny);
  manual_seed(4);
  examples::gpt_init(*gpt);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("fsdp_gpt_ckpt_" + std::to_string(::getpid()) + ".safetensors"))
                               .string();
  io::save_safetensors(path, gpt->named_parameters(), {{"format", "pt"}});
  auto file = io::load_safetensors(path);
  std::filesystem::remove(path);
  BOOST_TEST(file.tensors.size() == gpt->named_parameters().size());
  for (const auto& [name, t] : file.tensors) BOOST_TEST(name != "head.weight");
  auto fresh = std::make_shared<GPT>(kTiny);
  std::vector<std::pair<std::string, Tensor>> state = file.tensors;
  for (const auto& [name, t] : file.tensors)
    if (name == "tok_emb.weight") state.emplace_back("head.weight", t);
  fresh->load_state_dict(state);
  Tensor idx = from_vector(std::vector<std::int64_t>{3, 1, 4, 1, 5, 9, 2, 6}, {2, 4});
  BOOST_TEST(fresh->forward(idx).to_vector() == gpt->forward(idx).to_vector(),
             boost::test_tools::per_element());
}
