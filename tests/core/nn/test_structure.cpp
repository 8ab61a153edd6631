// Structure against PyTorch (nn_structure.json): parameter and buffer names, shapes and order,
// state_dict keys, module classes, reprs, class ancestry; meta construction; deep copies;
// containers; very deep trees.
#include <boost/test/unit_test.hpp>
#include <chrono>

#include "core/fqn.h"
#include "core/nn/nn.h"
#include "tests/core/nn/nn_models.h"
#include "tests/support/fixture.h"

using namespace fsdp;
using namespace fsdp::nn;
using fsdp::testing::Fixture;

namespace {
const Fixture& structure() {
  static const Fixture f("nn_structure.json");
  return f;
}

const char* const kCases[] = {"linear",
                              "linear_nobias",
                              "embedding",
                              "layer_norm",
                              "bn1d",
                              "bn2d_untracked",
                              "sync_bn",
                              "mha",
                              "mha_kdim_bias_kv",
                              "encoder_layer",
                              "decoder_layer",
                              "transformer_small",
                              "transformer_default",
                              "containers"};

nlohmann::json names_shapes(const std::vector<std::pair<std::string, Tensor>>& items) {
  auto out = nlohmann::json::array();
  for (const auto& [n, t] : items) out.push_back({n, t.shape(), dtype_name(t.dtype())});
  return out;
}
}  // namespace

