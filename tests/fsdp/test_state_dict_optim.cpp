// Optimizer state keyed by parameter FQN: the full optimizer state of a sharded run equals the
// plain model's optimizer state, and training k steps, saving the sharded model and optimizer
// state, loading them at another world size or strategy and training the rest equals training
// straight through (bit-identical at the same world size and strategy).
#define BOOST_TEST_MODULE fsdp_state_dict_optim
#include <algorithm>
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <map>
#include <mutex>
#include <set>

#include "core/autograd.h"
#include "core/nn/nn.h"
#include "core/ops.h"
#include "core/optim/optim.h"
#include "core/random.h"
#include "fsdp/full_state_dict.h"
#include "fsdp/optim_state_dict.h"
#include "tests/support/runtime_harness.h"
#include "tests/support/thread_safe_test.h"

using namespace fsdp;
using namespace fsdp::testing;
namespace bdata = boost::unit_test::data;

namespace {

constexpr std::int64_t kGlobalBatch = 12;  // rows per step, split over the ranks

// Step `step`'s global batch: inputs [12, 6], targets [12, 4].
std::pair<Tensor, Tensor> batch(int step) {
  Generator gen(500 + static_cast<std::uint64_t>(step));
  std::vector<double> x(kGlobalBatch * 6), y(kGlobalBatch * 4);
  for (auto& v : x) v = gen.uniform() * 2 - 1;
  for (auto& v : y) v = gen.uniform() * 2 - 1;
  return {from_vector(x, {kGlobalBatch, 6}), from_vector(y, {kGlobalBatch, 4})};
}

struct Job {
  int world = 2;
  ShardingStrategy strategy = ShardingStrategy::FULL_SHARD;
  bool orig = false;
};

RunOptions options(const Job& j) {
  RunOptions o;
  o.strategy = j.strategy;
  o.use_orig_params = j.orig;
  o.node_size = j.world >= 2 ? j.world / 2 : 1;
  return o;
}

// What a run leaves: losses, final parameters, the saved sharded state of every rank.
struct Run {
  std::vector<double> losses;
  std::map<std::string, std::vector<double>> params;
  ShardedStateDict model_pieces, optim_pieces;
  ShardedOptimStateDict optim_meta;
  std::map<std::string, std::map<std::string, std::vector<double>>> full_optim;
};

// Trains steps [from, to) on `job`, first loading `resume` when given; saves at the end.
Run run(const Job& job, const std::string& opt_name, int from, int to, const Run* resume) {
  Run out;
  std::mutex mu;
  on_ranks(job.world, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto model = wrap_mlp(mlp(7 + static_cast<std::uint64_t>(from)), pg, options(job));
    auto opt = make_mlp_optimizer(opt_name, model->parameters());
    if (resume != nullptr) {
      load_sharded_state_dict(*model, PieceSet(resume->model_pieces));
      load_sharded_optim_state_dict(*model, *opt, PieceSet(resume->optim_pieces),
                                    resume->optim_meta);
    }
    const std::int64_t rows = kGlobalBatch / job.world;
    std::vector<double> losses;
    for (int step = from; step < to; ++step) {
      auto [x, y] = batch(step);
      opt->zero_grad();
      Tensor out = (*model)(x.narrow(0, pg->rank() * rows, rows).contiguous()).tensor();
      Tensor loss = mse_loss(out, y.narrow(0, pg->rank() * rows, rows).contiguous());
      loss.backward();
      opt->step();
      double l = loss.item();
      pg->all_reduce(&l, 1, DType::Float64);
      losses.push_back(l / job.world);
    }
    auto model_pieces = sharded_state_dict(*model);
    auto optim = sharded_optim_state_dict(*model, *opt);
    auto full = full_state_dict(*model, true);
    auto full_optim = full_optim_state_dict(*model, *opt, true);
    std::lock_guard<std::mutex> lock(mu);
    for (auto& p : model_pieces) out.model_pieces.push_back(std::move(p));
    for (auto& p : optim.pieces) out.optim_pieces.push_back(std::move(p));
    if (pg->rank() != 0) return;
    out.losses = losses;
    out.optim_meta = optim;
    out.optim_meta.pieces.clear();
    for (const auto& [n, t] : full) out.params[n] = t.to_vector();
    for (const auto& [fqn, m] : full_optim)
      for (const auto& [name, t] : m) out.full_optim[fqn][name] = t.to_vector();
  });
  return out;
}

