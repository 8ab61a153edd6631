// Behaviour beyond single forwards: training runs whose loss falls, thread safety (two
// threads training independent models give the results of running them one after the other),
// batch-norm running statistics, input checks, meta-device forwards, module-call conventions.
#include <boost/test/unit_test.hpp>
#include <thread>

#include "core/autograd.h"
#include "core/nn/nn.h"
#include "core/ops.h"
#include "core/optim/optim.h"
#include "tests/support/error_message.h"

using namespace fsdp;
using namespace fsdp::nn;

namespace {
struct RunResult {
  std::vector<double> losses;
  std::vector<std::vector<double>> params;
};

// A small transformer-encoder classifier trained with AdamW, dropout on (uses the thread's
// generator), batch norm in the head.
RunResult train_classifier(std::uint64_t seed, int steps) {
  manual_seed(seed);
  TransformerLayerOptions lo{.dim_feedforward = 32, .dropout = 0.1, .batch_first = true};
  auto model = std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<TransformerEncoder>(std::make_shared<TransformerEncoderLayer>(16, 2, lo), 2,
                                           std::make_shared<LayerNorm>(16))});
  auto emb = std::make_shared<Embedding>(20, 16);
  auto head = std::make_shared<Sequential>(
      std::vector<ModulePtr>{std::make_shared<BatchNorm1d>(16), std::make_shared<Linear>(16, 3)});
  std::vector<Tensor> params = model->parameters();
  for (auto& p : emb->parameters()) params.push_back(p);
  for (auto& p : head->parameters()) params.push_back(p);
  optim::AdamW opt(params, optim::AdamWOptions(optim::AdamOptions{.lr = 1e-2}));
  // Class = token 0 of each sequence modulo 3: learnable from the first position.
  Tensor tokens = randint(0, 20, {8, 5});
  std::vector<std::int64_t> labels;
  for (auto t : tokens.to_int_vector()) labels.push_back(t);
  std::vector<std::int64_t> y;
  for (int b = 0; b < 8; ++b) y.push_back(labels[b * 5] % 3);
  Tensor target = from_vector(y, {8});
  RunResult r;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    Tensor h = (*model)(emb->forward(tokens)).tensor();  // (8, 5, 16)
    Tensor logits = head->forward(select(h, 1, 0));
    Tensor loss = cross_entropy(logits, target);
    loss.backward();
    opt.step();
    r.losses.push_back(loss.item());
  }
  for (auto& p : params) r.params.push_back(p.to_vector());
  return r;
}
}  // namespace

BOOST_AUTO_TEST_CASE(regression_loss_falls_with_sgd) {
  manual_seed(0);
  auto model = std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<Linear>(4, 32), std::make_shared<GELU>(), std::make_shared<Linear>(32, 1)});
  optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
  Tensor x = randn({64, 4});
  Tensor w = from_vector(std::vector<double>{1.0, -2.0, 0.5, 3.0}, {4, 1});
  Tensor y = matmul(x, w);
  double first = 0, last = 0;
  for (int s = 0; s < 200; ++s) {
    opt.zero_grad();
    Tensor loss = mse_loss(model->forward(x), y);
    loss.backward();
    opt.step();
    if (s == 0) first = loss.item();
    last = loss.item();
  }
  BOOST_TEST_MESSAGE("mse " << first << " -> " << last);
  BOOST_TEST(last < 0.02 * first);
}

BOOST_AUTO_TEST_CASE(classifier_loss_falls_with_adamw) {
  RunResult r = train_classifier(5, 40);
  BOOST_TEST_MESSAGE("cross entropy " << r.losses.front() << " -> " << r.losses.back());
  BOOST_TEST(r.losses.back() < 0.3 * r.losses.front());
}

