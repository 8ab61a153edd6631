// fake_cuda's kernel table and the stream sanitizer: ops on fake_cuda tensors give the CPU's
// values bit for bit (forward, backward and an optimizer step of a small model); a read on one
// stream of what another stream writes is reported unless an event orders them, and a storage
// freed while another stream may still read it is reported unless record_stream was called.
#include <boost/test/unit_test.hpp>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/nn/nn.h"
#include "core/ops.h"
#include "core/optim/optim.h"
#include "core/stream.h"
#include "core/stream_sanitizer_mode.h"
#include "tests/core/streams/fake_cuda_test_util.h"

using namespace fsdp;
namespace san = fsdp::stream_sanitizer;

namespace {

const Device kFake0(DeviceType::FakeCUDA, 0);

// Two copies of one small model (same weights), the loss of `steps` AdamW steps on each device.
std::vector<double> train(Device device, int steps) {
  Generator g(7);
  manual_seed(7);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(8, 16), std::make_shared<nn::GELU>(),
      std::make_shared<nn::LayerNorm>(Shape{16}), std::make_shared<nn::Linear>(16, 1)});
  model->to(device);
  optim::AdamW opt(model->parameters(), optim::AdamOptions{.lr = 1e-2, .weight_decay = 1e-2});
  std::vector<double> losses;
  Tensor x = randn({4, 8}, {}, &g).to(device);
  for (int step = 0; step < steps; ++step) {
    Tensor loss = mse_loss((*model)(x).tensor(), sum(x, {1}, true));
    opt.zero_grad();
    loss.backward();
    opt.step();
    losses.push_back(loss.item());
  }
  return losses;
}

// Outputs and input gradients of the Hugging Face models' ops (rms_norm, silu, apply_rotary,
// causal grouped-query scaled_dot_product_attention) on `device`, in float32 and bfloat16.
std::vector<std::vector<double>> transformer_ops(Device device, DType dtype) {
  Generator g(11);
  auto leaf = [&](const Shape& shape) {
    Tensor t = randn(shape, {}, &g).to(dtype).to(device);
    t.requires_grad_(true);
    return t;
  };
  Tensor x = leaf({2, 70, 16}), w = leaf({16});
  Tensor q = leaf({2, 4, 70, 8}), k = leaf({2, 2, 70, 8}), v = leaf({2, 2, 70, 8});
  auto [cos, sin] = rotary_cos_sin(rotary_inv_freq(8, 1e4, device), 0, 70, dtype);
  Tensor qr = apply_rotary(q, cos, sin), kr = apply_rotary(k, cos, sin);
  Tensor a = scaled_dot_product_attention(qr, kr, v, {}, true, {}, true);
  Tensor n = silu(rms_norm(x, w, 1e-6));
  add(sum(mul(a, a)), sum(mul(n, n))).backward();
  std::vector<std::vector<double>> out;
  for (const Tensor& t : {a, n, x.grad(), w.grad(), q.grad(), k.grad(), v.grad()})
    out.push_back(t.to(kCPU).to_vector());
  return out;
}

