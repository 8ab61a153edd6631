// The intra-op pool (core/parallel.h): parallel_for covers its range once, runs nested and
// concurrent calls correctly, and the kernels that split across it give the same bits as on one
// thread (their chunks never change what is summed in what order).
#include <algorithm>
#include <atomic>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <thread>
#include <vector>

#include "core/autograd.h"
#include "core/nn/nn.h"
#include "core/ops.h"
#include "core/optim/optim.h"
#include "core/parallel.h"

namespace fsdp::testing {
namespace {

// Restores one thread whatever a test does.
struct Threads {
  explicit Threads(int n) { set_num_threads(n); }
  ~Threads() { set_num_threads(1); }
};

// One training step of a transformer layer (layer norm, attention with a causal mask, GELU,
// AdamW): the loss, the gradients and the updated parameters, as doubles.
std::vector<std::vector<double>> training_step(int threads) {
  Threads t(threads);
  manual_seed(5);
  nn::TransformerLayerOptions o;
  o.dim_feedforward = 256;
  o.dropout = 0.0;
  o.activation = "gelu";
  o.batch_first = true;
  o.norm_first = true;
  auto layer = std::make_shared<nn::TransformerEncoderLayer>(64, 4, o);
  optim::AdamW opt(layer->parameters(), optim::AdamWOptions{});
  Tensor x = randn({8, 128, 64});
  Tensor mask = nn::Transformer::generate_square_subsequent_mask(128);
  Tensor y = layer->forward(x, nn::EncoderArgs{.mask = mask, .is_causal = true});
  Tensor loss = sum(mul(y, y));
  loss.backward();
  std::vector<std::vector<double>> out{loss.to_vector()};
  for (const auto& p : layer->parameters()) out.push_back(p.grad().to_vector());
  opt.step();
  for (const auto& p : layer->parameters()) out.push_back(p.to_vector());
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(intra_op_parallel)

BOOST_AUTO_TEST_CASE(parallel_for_covers_the_range_once, *boost::unit_test::timeout(60)) {
  Threads t(2);
  BOOST_TEST(get_num_threads() == 2);
  for (std::int64_t n : {0, 1, 5, 100000}) {
    std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
    parallel_for(0, n, 1000, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) ++hits[static_cast<std::size_t>(i)];
    });
    bool once = true;
    for (auto& h : hits) once = once && h.load() == 1;
    BOOST_TEST(once, "n = " << n);
  }
}

BOOST_AUTO_TEST_CASE(nested_and_concurrent_calls_run_serially_and_finish,
                     *boost::unit_test::timeout(60)) {
  Threads t(2);
  std::atomic<std::int64_t> total{0};
  parallel_for(0, 4, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i)
      parallel_for(0, 1000, 1, [&](std::int64_t b2, std::int64_t e2) { total += e2 - b2; });
  });
  BOOST_TEST(total.load() == 4000);
  // Two threads (ranks as threads) calling at once: one gets the pool, the other runs serially.
  std::atomic<std::int64_t> sum{0};
  auto work = [&] {
    for (int k = 0; k < 200; ++k)
      parallel_for(0, 50000, 1000, [&](std::int64_t b, std::int64_t e) { sum += e - b; });
  };
  std::thread a(work), b(work);
  a.join();
  b.join();
  BOOST_TEST(sum.load() == 2 * 200 * 50000);
}

BOOST_AUTO_TEST_CASE(a_training_step_on_two_threads_equals_one_thread_bit_for_bit) {
  const auto one = training_step(1), two = training_step(2);
  BOOST_REQUIRE_EQUAL(one.size(), two.size());
  for (std::size_t i = 0; i < one.size(); ++i) BOOST_TEST(one[i] == two[i], "tensor " << i);
}

// A batch of products small enough that OpenBLAS runs each on the calling thread is split across
// the pool (linalg.cpp): every product lands in its own slot, equal to the one-thread result and
// to a plain triple loop, including a transposed operand and a batch not divisible by the chunks.
BOOST_AUTO_TEST_CASE(bmm_of_small_products_splits_the_batch_and_keeps_every_product) {
  manual_seed(11);
  const Tensor a = randn({37, 24, 16});
  const Tensor b = transpose(randn({37, 20, 16}), 1, 2);  // (37, 16, 20), column-major products
  Tensor one, two;
  {
    Threads t(1);
    one = bmm(a, b);
  }
  {
    Threads t(2);
    two = bmm(a, b);
  }
  BOOST_TEST(one.to_vector() == two.to_vector());
  const auto av = a.to_vector(), bv = b.contiguous().to_vector(), got = two.to_vector();
  double worst = 0;
  for (int i = 0; i < 37; ++i)
    for (int r = 0; r < 24; ++r)
      for (int c = 0; c < 20; ++c) {
        double ref = 0;
        for (int k = 0; k < 16; ++k) ref += av[(i * 24 + r) * 16 + k] * bv[(i * 16 + k) * 20 + c];
        worst = std::max(worst, std::abs(ref - got[(i * 24 + r) * 20 + c]));
      }
  BOOST_TEST(worst < 1e-4);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace fsdp::testing
