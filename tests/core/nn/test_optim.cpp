// Optimizers against PyTorch (nn_optim.json): parameters after each of three steps with fixed
// gradients; state save/restore; zero_grad; validation messages.
#include <boost/test/unit_test.hpp>

#include "core/optim/optim.h"
#include "tests/support/error_message.h"
#include "tests/support/fixture.h"

using namespace fsdp;
using namespace fsdp::optim;
using fsdp::testing::close;
using fsdp::testing::Fixture;

namespace {
const Fixture& fx() {
  static const Fixture f("nn_optim.json");
  return f;
}

std::unique_ptr<Optimizer> make(const std::string& name, std::vector<Tensor> params) {
  auto o = nlohmann::json::parse(fx().value(name, "options").get<std::string>());
  auto num = [&](const char* k, double d) { return o.contains(k) ? o[k].get<double>() : d; };
  auto flag = [&](const char* k) { return o.contains(k) && o[k].get<bool>(); };
  if (name.rfind("sgd", 0) == 0)
    return std::make_unique<SGD>(
        params, SGDOptions{num("lr", 1e-3), num("momentum", 0), num("dampening", 0),
                           num("weight_decay", 0), flag("nesterov"), flag("maximize")});
  AdamOptions a;
  a.lr = num("lr", 1e-3);
  if (o.contains("betas")) a.betas = {o["betas"][0].get<double>(), o["betas"][1].get<double>()};
  a.eps = num("eps", 1e-8);
  a.amsgrad = flag("amsgrad");
  a.maximize = flag("maximize");
  if (name.rfind("adamw", 0) == 0) {
    AdamWOptions w(a);
    w.weight_decay = num("weight_decay", 1e-2);
    return std::make_unique<AdamW>(params, w);
  }
  a.weight_decay = num("weight_decay", 0);
  return std::make_unique<Adam>(params, a);
}

std::vector<std::string> case_names() {
  std::vector<std::string> out;
  for (auto& [k, v] : fx().json().at("cases").items()) out.push_back(k);
  return out;
}
}  // namespace