const std::vector<ShardingStrategy> kStrategies = {
    ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP, ShardingStrategy::NO_SHARD,
    ShardingStrategy::HYBRID_SHARD};

void check_close(const std::map<std::string, std::vector<double>>& got,
                 const std::map<std::string, std::vector<double>>& want, double tol) {
  TS_REQUIRE_EQUAL(got.size(), want.size());
  for (const auto& [name, w] : want) {
    TS_CONTEXT(name) {
      TS_REQUIRE(got.count(name) == 1u);
      const auto& g = got.at(name);
      TS_REQUIRE_EQUAL(g.size(), w.size());
      for (std::size_t i = 0; i < g.size(); ++i)
        if (tol == 0)
          TS_TEST(g[i] == w[i]);
        else
          TS_TEST(std::abs(g[i] - w[i]) <= tol * (1e-2 + std::abs(w[i])),
                  g[i] << " vs " << w[i]);  // relative, absolute near zero
    }
  }
}

}  // namespace

BOOST_DATA_TEST_CASE(full_optim_state_equals_the_plain_optimizers,
                     bdata::make(kStrategies) * bdata::make({1, 2, 4}) *
                         bdata::make({false, true}) * bdata::make({"sgd", "adamw"}),
                     strategy, world, orig, opt_name) {
  // The plain model on the whole batch.
  auto model = mlp(7);
  auto opt = make_mlp_optimizer(opt_name, model->parameters());
  for (int step = 0; step < 3; ++step) {
    auto [x, y] = batch(step);
    opt->zero_grad();
    mse_loss((*model)(x).tensor(), y).backward();
    opt->step();
  }
  std::map<std::string, std::vector<double>> want;
  const auto sd = opt->state_dict();
  std::int64_t index = 0;
  for (const auto& [name, p] : model->named_parameters()) {
    for (const auto& [key, t] : sd.state.at(index)) want[name + "/" + key] = t.to_vector();
    ++index;
  }
  Run r = run({world, strategy, orig}, opt_name, 0, 3, nullptr);
  std::map<std::string, std::vector<double>> got;
  for (const auto& [fqn, m] : r.full_optim)
    for (const auto& [key, v] : m) got[fqn + "/" + key] = v;
  check_close(got, want, 1e-5);
}

BOOST_DATA_TEST_CASE(resume_at_the_same_world_is_bit_identical,
                     bdata::make(kStrategies) * bdata::make({1, 2, 4}) *
                         bdata::make({false, true}) * bdata::make({"sgd", "adamw"}),
                     strategy, world, orig, opt_name) {
  const Job job{world, strategy, orig};
  Run straight = run(job, opt_name, 0, 5, nullptr);
  Run first = run(job, opt_name, 0, 2, nullptr);
  Run rest = run(job, opt_name, 2, 5, &first);
  std::vector<double> losses = first.losses;
  losses.insert(losses.end(), rest.losses.begin(), rest.losses.end());
  TS_TEST(losses == straight.losses, boost::test_tools::per_element());
  check_close(rest.params, straight.params, 0);
  check_close(rest.full_optim.at("0.weight"), straight.full_optim.at("0.weight"), 0);
}

