// Device dispatch (core/kernels/kernel_table.h): ops run on their inputs' device through that
// device's kernel table, create their outputs there, and refuse tensors of two devices with
// PyTorch's message. A test-only "cuda" device (host memory, the CPU kernels behind a table that
// counts its calls) stands in for a GPU, so every path runs here without one.
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <string>

#include "core/autograd.h"
#include "core/functional/masked_softmax.h"
#include "core/kernels/kernel_table.h"
#include "core/memory.h"
#include "core/nn/clip_grad.h"
#include "core/nn/embedding.h"
#include "core/nn/init.h"
#include "core/ops.h"
#include "core/ops/attention_heads.h"
#include "core/ops/blocked_attention.h"
#include "core/optim/adam.h"
#include "core/optim/sgd.h"
#include "core/random.h"

namespace fsdp::testing {
namespace {

const Device kCuda0(DeviceType::CUDA, 0);

// Device memory in host pages: the CPU kernels can then serve as the device's.
class HostMemoryAllocator : public Allocator {
 public:
  void* allocate(std::size_t nbytes, Device) override {
    return std::aligned_alloc(64, (nbytes + 63) / 64 * 64);
  }
  void deallocate(void* ptr, std::size_t, Device) override { std::free(ptr); }
  std::string_view name() const override { return "test-host"; }
};

// The CPU table with some entries wrapped to count calls: proof that an op used the table of
// its inputs' device.
int g_binary_calls = 0, g_copy_broadcast_calls = 0, g_linear_calls = 0;
KernelTable counting_table() {
  KernelTable t = kernels(kCPU);
  static auto binary = t.binary;
  static auto copy_broadcast = t.copy_broadcast;
  static auto linear = t.linear;
  t.binary = [](BinaryKind k, const Tensor& o, const Tensor& a, const Tensor& b, double al) {
    ++g_binary_calls;
    binary(k, o, a, b, al);
  };
  t.copy_broadcast = [](const Tensor& d, const Tensor& s) {
    ++g_copy_broadcast_calls;
    copy_broadcast(d, s);
  };
  t.linear = [](const Tensor& o, const Tensor& x, const Tensor& w, const Tensor& b) {
    ++g_linear_calls;
    linear(o, x, w, b);
  };
  return t;
}

// Registers the test device for one test case and removes it afterwards.
struct TestCudaDevice {
  HostMemoryAllocator allocator;
  KernelTable table = counting_table();
  TestCudaDevice() {
    register_allocator(DeviceType::CUDA, &allocator);
    register_kernels(DeviceType::CUDA, &table);
    g_binary_calls = g_copy_broadcast_calls = g_linear_calls = 0;
  }
  ~TestCudaDevice() {
    register_kernels(DeviceType::CUDA, nullptr);
    register_allocator(DeviceType::CUDA, nullptr);
  }
};

Tensor cuda(const Tensor& t) {
  return t.to(kCuda0);
}

// Runs f, expecting a RuntimeError whose message is exactly `expected`.
template <typename F>
void expect_message(F&& f, const std::string& expected) {
  try {
    f();
    BOOST_FAIL("expected a RuntimeError: " + expected);
  } catch (const RuntimeError& e) {
    BOOST_TEST(std::string(e.what()) == expected);
  }
}

std::string mixed(const std::string& op, const std::string& first, const std::string& second) {
  return op + ": Expected all tensors to be on the same device, but found at least two devices, " +
         first + " and " + second + "!";
}

BOOST_AUTO_TEST_SUITE(devices)

BOOST_FIXTURE_TEST_CASE(mixed_devices_fail_as_pytorch_does_per_op_family, TestCudaDevice) {
  Tensor g = cuda(ones({2, 3})), c = ones({2, 3});
  // element-wise, in the order given
  expect_message([&] { add(g, c); }, mixed("add", "cuda:0", "cpu"));
  expect_message([&] { add(c, g); }, mixed("add", "cpu", "cuda:0"));
  expect_message([&] { mul(g, c); }, mixed("mul", "cuda:0", "cpu"));
  expect_message([&] { maximum(g, c); }, mixed("maximum", "cuda:0", "cpu"));
  // comparisons and selection
  expect_message([&] { lt(g, c); }, mixed("lt", "cuda:0", "cpu"));
  expect_message([&] { where(gt(g, g), g, c); }, mixed("where", "cuda:0", "cpu"));
  expect_message([&] { masked_fill(g, gt(c, c), 1.0); }, mixed("masked_fill", "cuda:0", "cpu"));
  // in place
  expect_message(
      [&] {
        autograd::NoGradGuard ng;
        Tensor t = cuda(ones({2, 3}));
        add_(t, c);
      },
      mixed("add_", "cuda:0", "cpu"));
  expect_message(
      [&] {
        autograd::NoGradGuard ng;
        Tensor t = scalar_tensor(1.0);
        add_(t, cuda(scalar_tensor(2.0)));
      },
      mixed("add_", "cpu", "cuda:0"));
  // products
  expect_message([&] { mm(g, transpose(c, 0, 1)); }, mixed("mm", "cuda:0", "cpu"));
  expect_message(
      [&] {
        bmm(unsqueeze(c, 0), cuda(ones({1, 3, 2})));
      },
      mixed("bmm", "cpu", "cuda:0"));
  expect_message([&] { linear(g, ones({4, 3})); }, mixed("linear", "cuda:0", "cpu"));
  expect_message(
      [&] {
        linear(g, cuda(ones({4, 3})), ones({4}));
      },
      mixed("linear", "cuda:0", "cpu"));
  // joins and indexing
  expect_message([&] { cat({g, c}, 0); }, mixed("cat", "cuda:0", "cpu"));
  expect_message([&] { index_select(g, 0, from_vector({1.0}, {1}, DType::Int64)); },
                 mixed("index_select", "cuda:0", "cpu"));
  // attention
  Tensor q = ones({1, 2, 4});
  expect_message([&] { blocked_attention(q, cuda(q), q, Tensor()); },
                 mixed("blocked_attention", "cpu", "cuda:0"));
}

BOOST_FIXTURE_TEST_CASE(a_zero_dim_cpu_tensor_mixes_with_any_device, TestCudaDevice) {
  Tensor g = cuda(from_vector({1.0, 2.0, 3.0}, {3}));
  Tensor r = add(g, scalar_tensor(10.0));
  BOOST_TEST(r.device() == kCuda0);
  BOOST_TEST(r.to_vector() == std::vector<double>({11.0, 12.0, 13.0}),
             boost::test_tools::per_element());
  Tensor s = mul(scalar_tensor(2.0), g);
  BOOST_TEST(s.device() == kCuda0);
  BOOST_TEST(s.to_vector() == std::vector<double>({2.0, 4.0, 6.0}),
             boost::test_tools::per_element());
  // A 0-d tensor on the device is no scalar exception for cpu operands.
  expect_message([&] { add(ones({3}), cuda(scalar_tensor(1.0))); }, mixed("add", "cpu", "cuda:0"));
}

BOOST_FIXTURE_TEST_CASE(outputs_live_on_the_inputs_device_with_cpu_values, TestCudaDevice) {
  Generator gen(7);
  Tensor a = randn({4, 5}, {}, &gen), b = randn({4, 5}, {}, &gen), w = randn({3, 5}, {}, &gen);
  Tensor bias = randn({3}, {}, &gen);
  Tensor ga = cuda(a), gb = cuda(b), gw = cuda(w), gbias = cuda(bias);
  BOOST_TEST(ga.device() == kCuda0);
  BOOST_TEST(g_copy_broadcast_calls == 4);  // to(device) copied through the device's table
  auto same = [](const Tensor& on_device, const Tensor& on_cpu) {
    BOOST_TEST(on_device.device() == kCuda0);
    BOOST_TEST(on_device.shape() == on_cpu.shape());
    BOOST_TEST(on_device.dtype() == on_cpu.dtype());
    BOOST_TEST(on_device.to_vector() == on_cpu.to_vector(), boost::test_tools::per_element());
  };
  same(add(ga, gb, 0.5), add(a, b, 0.5));
  BOOST_TEST(g_binary_calls == 1);
  same(div(ga, gb), div(a, b));
  same(exp(ga), exp(a));
  same(pow(ga, 3.0), pow(a, 3.0));
  same(le(ga, gb), le(a, b));
  same(where(gt(ga, gb), ga, gb), where(gt(a, b), a, b));
  same(masked_fill(ga, lt(ga, gb), -1.0), masked_fill(a, lt(a, b), -1.0));
  same(sum(ga, {1}), sum(a, {1}));
  same(mean(ga), mean(a));
  same(amax(ga, {0}), amax(a, {0}));
  same(max(ga, 1, false).first, max(a, 1, false).first);
  same(max(ga, 1, false).second, max(a, 1, false).second);
  same(mm(ga, transpose(gb, 0, 1)), mm(a, transpose(b, 0, 1)));
  same(matmul(ga, transpose(gw, 0, 1)), matmul(a, transpose(w, 0, 1)));
  same(linear(ga, gw, gbias), linear(a, w, bias));
  BOOST_TEST(g_linear_calls == 1);
  same(cat({ga, gb}, 1), cat({a, b}, 1));
  same(index_select(ga, 0, cuda(from_vector({3.0, 0.0}, {2}, DType::Int64))),
       index_select(a, 0, from_vector({3.0, 0.0}, {2}, DType::Int64)));
  same(clone(transpose(ga, 0, 1)), clone(transpose(a, 0, 1)));
  same(to_dtype(ga, DType::BFloat16), to_dtype(a, DType::BFloat16));
  same(zeros_like(ga), zeros_like(a));
  same(arange(5, TensorOptions(DType::Int64, kCuda0)), arange(5));
  Generator g1(3), g2(3);
  same(rand({6}, TensorOptions(DType::Float32, kCuda0), &g1), rand({6}, {}, &g2));
  same(split_heads(cuda(a.reshape({1, 4, 5})), 1, 1, 2.0)[0],
       split_heads(a.reshape({1, 4, 5}), 1, 1, 2.0)[0]);
  Tensor q = a.reshape({1, 4, 5});
  same(blocked_attention(cuda(q), cuda(q), cuda(q), Tensor()),
       blocked_attention(q, q, q, Tensor()));
  // In place and fills stay on the device.
  {
    autograd::NoGradGuard ng;
    Tensor t = clone(ga), u = clone(a);
    add_(t, gb, 2.0);
    add_(u, b, 2.0);
    same(t, u);
    mul_(t, 0.5);
    mul_(u, 0.5);
    same(t, u);
    t.fill_(4.0);
    u.fill_(4.0);
    same(t, u);
  }
  BOOST_TEST(sum(ga).item() == sum(a).item());
  BOOST_TEST(allclose(ga, cuda(a)));
  BOOST_TEST(to_device(ga, kCPU).device() == kCPU);
  BOOST_TEST(to_device(ga, kCPU).to_vector() == a.to_vector(), boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(gradients_flow_on_the_device, TestCudaDevice) {
  Generator gen(11);
  Tensor x = randn({3, 4}, {}, &gen), w = randn({2, 4}, {}, &gen);
  Tensor gx = cuda(x).detach().requires_grad_(true), gw = cuda(w).detach().requires_grad_(true);
  Tensor cx = x.detach().requires_grad_(true), cw = w.detach().requires_grad_(true);
  sum(mul(linear(gx, gw), 3.0)).backward();
  sum(mul(linear(cx, cw), 3.0)).backward();
  BOOST_TEST(gx.grad().device() == kCuda0);
  BOOST_TEST(gw.grad().device() == kCuda0);
  BOOST_TEST(gx.grad().to_vector() == cx.grad().to_vector(), boost::test_tools::per_element());
  BOOST_TEST(gw.grad().to_vector() == cw.grad().to_vector(), boost::test_tools::per_element());
}

// Forward and backward of a function of one float input on the device equal the CPU's.
template <typename F>
void same_with_gradient(const Tensor& x, F f) {
  Tensor gx = cuda(x).detach().requires_grad_(true), cx = x.detach().requires_grad_(true);
  Tensor gy = f(gx), cy = f(cx);
  BOOST_TEST(gy.device() == kCuda0);
  BOOST_TEST(gy.to_vector() == cy.to_vector(), boost::test_tools::per_element());
  sum(mul(gy, gy)).backward();
  sum(mul(cy, cy)).backward();
  BOOST_TEST(gx.grad().device() == kCuda0);
  BOOST_TEST(gx.grad().to_vector() == cx.grad().to_vector(), boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(functional_ops_run_on_the_device, TestCudaDevice) {
  Generator gen(9);
  Tensor x = randn({4, 6}, {}, &gen);
  for (DType d : {DType::Float32, DType::BFloat16}) {
    Tensor xd = to_dtype(x, d);
    same_with_gradient(xd, [](const Tensor& t) { return relu(t); });
    same_with_gradient(xd, [](const Tensor& t) { return gelu(t); });
    same_with_gradient(xd, [](const Tensor& t) { return gelu(t, "tanh"); });
    same_with_gradient(xd, [](const Tensor& t) { return tanh(t); });
    same_with_gradient(xd, [](const Tensor& t) { return sigmoid(t); });
    same_with_gradient(xd, [](const Tensor& t) { return softmax(t, 1); });
    same_with_gradient(xd, [](const Tensor& t) { return softmax(t, 0); });
    same_with_gradient(xd, [](const Tensor& t) { return log_softmax(t, 1); });
  }
  Tensor w = randn({6}, {}, &gen), b = randn({6}, {}, &gen);
  same_with_gradient(x, [&](const Tensor& t) {
    return layer_norm(t, {6}, t.device() == kCuda0 ? cuda(w) : w,
                      t.device() == kCuda0 ? cuda(b) : b);
  });
  Tensor mask = randn({4, 6}, {}, &gen);
  same_with_gradient(x.reshape({1, 4, 6}), [&](const Tensor& t) {
    return masked_softmax(t, t.device() == kCuda0 ? cuda(mask) : mask);
  });
  Tensor target = randn({4, 6}, {}, &gen);
  same_with_gradient(x, [&](const Tensor& t) {
    return mse_loss(t, t.device() == kCuda0 ? cuda(target) : target, "none");
  });
  same_with_gradient(x, [&](const Tensor& t) {
    return mse_loss(t, t.device() == kCuda0 ? cuda(target) : target);
  });
  Tensor classes = from_vector({2.0, 0.0, -100.0, 5.0}, {4}, DType::Int64);
  for (const char* reduction : {"mean", "sum", "none"}) {
    same_with_gradient(x, [&](const Tensor& t) {
      return cross_entropy(t, t.device() == kCuda0 ? cuda(classes) : classes, -100, reduction, 0.1);
    });
    same_with_gradient(x, [&](const Tensor& t) {
      return nll_loss(t, t.device() == kCuda0 ? cuda(classes) : classes, -100, reduction);
    });
  }
  Tensor rows = from_vector({3.0, 1.0, 3.0}, {3}, DType::Int64);
  same_with_gradient(x, [&](const Tensor& t) {
    return embedding(t, t.device() == kCuda0 ? cuda(rows) : rows, 1);
  });
  // batch_norm, training (the running statistics updated on their device) then eval.
  Tensor rm = zeros({6}), rv = ones({6}), grm = cuda(rm), grv = cuda(rv);
  for (bool training : {true, false})
    same_with_gradient(x, [&](const Tensor& t) {
      const bool dev = t.device() == kCuda0;
      return batch_norm(t, dev ? grm : rm, dev ? grv : rv, dev ? cuda(w) : w, dev ? cuda(b) : b,
                        training, 0.1, 1e-5);
    });
  BOOST_TEST(grm.to_vector() == rm.to_vector(), boost::test_tools::per_element());
  BOOST_TEST(grv.to_vector() == rv.to_vector(), boost::test_tools::per_element());
  Generator g1(4), g2(4);
  same_with_gradient(
      x, [&](const Tensor& t) { return dropout(t, 0.3, true, t.device() == kCuda0 ? &g1 : &g2); });
  expect_message([&] { mse_loss(cuda(x), target); }, mixed("mse_loss", "cuda:0", "cpu"));
  expect_message([&] { layer_norm(cuda(x), {6}, w); }, mixed("layer_norm", "cuda:0", "cpu"));
  expect_message([&] { embedding(cuda(x), rows); }, mixed("embedding", "cuda:0", "cpu"));
}

BOOST_FIXTURE_TEST_CASE(optimizers_update_parameters_on_their_device, TestCudaDevice) {
  Generator gen(5);
  Tensor p = randn({6}, {}, &gen), g = randn({6}, {}, &gen);
  Tensor gp = cuda(p), cp = clone(p);
  gp.set_grad(cuda(g));
  cp.set_grad(clone(g));
  optim::AdamW on_device({gp}), on_cpu({cp});
  for (int i = 0; i < 2; ++i) {
    on_device.step();
    on_cpu.step();
  }
  BOOST_TEST(gp.device() == kCuda0);
  BOOST_TEST(gp.to_vector() == cp.to_vector(), boost::test_tools::per_element());
  optim::SGDOptions momentum;
  momentum.momentum = 0.9;
  optim::SGD sgd_device({gp}, momentum), sgd_cpu({cp}, momentum);
  sgd_device.step();
  sgd_cpu.step();
  BOOST_TEST(gp.to_vector() == cp.to_vector(), boost::test_tools::per_element());
  // A gradient on another device than its parameter is refused, naming both.
  gp.set_grad(clone(g));
  expect_message([&] { on_device.step(); }, mixed("AdamW.step", "cuda:0", "cpu"));
}

BOOST_FIXTURE_TEST_CASE(nn_utilities_run_on_the_device, TestCudaDevice) {
  // nn.init draws on the host and stores on the device: the same values as on the cpu.
  Tensor c = empty({5, 7}), g = empty({5, 7}, TensorOptions(DType::Float32, kCuda0));
  Generator g1(21), g2(21);
  nn::init::normal_(c, 0.0, 1.0, &g1);
  nn::init::normal_(g, 0.0, 1.0, &g2);
  BOOST_TEST(g.to_vector() == c.to_vector(), boost::test_tools::per_element());
  // Gradient clipping: the norm on the gradients' device, the scaled gradients equal.
  Tensor pc = clone(c).requires_grad_(true), pg = cuda(c).detach().requires_grad_(true);
  pc.set_grad(mul(c, 3.0));
  pg.set_grad(cuda(mul(c, 3.0)));
  Tensor nc = nn::clip_grad_norm_({pc}, 1.0), ng = nn::clip_grad_norm_({pg}, 1.0);
  BOOST_TEST(ng.device() == kCuda0);
  BOOST_TEST(ng.item() == nc.item());
  BOOST_TEST(pg.grad().to_vector() == pc.grad().to_vector(), boost::test_tools::per_element());
  nn::clip_grad_value_({pc}, 0.01);
  nn::clip_grad_value_({pg}, 0.01);
  BOOST_TEST(pg.grad().to_vector() == pc.grad().to_vector(), boost::test_tools::per_element());
  // Embedding's max_norm renorms the rows it reads, on the device.
  nn::EmbeddingOptions o;
  o.max_norm = 0.5;
  nn::Embedding ec(5, 7, o), eg(5, 7, o);
  {
    autograd::NoGradGuard ng_guard;
    Tensor(ec.param("weight")).copy_(c);
    eg.to(kCuda0);
    Tensor(eg.param("weight")).copy_(c);
  }
  Tensor rows = from_vector({4.0, 1.0}, {2}, DType::Int64);
  Tensor yc = ec.forward(rows), yg = eg.forward(cuda(rows));
  BOOST_TEST(yg.device() == kCuda0);
  BOOST_TEST(yg.to_vector() == yc.to_vector(), boost::test_tools::per_element());
  BOOST_TEST(eg.param("weight").to_vector() == ec.param("weight").to_vector(),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_device_without_kernels_is_named) {
  // A build with the CUDA table has kernels for cuda: what is refused there is a missing device
  // (tests/core/streams), not missing kernels.
  if (has_kernels(Device(DeviceType::CUDA, 0))) return;
  // A tensor of that device (as a deserialised one could be): no storage, no kernels.
  auto impl = std::make_shared<TensorImpl>();
  impl->set_sizes({2, 3});
  impl->strides = {3, 1};
  impl->device = kCuda0;
  Tensor c(impl);
  try {
    add(c, c);
    BOOST_FAIL("expected a NotImplementedError");
  } catch (const NotImplementedError& e) {
    BOOST_TEST(std::string(e.what()) ==
               "add: not implemented for device cuda:0 (tensor of shape [2, 3]): this build has "
               "no kernels for it");
  }
  expect_message([] { kernels(kCuda0); },
                 "no kernels for device cuda:0: this build has no support for it (the CUDA "
                 "kernels need a build with -Dcuda=enabled)");
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace fsdp::testing