BOOST_AUTO_TEST_CASE(steps_match_torch) {
  for (const auto& name : case_names()) {
    BOOST_TEST_CONTEXT(name) {
      std::vector<Tensor> params{fx().tensor(name, "p0.init", true),
                                 fx().tensor(name, "p1.init", true)};
      const bool f64 = params[0].dtype() == DType::Float64;
      const double rtol = f64 ? 1e-10 : 1e-5, atol = f64 ? 1e-12 : 1e-6;
      auto opt = make(name, params);
      for (int step = 0; step < 3; ++step) {
        for (int i = 0; i < 2; ++i)
          params[i].set_grad(fx().tensor(name, fmt::format("p{}.grad{}", i, step)));
        opt->step();
        for (int i = 0; i < 2; ++i) {
          std::string key = fmt::format("p{}.step{}", i, step);
          BOOST_TEST(close(params[i], fx().tensor(name, key), rtol, atol, key) == "");
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(state_dict_resumes_exactly) {
  // Three steps in one go == one step, save, restore into a fresh optimizer, two more steps.
  for (const char* name : {"sgd_momentum_wd", "adam_wd_amsgrad", "adamw"}) {
    BOOST_TEST_CONTEXT(name) {
      std::vector<Tensor> a{fx().tensor(name, "p0.init", true), fx().tensor(name, "p1.init", true)};
      std::vector<Tensor> b{fx().tensor(name, "p0.init", true), fx().tensor(name, "p1.init", true)};
      auto opt_a = make(name, a);
      auto opt_b = make(name, b);
      auto grads = [&](std::vector<Tensor>& ps, int step) {
        for (int i = 0; i < 2; ++i)
          ps[i].set_grad(fx().tensor(name, fmt::format("p{}.grad{}", i, step)));
      };
      for (int s = 0; s < 3; ++s) {
        grads(a, s);
        opt_a->step();
      }
      grads(b, 0);
      opt_b->step();
      OptimizerStateDict sd = opt_b->state_dict();
      BOOST_TEST(sd.state.size() == 2u);
      BOOST_TEST((sd.group_params[0] == std::vector<std::int64_t>{0, 1}));
      if (std::string(name) != "sgd_momentum_wd")
        BOOST_TEST(sd.state.at(1).at("step").item() == 1.0);
      else
        BOOST_TEST(sd.state.at(0).count("momentum_buffer") == 1u);
      auto opt_c = make(name, b);
      opt_c->set_lr(123.0);
      opt_c->load_state_dict(sd);
      BOOST_TEST(opt_c->lr() == opt_b->lr());
      for (int s = 1; s < 3; ++s) {
        grads(b, s);
        opt_c->step();
      }
      for (int i = 0; i < 2; ++i) BOOST_TEST(a[i].to_vector() == b[i].to_vector());
    }
  }
}

BOOST_AUTO_TEST_CASE(skips_params_without_grad_and_zero_grad) {
  Tensor p = from_vector(std::vector<double>{1.0, 2.0}, {2});
  Tensor q = from_vector(std::vector<double>{3.0}, {1});
  p.requires_grad_(true);
  q.requires_grad_(true);
  SGD opt({p, q}, SGDOptions{.lr = 0.5, .momentum = 0.9});
  p.set_grad(from_vector(std::vector<double>{1.0, -1.0}, {2}));
  opt.step();
  BOOST_TEST((p.to_vector() == std::vector<double>{0.5, 2.5}));
  BOOST_TEST(q.to_vector() == std::vector<double>{3.0});
  BOOST_TEST(opt.state(0, 1).tensors.empty());
  opt.zero_grad(false);
  BOOST_TEST((p.grad().to_vector() == std::vector<double>{0.0, 0.0}));
  opt.zero_grad();
  BOOST_TEST(!p.grad().defined());
}

BOOST_AUTO_TEST_CASE(param_groups_have_their_own_options) {
  Tensor p = ones({2}, TensorOptions(DType::Float64));
  Tensor q = ones({2}, TensorOptions(DType::Float64));
  p.requires_grad_(true);
  q.requires_grad_(true);
  SGD opt(std::vector<ParamGroup<SGDOptions>>{{{p}, {.lr = 0.1}}, {{q}, {.lr = 1.0}}});
  p.set_grad(ones({2}, TensorOptions(DType::Float64)));
  q.set_grad(ones({2}, TensorOptions(DType::Float64)));
  opt.step();
  BOOST_TEST(p.to_vector()[0] == 0.9);
  BOOST_TEST(q.to_vector()[0] == 0.0);
  BOOST_TEST(opt.num_param_groups() == 2u);
  BOOST_TEST(opt.state_dict().group_params[1] == std::vector<std::int64_t>{1});
}

BOOST_AUTO_TEST_CASE(validation_messages) {
  Tensor p = ones({2});
  p.requires_grad_(true);
  auto msg = [](auto&& f) { return fsdp::testing::error_message<ValueError>(f); };
  BOOST_TEST(msg([&] { SGD({p}, {.lr = -1}); }) == "Invalid learning rate: -1");
  BOOST_TEST(msg([&] { SGD({p}, {.lr = 0.1, .momentum = -0.5}); }) ==
             "Invalid momentum value: -0.5");
  BOOST_TEST(msg([&] { SGD({p}, {.lr = 0.1, .nesterov = true}); }) ==
             "Nesterov momentum requires a momentum and zero dampening");
  BOOST_TEST(msg([&] { SGD(std::vector<Tensor>{}, {}); }) ==
             "optimizer got an empty parameter list");
  BOOST_TEST(msg([&] {
               Adam({p}, {.betas = {1.0, 0.9}});
             }) == "Invalid beta parameter at index 0: 1");
  BOOST_TEST(msg([&] { Adam({p}, {.eps = -1e-3}); }) == "Invalid epsilon value: -0.001");
  BOOST_TEST(msg([&] {
               AdamW({p, p});
             }) == "some parameters appear in more than one parameter group");
  BOOST_TEST(AdamW({p}).options().weight_decay == 1e-2);
  BOOST_TEST(Adam({p}).options().weight_decay == 0.0);
}