BOOST_DATA_TEST_CASE(resume_at_another_world_and_strategy,
                     bdata::make({1, 2, 3, 4}) * bdata::make(kStrategies) *
                         bdata::make({1, 2, 3, 4}) * bdata::make(kStrategies) *
                         bdata::make({"sgd", "adamw"}),
                     save_world, save_strategy, load_world, load_strategy, opt_name) {
  const Job a{save_world, save_strategy, save_world % 2 == 0};
  const Job b{load_world, load_strategy, load_world % 2 == 1};
  Run straight = run(a, opt_name, 0, 4, nullptr);
  Run first = run(a, opt_name, 0, 2, nullptr);
  Run rest = run(b, opt_name, 2, 4, &first);
  TS_TEST(rest.losses[0] == straight.losses[2], boost::test_tools::tolerance(1e-5));
  TS_TEST(rest.losses[1] == straight.losses[3], boost::test_tools::tolerance(1e-5));
  check_close(rest.params, straight.params, 1e-5);
}

// The optimizer state of parameters no unit manages (an ignored module's, stepped by the same
// optimizer) is in the optimizer state dict whole, and parameters without state (a frozen unit)
// have none, as upstream's FSDP.optim_state_dict (torch 2.15): the full state equals the plain
// optimizer's, and a sharded save loads back. Both used to differ: the first threw "is not a
// parameter of this FSDP model", the second filled zeros for every state name.
BOOST_DATA_TEST_CASE(ignored_and_frozen_parameters_as_the_plain_optimizers,
                     bdata::make({1, 2, 3}) * bdata::make({false, true}) *
                         bdata::make({"sgd", "adamw"}),
                     world, orig, opt_name) {
  auto freeze_first = [](nn::Module& m) {
    for (auto& [name, p] : m.child("0")->named_parameters()) p.requires_grad_(false);
  };
  auto plain = mlp(7);
  freeze_first(*plain);
  auto plain_opt = make_mlp_optimizer(opt_name, plain->parameters());
  for (int step = 0; step < 3; ++step) {
    auto [x, y] = batch(step);
    plain_opt->zero_grad();
    mse_loss((*plain)(x).tensor(), y).backward();
    plain_opt->step();
  }
  std::map<std::string, std::vector<double>> want;
  const auto sd = plain_opt->state_dict();
  std::int64_t index = 0;
  for (const auto& [name, p] : plain->named_parameters()) {
    if (auto it = sd.state.find(index++); it != sd.state.end())
      for (const auto& [key, t] : it->second) want[name + "/" + key] = t.to_vector();
  }
  auto has_prefix = [](const std::map<std::string, std::vector<double>>& m, const char* prefix) {
    return std::any_of(m.begin(), m.end(),
                       [&](const auto& kv) { return kv.first.starts_with(prefix); });
  };
  BOOST_TEST_REQUIRE(has_prefix(want, "2.0.weight/"));  // the ignored Linear's state
  BOOST_TEST_REQUIRE(!has_prefix(want, "0."));          // the frozen one has none
  on_ranks(world, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto m = mlp(7);
    freeze_first(*m);
    WrapperOptions w;
    w.process_group = pg;
    w.use_orig_params = orig;
    w.ignored_modules = std::vector<nn::ModulePtr>{m->child("2")};
    m->replace_child("3", FullyShardedDataParallel::make(m->child("3"), w));
    auto model = FullyShardedDataParallel::make(m, w);  // the root unit: "0", all frozen
    auto opt = make_mlp_optimizer(opt_name, model->parameters());
    const std::int64_t rows = kGlobalBatch / world;
    for (int step = 0; step < 3; ++step) {
      auto [x, y] = batch(step);
      opt->zero_grad();
      Tensor out = (*model)(x.narrow(0, pg->rank() * rows, rows).contiguous()).tensor();
      mse_loss(out, y.narrow(0, pg->rank() * rows, rows).contiguous()).backward();
      opt->step();
    }
    auto gathered = [&] {
      std::map<std::string, std::vector<double>> got;
      for (const auto& [fqn, states] : full_optim_state_dict(*model, *opt, false))
        for (const auto& [key, t] : states) got[fqn + "/" + key] = t.to_vector();
      return got;
    };
    // The ignored Linear's gradients are this rank's alone (FSDP reduces none of them), so its
    // state equals the plain optimizer's only at world size 1; its keys match everywhere.
    auto got = gathered();
    std::set<std::string> got_keys, want_keys;
    for (const auto& [k, v] : got) got_keys.insert(k);
    for (const auto& [k, v] : want) want_keys.insert(k);
    TS_TEST((got_keys == want_keys));
    if (world == 1) check_close(got, want, 1e-5);
    // A sharded save loads into a fresh optimizer of the same model (which has no state yet).
    const ShardedOptimStateDict saved = sharded_optim_state_dict(*model, *opt);
    auto fresh = make_mlp_optimizer(opt_name, model->parameters());
    load_sharded_optim_state_dict(*model, *fresh, PieceSet(saved.pieces), saved);
    std::map<std::string, std::vector<double>> reloaded;
    for (const auto& [fqn, states] : full_optim_state_dict(*model, *fresh, false))
      for (const auto& [key, t] : states) reloaded[fqn + "/" + key] = t.to_vector();
    check_close(reloaded, got, 0);
  });
}