BOOST_AUTO_TEST_CASE(two_threads_train_like_one_after_the_other) {
  RunResult a = train_classifier(1, 6);
  RunResult b = train_classifier(2, 6);
  BOOST_TEST(a.losses != b.losses);  // different seeds, different runs
  RunResult ta, tb;
  std::thread t1([&] { ta = train_classifier(1, 6); });
  std::thread t2([&] { tb = train_classifier(2, 6); });
  t1.join();
  t2.join();
  BOOST_TEST(ta.losses == a.losses);
  BOOST_TEST(tb.losses == b.losses);
  BOOST_TEST((ta.params == a.params));
  BOOST_TEST((tb.params == b.params));
}

BOOST_AUTO_TEST_CASE(batch_norm_running_stats_and_checks) {
  auto bn = std::make_shared<BatchNorm1d>(2, 1e-5, 0.5);
  Tensor x = from_vector(std::vector<double>{1, 10, 3, 20, 5, 30}, {3, 2});
  bn->forward(x);
  // mean (3, 20), unbiased var (4, 100): running = 0.5 * old + 0.5 * batch.
  BOOST_TEST(std::abs(bn->buffer("running_mean").to_vector()[0] - 1.5) < 1e-6);
  BOOST_TEST(std::abs(bn->buffer("running_mean").to_vector()[1] - 10.0) < 1e-5);
  BOOST_TEST(std::abs(bn->buffer("running_var").to_vector()[0] - 2.5) < 1e-5);
  BOOST_TEST(std::abs(bn->buffer("running_var").to_vector()[1] - 50.5) < 1e-4);
  BOOST_TEST(bn->buffer("num_batches_tracked").item() == 1.0);
  bn->eval();
  bn->forward(x);
  BOOST_TEST(bn->buffer("num_batches_tracked").item() == 1.0);  // eval: untouched
  // momentum None: cumulative average over batches.
  auto cma = std::make_shared<BatchNorm1d>(1, 1e-5, std::nullopt);
  cma->forward(from_vector(std::vector<double>{0, 2}, {2, 1}));
  cma->forward(from_vector(std::vector<double>{4, 6}, {2, 1}));
  BOOST_TEST(std::abs(cma->buffer("running_mean").item() - 3.0) < 1e-6);
  BOOST_TEST(cma->buffer("num_batches_tracked").item() == 2.0);

  auto msg = [](auto&& f) { return fsdp::testing::error_message<ValueError>(f); };
  BOOST_TEST(msg([&] {
               bn->forward(zeros({2, 2, 2, 2}));
             }) == "expected 2D or 3D input (got 4D input)");
  BOOST_TEST(msg([] {
               BatchNorm2d(2).forward(zeros({2, 2, 2}));
             }) == "expected 4D input (got 3D input)");
  BOOST_TEST(msg([] {
               BatchNorm3d(2).forward(zeros({2, 2, 2, 2}));
             }) == "expected 5D input (got 4D input)");
  BOOST_TEST(msg([] { SyncBatchNorm(2).forward(zeros({2})); }) ==
             "expected at least 2D input (got 1D input)");
  // SyncBatchNorm in one process is BatchNorm.
  auto sync = std::make_shared<SyncBatchNorm>(2);
  auto plain = std::make_shared<BatchNorm2d>(2);
  Tensor img = randn({2, 2, 3, 3});
  BOOST_TEST(sync->forward(img).to_vector() == plain->forward(img).to_vector());
  BOOST_TEST(sync->buffer("running_var").to_vector() == plain->buffer("running_var").to_vector());
}

BOOST_AUTO_TEST_CASE(meta_forward_gives_shapes) {
  TensorOptions meta(DType::Float32, kMeta);
  auto layer = std::make_shared<TransformerEncoderLayer>(
      16, 4, TransformerLayerOptions{.dim_feedforward = 64, .dropout = 0.0, .tensor = meta});
  Tensor y = layer->forward(empty({7, 3, 16}, meta));
  BOOST_TEST(y.is_meta());
  BOOST_TEST((y.shape() == Shape{7, 3, 16}));
  Linear lin(16, 5, true, meta);
  BOOST_TEST((lin.forward(empty({2, 16}, meta)).shape() == Shape{2, 5}));
}