BOOST_AUTO_TEST_CASE(names_shapes_and_order_match_torch) {
  for (const char* name : kCases) {
    BOOST_TEST_CONTEXT(name) {
      // Built on meta: the structure does not depend on the device, and this is how big models
      // are planned.
      for (Device dev : {kCPU, kMeta}) {
        if (std::string(name) == "transformer_default" && dev == kCPU) continue;
        ModulePtr m = nn::testing::structure_model(name, TensorOptions(DType::Float32, dev));
        BOOST_TEST(names_shapes(m->named_parameters()) == structure().value(name, "parameters"));
        BOOST_TEST(names_shapes(m->named_buffers()) == structure().value(name, "buffers"));
        auto keys = nlohmann::json::array();
        for (auto& [k, t] : m->state_dict()) keys.push_back(k);
        BOOST_TEST(keys == structure().value(name, "state_dict"));
        auto modules = nlohmann::json::array();
        for (auto& [n, mod] : m->named_modules()) modules.push_back({n, mod->type_name()});
        BOOST_TEST(modules == structure().value(name, "modules"));
        BOOST_TEST(m->num_parameters() ==
                   structure().value(name, "num_parameters").get<std::int64_t>());
        if (structure().has(name, "repr"))
          BOOST_TEST(m->repr() == structure().value(name, "repr").get<std::string>());
        for (auto& p : m->parameters()) BOOST_TEST(p.device() == dev);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(class_ancestry_matches_torch_mro) {
  const auto& mro = structure().value("mro", "BatchNorm1d");
  BOOST_TEST(BatchNorm1d::static_class().mro() == mro.get<std::vector<std::string>>());
  auto check = [&](const ModuleClass& cls) {
    BOOST_TEST(cls.mro() == structure().value("mro", cls.name()).get<std::vector<std::string>>());
  };
  check(BatchNorm2d::static_class());
  check(BatchNorm3d::static_class());
  check(SyncBatchNorm::static_class());
  check(Dropout::static_class());
  check(Linear::static_class());
  check(NonDynamicallyQuantizableLinear::static_class());
  check(MultiheadAttention::static_class());
  check(LayerNorm::static_class());
  check(Sequential::static_class());
  // isinstance semantics for policies: _BatchNorm matches every batch norm, Linear matches
  // out_proj's class, and a class set matches subclasses.
  auto sync = std::make_shared<SyncBatchNorm>(3);
  BOOST_TEST(sync->isinstance("_BatchNorm"));
  BOOST_TEST(sync->isinstance("_NormBase"));
  BOOST_TEST(!sync->isinstance("BatchNorm1d"));
  auto mha = std::make_shared<MultiheadAttention>(4, 2);
  BOOST_TEST(mha->child("out_proj")->isinstance(ClassSet::of<Linear>()));
  BOOST_TEST(mha->child("out_proj")->type_name() == "NonDynamicallyQuantizableLinear");
  BOOST_TEST(ClassSet::of<BatchNormBase>().matches(BatchNorm3d::static_class()));
  BOOST_TEST(!ClassSet::of<BatchNormBase>().matches(LayerNorm::static_class()));
}

BOOST_AUTO_TEST_CASE(huge_model_builds_on_meta_quickly) {
  // A Llama-70B-sized stack of transformer layers: 80 layers of d_model 8192 with feed-forward
  // 28672 (about 70 billion parameters) and no memory for them.
  auto t0 = std::chrono::steady_clock::now();
  TransformerLayerOptions o{
      .dim_feedforward = 28672, .dropout = 0.0, .tensor = TensorOptions(DType::BFloat16, kMeta)};
  auto layer = std::make_shared<TransformerEncoderLayer>(8192, 64, o);
  auto enc = std::make_shared<TransformerEncoder>(layer, 80);
  auto emb = std::make_shared<Embedding>(128256, 8192, std::nullopt,
                                         TensorOptions(DType::BFloat16, kMeta));
  auto model = std::make_shared<Sequential>(std::vector<ModulePtr>{emb, enc});
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BOOST_TEST(model->num_parameters() > 60'000'000'000LL);
  for (auto& p : model->parameters()) BOOST_TEST_REQUIRE(p.is_meta());
  BOOST_TEST_MESSAGE("70B meta build: " << seconds << " s");
}

BOOST_AUTO_TEST_CASE(encoder_layers_are_identical_deep_copies) {
  TransformerLayerOptions o{.dim_feedforward = 16};
  auto layer = std::make_shared<TransformerEncoderLayer>(8, 2, o);
  layer->eval();
  auto enc = std::make_shared<TransformerEncoder>(layer, 3);
  auto layers = enc->layers();
  BOOST_TEST(layers->size() == 3u);
  auto ref = layer->state_dict();
  for (std::size_t i = 0; i < 3; ++i) {
    auto& copy = (*layers)[static_cast<std::int64_t>(i)];
    BOOST_TEST(copy.get() != layer.get());
    BOOST_TEST(!copy->is_training());
    auto sd = copy->state_dict();
    BOOST_TEST_REQUIRE(sd.size() == ref.size());
    for (std::size_t k = 0; k < sd.size(); ++k) {
      BOOST_TEST(sd[k].first == ref[k].first);
      BOOST_TEST(!sd[k].second.is_same(ref[k].second));  // independent storage
      BOOST_TEST(sd[k].second.storage() != ref[k].second.storage());
      BOOST_TEST(sd[k].second.to_vector() == ref[k].second.to_vector());
    }
    for (auto& p : copy->parameters()) BOOST_TEST(p.requires_grad());
  }
  // The original layer is not a child of the encoder.
  for (auto& m : enc->modules()) BOOST_TEST(m.get() != layer.get());
}

BOOST_AUTO_TEST_CASE(deep_copy_keeps_tied_tensors_tied) {
  auto a = std::make_shared<Linear>(3, 3);
  auto b = std::make_shared<Linear>(3, 3);
  b->set_parameter("weight", a->param("weight"));
  auto seq = std::make_shared<Sequential>(std::initializer_list<ModulePtr>{a, b});
  auto copy = deep_copy(*seq);
  BOOST_TEST(copy->type_name() == "Sequential");
  auto c0 = copy->get_submodule("0"), c1 = copy->get_submodule("1");
  BOOST_TEST(c0->param("weight").is_same(c1->param("weight")));
  BOOST_TEST(!c0->param("weight").is_same(a->param("weight")));
  BOOST_TEST(c0->param("bias").to_vector() == a->param("bias").to_vector());
}

BOOST_AUTO_TEST_CASE(sequential_module_list_module_dict) {
  auto l1 = std::make_shared<Linear>(2, 3);
  auto l2 = std::make_shared<ReLU>();
  Sequential seq({l1});
  seq.push_back(l2);
  BOOST_TEST(seq.size() == 2u);
  BOOST_TEST(seq[0].get() == l1.get());
  BOOST_TEST(seq[-1].get() == l2.get());
  BOOST_CHECK_THROW(seq[2], IndexError);
  BOOST_CHECK_THROW(seq[-3], IndexError);
  int n = 0;
  for (const auto& m : seq) n += m != nullptr;
  BOOST_TEST(n == 2);

  ModuleList list({std::make_shared<Identity>(), std::make_shared<ReLU>()});
  list.insert(1, std::make_shared<GELU>());
  list.insert(-1, std::make_shared<Dropout>());
  list.extend({std::make_shared<Linear>(1, 1)});
  std::vector<std::string> types;
  for (const auto& m : list) types.push_back(m->type_name());
  BOOST_TEST((types == std::vector<std::string>{"Identity", "GELU", "Dropout", "ReLU", "Linear"}));
  BOOST_TEST(list.child_slots()[4].first == "4");
  list.set(-1, std::make_shared<Identity>());
  BOOST_TEST(list[4]->type_name() == "Identity");
  try {
    list(Args{Value(zeros({1}))});
    BOOST_FAIL("ModuleList has no forward");
  } catch (const NotImplementedError& e) {
    BOOST_TEST(std::string(e.what()) ==
               "Module [ModuleList] is missing the required \"forward\" function");
  }

  ModuleDict dict({{"b", std::make_shared<ReLU>()}, {"a", std::make_shared<GELU>()}});
  dict.insert("b", std::make_shared<Identity>());
  dict.insert("c", std::make_shared<Dropout>());
  BOOST_TEST((dict.keys() == std::vector<std::string>{"b", "a", "c"}));
  BOOST_TEST(dict["b"]->type_name() == "Identity");
  BOOST_TEST(dict.contains("c"));
  BOOST_TEST(!dict.contains("d"));
  BOOST_CHECK_THROW(dict["d"], KeyError);
}

namespace {
ModulePtr nested_chain(int depth) {
  ModulePtr m = std::make_shared<Linear>(2, 2);
  for (int i = 0; i < depth; ++i) m = std::make_shared<Sequential>(std::vector<ModulePtr>{m});
  return m;
}
}  // namespace

BOOST_AUTO_TEST_CASE(hundred_thousand_nested_sequentials) {
  // Built, traversed and freed without recursion. (The fully qualified names of such a chain
  // take depth^2 characters in all -- 10 GB at this depth, in PyTorch too -- so the named
  // traversals are checked on a shallower chain below.)
  const int depth = 100000;
  ModulePtr m = nested_chain(depth);
  int visited = 0, linears = 0;
  m->apply([&](Module& mod) {
    ++visited;
    linears += mod.isinstance("Linear");
  });
  BOOST_TEST(visited == depth + 1);
  BOOST_TEST(linears == 1);
  // Forward runs through every level (recursively: each Sequential calls its child), so only
  // time the structure, not a 100 000-deep call.
  ModulePtr deepest = m;
  for (int i = 0; i < depth; ++i) deepest = deepest->child("0");
  BOOST_TEST(deepest->type_name() == "Linear");
  m.reset();  // freed iteratively
}

BOOST_AUTO_TEST_CASE(named_traversals_of_a_deep_chain) {
  const int depth = 5000;
  ModulePtr m = nested_chain(depth);
  auto mods = m->named_modules();
  BOOST_TEST(mods.size() == static_cast<std::size_t>(depth + 1));
  auto params = m->named_parameters();
  BOOST_TEST_REQUIRE(params.size() == 2u);
  std::string expected;
  for (int i = 0; i < depth; ++i) expected += "0.";
  BOOST_TEST(params[0].first == expected + "weight");
  BOOST_TEST(params[1].first == expected + "bias");
  BOOST_TEST(mods.back().first + ".weight" == params[0].first);
  BOOST_TEST(m->state_dict().size() == 2u);
  Tensor x = from_vector(std::vector<double>{1.0, 2.0}, {1, 2});
  auto direct = std::dynamic_pointer_cast<Linear>(mods.back().second)->forward(x);
  BOOST_TEST((*m)(x).tensor().to_vector() == direct.to_vector());
}

BOOST_AUTO_TEST_CASE(constructor_errors) {
  BOOST_CHECK_THROW(Dropout(1.5), ValueError);
  try {
    Dropout d(-0.1);
  } catch (const ValueError& e) {
    BOOST_TEST(std::string(e.what()) ==
               "dropout probability has to be between 0 and 1, but got -0.1");
  }
  BOOST_CHECK_THROW(MultiheadAttention(10, 3), AssertionError);
  BOOST_CHECK_THROW(Embedding(5, 2, 5), AssertionError);
  BOOST_CHECK_THROW(Embedding(5, 2, -6), AssertionError);
  BOOST_TEST(Embedding(5, 2, -1).padding_idx.value() == 4);
  BOOST_CHECK_THROW(TransformerEncoderLayer(8, 2, TransformerLayerOptions{.activation = "tanh"}),
                    RuntimeError);
  BOOST_CHECK_THROW(GELU("fast"), RuntimeError);
}

// The one FQN join (core/fqn.h) that named_modules, state dicts, the tree tables and FSDP use.
BOOST_AUTO_TEST_CASE(join_fqn_joins_prefix_and_name) {
  BOOST_TEST(join_fqn("", "weight") == "weight");
  BOOST_TEST(join_fqn("layers.0", "") == "layers.0");
  BOOST_TEST(join_fqn("layers.0", "attn") == "layers.0.attn");
  BOOST_TEST(join_fqn("", "") == "");
  const std::string a = "attn", b = "0", c = "layers";
  BOOST_TEST(join_fqn_leaf_first({&a, &b, &c}) == "layers.0.attn");
  BOOST_TEST(join_fqn_leaf_first({&a}, "_fsdp_wrapped_module") == "_fsdp_wrapped_module.attn");
  BOOST_TEST(join_fqn_leaf_first({}, "root") == "root");
  BOOST_TEST(join_fqn_leaf_first({}) == "");
}