// use_orig_params on 3 ranks, one Linear(2, 1, bias=false): rank 2's shard is padding only, so
// its original parameter has no gradient there and its AdamW no state at all (upstream's). The
// optimizer state dicts still gather the state of ranks 0 and 1 on every rank (they stopped at
// rank 2, which knew no state name and joined no collective), and a sharded save loads back.
BOOST_AUTO_TEST_CASE(a_rank_without_optimizer_state) {
  auto make = [] {
    manual_seed(9);
    return std::make_shared<nn::Linear>(2, 1, false);
  };
  const Tensor x = from_vector(std::vector<double>{0.5, -1.0, 2.0, 0.25}, {2, 2});
  auto plain = make();
  (*plain)(x).tensor().sum().backward();
  const std::vector<double> grad = plain->param("weight").grad().to_vector();
  on_ranks(3, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    WrapperOptions w;
    w.process_group = pg;
    w.use_orig_params = true;
    auto model = FullyShardedDataParallel::make(make(), w);
    optim::AdamW opt(model->parameters(), optim::AdamWOptions{});
    (*model)(x).tensor().sum().backward();
    opt.step();
    TS_TEST(opt.state(0, 0).step == (pg->rank() == 2 ? 0 : 1));
    auto gathered = [&](const optim::Optimizer& o) {
      std::map<std::string, std::vector<double>> got;
      for (const auto& [fqn, states] : full_optim_state_dict(*model, o, false))
        for (const auto& [key, t] : states) got[fqn + "/" + key] = t.to_vector();
      return got;
    };
    const auto got = gathered(opt);
    TS_REQUIRE(got.count("weight/exp_avg") == 1u);
    TS_TEST(got.at("weight/step") == std::vector<double>{1.0}, boost::test_tools::per_element());
    const auto& exp_avg = got.at("weight/exp_avg");
    TS_REQUIRE_EQUAL(exp_avg.size(), grad.size());
    for (std::size_t i = 0; i < grad.size(); ++i)  // (1 - beta1) * grad after one step
      TS_TEST(exp_avg[i] == 0.1 * grad[i], boost::test_tools::tolerance(1e-6));
    const ShardedOptimStateDict saved = sharded_optim_state_dict(*model, opt);
    TS_TEST(saved.state_names == (std::set<std::string>{"exp_avg", "exp_avg_sq", "step"}));
    optim::AdamW fresh(model->parameters(), optim::AdamWOptions{});
    load_sharded_optim_state_dict(*model, fresh, PieceSet(saved.pieces), saved);
    const auto reloaded = gathered(fresh);
    TS_TEST((reloaded == got));
  });
}