// torch's multi_head_attention_forward: with no key padding mask and need_weights=False, the
// is_causal hint replaces attn_mask (scaled_dot_product_attention's is_causal), so a mask that
// is not causal is ignored; asking for the weights brings the mask back.
BOOST_AUTO_TEST_CASE(the_is_causal_hint_stands_for_the_mask_as_in_torch) {
  manual_seed(3);
  auto mha = std::make_shared<MultiheadAttention>(8, 2);
  const std::int64_t L = 5;
  Tensor q = randn({L, 2, 8});
  const Tensor causal = Transformer::generate_square_subsequent_mask(L);
  auto run = [&](const Tensor& mask, bool hint, bool weights) {
    return (*mha)(Args({Value(q), Value(q), Value(q)}, {{"attn_mask", Value(mask)},
                                                        {"need_weights", Value(weights)},
                                                        {"is_causal", Value(hint)}}))[0]
        .tensor();
  };
  const std::vector<double> masked = run(causal, false, false).to_vector();
  const std::vector<double> hinted = run(causal, true, false).to_vector();
  BOOST_REQUIRE(masked.size() == hinted.size());
  for (std::size_t i = 0; i < masked.size(); ++i)
    BOOST_TEST(hinted[i] == masked[i], boost::test_tools::tolerance(1e-5));
  BOOST_TEST(run(zeros({L, L}), true, false).to_vector() == hinted);  // the hint wins
  BOOST_TEST(run(zeros({L, L}), true, true).to_vector() != hinted);   // weights: the mask
}

BOOST_AUTO_TEST_CASE(module_call_conventions) {
  manual_seed(2);
  auto mha = std::make_shared<MultiheadAttention>(8, 2);
  Tensor q = randn({3, 2, 8});
  Value out = (*mha)(Args({Value(q), Value(q), Value(q)}, {{"need_weights", Value(false)}}));
  BOOST_TEST(out.tuple().size() == 2u);
  BOOST_TEST(out[1].is_none());
  BOOST_TEST((out[0].tensor().shape() == Shape{3, 2, 8}));
  BOOST_CHECK_THROW((*mha)(Args({Value(q), Value(q), Value(q)}, {{"is_causal", Value(true)}})),
                    RuntimeError);
  // A wrapped child runs through its wrapper: replace out_proj by a Sequential holding it.
  auto before = mha->forward(q, q, q).first.to_vector();
  int calls = 0;
  auto wrapper = std::make_shared<Sequential>(std::vector<ModulePtr>{mha->child("out_proj")});
  wrapper->register_forward_hook([&](Module&, const Args&, const Value&) {
    ++calls;
    return std::optional<Value>();
  });
  mha->replace_child("out_proj", wrapper);
  BOOST_TEST(mha->forward(q, q, q).first.to_vector() == before);
  BOOST_TEST(calls == 1);
  // Dropout: identity in eval, scaled mask in training.
  Dropout drop(0.5);
  Tensor ones_in = ones({1000});
  auto v = drop.forward(ones_in).to_vector();
  int zeros_seen = 0;
  for (double e : v) {
    BOOST_TEST((e == 0.0 || e == 2.0));
    zeros_seen += e == 0.0;
  }
  BOOST_TEST(zeros_seen > 400);
  BOOST_TEST(zeros_seen < 600);
  drop.eval();
  BOOST_TEST(drop.forward(ones_in).to_vector() == ones_in.to_vector());
  // Causal mask.
  auto m = Transformer::generate_square_subsequent_mask(3).to_vector();
  const double inf = std::numeric_limits<double>::infinity();
  BOOST_TEST((m == std::vector<double>{0, -inf, -inf, 0, 0, -inf, 0, 0, 0}));
}