std::vector<std::string> messages() {
  std::vector<std::string> out;
  for (const auto& r : san::reports()) out.push_back(r.message);
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(fake_cuda_kernels)

BOOST_AUTO_TEST_CASE(ops_give_the_cpu_values_bit_for_bit) {
  Generator g(3);
  Tensor a = randn({5, 7}, {}, &g), b = randn({7, 3}, {}, &g);
  Tensor cpu = relu(add(mm(a, b), 0.5));
  Tensor fake = relu(add(mm(a.to(kFake0), b.to(kFake0)), 0.5));
  BOOST_TEST(fake.device() == kFake0);
  BOOST_TEST(fake.to(kCPU).to_vector() == cpu.to_vector());
}

BOOST_AUTO_TEST_CASE(transformer_ops_give_the_cpu_values_bit_for_bit) {
  for (DType dt : {DType::Float32, DType::BFloat16}) {
    const auto cpu = transformer_ops(kCPU, dt);
    BOOST_TEST((transformer_ops(kFake0, dt) == cpu), dtype_name(dt));
  }
}

BOOST_AUTO_TEST_CASE(transformer_ops_under_the_sanitizer_have_no_report) {
  san::clear_reports();
  {
    dispatch::ModeGuard mode(std::make_shared<san::StreamSanitizerMode>());
    transformer_ops(kFake0, DType::Float32);
  }
  BOOST_TEST(messages().empty());
}

BOOST_AUTO_TEST_CASE(a_training_run_gives_the_cpu_losses_bit_for_bit) {
  const auto cpu = train(kCPU, 4);
  const auto fake = train(kFake0, 4);
  BOOST_TEST(fake == cpu);
  BOOST_TEST(cpu.back() < cpu.front());
}

BOOST_AUTO_TEST_CASE(a_training_run_under_the_sanitizer_has_no_report) {
  san::clear_reports();
  {
    dispatch::ModeGuard mode(std::make_shared<san::StreamSanitizerMode>());
    train(kFake0, 2);
  }
  BOOST_TEST(messages().empty());
}

// Indices and class targets are checked by the kernels (no host read in the op): on fake_cuda
// the CPU's kernel runs on the stream's worker, so a bad one is reported at the next
// synchronising call with the CPU's message, as torch's CUDA device-side asserts are; the ops'
// values with good ones are the CPU's bit for bit; a negative index is bad, as torch's.
BOOST_AUTO_TEST_CASE(a_bad_index_or_target_is_reported_at_the_next_synchronisation) {
  const auto reported = [](const std::string& cpu_message) {
    return [cpu_message](const RuntimeError& e) {
      const std::string what = e.what();
      BOOST_TEST_MESSAGE(what);
      return what.find("fake_cuda:0: work queued on stream") == 0 &&
             what.find(cpu_message) != std::string::npos;
    };
  };
  Generator g(5);
  const Tensor weight = randn({5, 3}, {}, &g), logits = randn({3, 4}, {}, &g);
  const Tensor bad_index = from_vector(std::vector<std::int64_t>{1, 5, 0}, {3});
  Tensor rows = embedding(weight.to(kFake0), bad_index.to(kFake0));  // returns: nothing read
  BOOST_CHECK_EXCEPTION(
      rows.to(kCPU), RuntimeError,
      reported("embedding: index 5 is out of range for a table of 5 rows (weight shape [5, 3])"));
  const Tensor bad_target = from_vector(std::vector<std::int64_t>{1, 4, -100}, {3});
  Tensor loss = cross_entropy(logits.to(kFake0), bad_target.to(kFake0));
  BOOST_CHECK_EXCEPTION(current_stream(kFake0).synchronize(), RuntimeError,
                        reported("cross_entropy: target 4 is out of bounds (expected a class "
                                 "index in [0, 4) or ignore_index -100)"));
  Tensor picked =
      index_select(weight.to(kFake0), 0, from_vector(std::vector<std::int64_t>{7}, {1}).to(kFake0));
  BOOST_CHECK_EXCEPTION(
      picked.to(kCPU), RuntimeError,
      reported("index_select(): index 7 is out of bounds for dimension 0 with "
               "size 5 (valid indices are [0, 5)), at position 0 of the indices"));
  Tensor negative = index_select(weight.to(kFake0), 0,
                                 from_vector(std::vector<std::int64_t>{0, -1}, {2}).to(kFake0));
  BOOST_CHECK_EXCEPTION(
      negative.to(kCPU), RuntimeError,
      reported("index_select(): index -1 is out of bounds for dimension 0 with "
               "size 5 (valid indices are [0, 5)), at position 1 of the indices"));

  const Tensor index = from_vector(std::vector<std::int64_t>{4, 2, 0}, {3});
  const Tensor target = from_vector(std::vector<std::int64_t>{1, 3, -100}, {3});
  Tensor x = logits.clone().requires_grad_(true), xf = logits.to(kFake0).requires_grad_(true);
  Tensor want = cross_entropy(x, target), got = cross_entropy(xf, target.to(kFake0));
  want.backward();
  got.backward();
  BOOST_TEST(got.to(kCPU).to_vector() == want.to_vector());
  BOOST_TEST(xf.grad().to(kCPU).to_vector() == x.grad().to_vector());
  BOOST_TEST(index_select(weight.to(kFake0), 0, index.to(kFake0)).to(kCPU).to_vector() ==
             index_select(weight, 0, index).to_vector());
}

// s2 reads what s1 writes: without an event between them the sanitizer names both ops and
// streams; with s2 waiting on s1's event, nothing. s1 is held by a gate until s2 is done, so the
// unordered run is deterministic (and no real race for TSan): the sanitizer reports what could
// race, not what happened to.
BOOST_AUTO_TEST_CASE(an_unordered_cross_stream_read_is_reported) {
  for (bool ordered : {false, true}) {
    san::clear_reports();
    dispatch::ModeGuard mode(std::make_shared<san::StreamSanitizerMode>());
    const Stream s1 = new_stream(kFake0), s2 = new_stream(kFake0);
    Tensor x = zeros({64}, TensorOptions(DType::Float32, kFake0));
    Tensor y;
    // x's zeros were written on the current stream: both streams wait for them, so the only
    // unordered pair is s1's fill and s2's read (without s2's wait, the zeros' fill and s2's read
    // were a second, real race, which TSan saw whenever the fill was still running).
    s1.wait_stream(current_stream(kFake0));
    s2.wait_stream(current_stream(kFake0));
    testing::Gate gate;
    launch(s1, gate.waiter());
    {
      StreamGuard on(s1);
      x.fill_(1.0);
    }
    if (ordered) {
      s2.wait_stream(s1);
      gate.open();
    }
    {
      StreamGuard on(s2);
      y = mul(x, 2.0);
    }
    s2.synchronize();
    if (!ordered) gate.open();
    device_synchronize(kFake0);
    const auto got = messages();
    for (const auto& m : got) BOOST_TEST_MESSAGE(m);
    if (ordered) {
      BOOST_TEST(got.empty());
    } else {
      BOOST_TEST_REQUIRE(got.size() == 1u);
      BOOST_TEST(got[0].find("mul") != std::string::npos);
      BOOST_TEST(got[0].find("reads") != std::string::npos);
      BOOST_TEST(got[0].find("while fill on") != std::string::npos);
      BOOST_TEST(got[0].find("stream " + std::to_string(s2.id) + " of fake_cuda:0") !=
                 std::string::npos);
      BOOST_TEST(got[0].find("stream " + std::to_string(s1.id) + " of fake_cuda:0") !=
                 std::string::npos);
    }
  }
}

// A tensor allocated on the current stream, read on another and freed: without record_stream
// its block could be reused while the read runs.
BOOST_AUTO_TEST_CASE(a_free_without_record_stream_is_reported) {
  for (bool recorded : {false, true}) {
    san::clear_reports();
    dispatch::ModeGuard mode(std::make_shared<san::StreamSanitizerMode>());
    const Stream side = new_stream(kFake0);
    Tensor y;
    {
      Tensor x = ones({32}, TensorOptions(DType::Float32, kFake0));
      san::set_owner(x.data_ptr(), 32 * sizeof(float), "the test's buffer x");
      side.wait_stream(current_stream(kFake0));
      {
        StreamGuard on(side);
        y = mul(x, 3.0);
      }
      if (recorded) x.storage()->record_stream(side);
    }
    device_synchronize(kFake0);
    const auto got = messages();
    if (recorded) {
      BOOST_TEST(got.empty());
    } else {
      BOOST_TEST_REQUIRE(got.size() == 1u);
      BOOST_TEST(got[0].find("the test's buffer x freed on stream 0 of fake_cuda:0") !=
                 std::string::npos);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
