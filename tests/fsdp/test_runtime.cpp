// The FSDP runtime: flat-parameter layout, sharded training against the plain model on the same
// global batch (every strategy, world sizes, use_orig_params, prefetch modes), the schedule's
// events, gradient accumulation, clip_grad_norm_, full state dicts and the error cases.
// One file over 600 lines: every case drives the same harness (tests/support/runtime_harness.h).
#define BOOST_TEST_MODULE fsdp_runtime
#include <atomic>
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "comm/fake/fake_process_group.h"
#include "comm/threads/run_ranks.h"
#include "core/autograd.h"
#include "core/error.h"
#include "core/nn/nn.h"
#include "core/ops.h"
#include "core/optim/optim.h"
#include "core/random.h"
#include "core/warnings.h"
#include "fsdp/attribute_forwarding.h"
#include "fsdp/clip_grad_norm.h"
#include "fsdp/flat_param_layout.h"
#include "fsdp/full_state_dict.h"
#include "fsdp/memory_bound.h"
#include "fsdp/runtime.h"
#include "fsdp/sharding.h"
#include "fsdp/summon_full_params.h"
#include "tests/support/runtime_harness.h"
#include "tests/support/thread_safe_test.h"

using namespace fsdp;
using namespace fsdp::testing;
namespace bdata = boost::unit_test::data;

namespace {

// The message of the E that fn throws ("no E thrown" when it throws none).
template <typename E>
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return "no E thrown";
}

void check_close(const RunResult& got, const RunResult& want, double rtol = 1e-5) {
  TS_REQUIRE_EQUAL(got.losses.size(), want.losses.size());
  for (std::size_t i = 0; i < got.losses.size(); ++i)
    TS_TEST(got.losses[i] == want.losses[i], boost::test_tools::tolerance(rtol));
  std::map<std::string, std::vector<double>> w(want.params.begin(), want.params.end());
  TS_REQUIRE_EQUAL(got.params.size(), want.params.size());
  for (const auto& [name, values] : got.params) {
    BOOST_TEST_CONTEXT("parameter " << name) {
      TS_REQUIRE(w.count(name) == 1u);
      TS_REQUIRE_EQUAL(values.size(), w[name].size());
      for (std::size_t i = 0; i < values.size(); ++i)
        TS_TEST(values[i] == w[name][i], boost::test_tools::tolerance(1e-4));
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(layout)

BOOST_AUTO_TEST_CASE(linear_3x3_on_4_ranks) {
  // Upstream's worked example: Linear(3, 3, bias=False) on 4 ranks.
  auto l = flat_param_layout({9}, 4, /*align=*/false, 4, /*sharded=*/true);
  TS_TEST(l.unpadded_numel == 9);
  TS_TEST(l.shard_numel == 3);
  TS_TEST(l.padded_numel == 12);
  TS_TEST(l.shard_begin(3) == 9);
  TS_TEST(l.shard_end(3) == 9);  // the last rank holds only padding
  auto i2 = l.shard_info(0, 2);
  TS_TEST(i2.in_shard);
  TS_TEST(i2.offset_in_shard == 0);
  TS_TEST(i2.numel_in_shard == 3);
  TS_TEST(i2.intra_param_start == 6);
  TS_TEST(i2.intra_param_end == 8);
  TS_TEST(!l.shard_info(0, 3).in_shard);
}

BOOST_AUTO_TEST_CASE(use_orig_params_alignment) {
  // float32: 16-byte alignment = 4 elements; padding before each misaligned parameter and to a
  // multiple of the world size at the end.
  auto l = flat_param_layout({3, 5, 2}, 4, /*align=*/true, 3, /*sharded=*/true);
  TS_TEST((l.offsets == std::vector<std::int64_t>{0, 4, 12}));
  TS_REQUIRE_EQUAL(l.paddings.size(), 3u);
  TS_TEST(l.paddings[0].start == 3);
  TS_TEST(l.paddings[0].numel == 1);
  TS_TEST(l.paddings[1].start == 9);
  TS_TEST(l.paddings[1].numel == 3);
  TS_TEST(l.paddings[2].start == 14);
  TS_TEST(l.paddings[2].numel == 1);
  TS_TEST(l.unpadded_numel == 15);
  TS_TEST(l.shard_numel == 5);
  // Parameter 1 ([4, 9)) spans ranks 0 and 1.
  auto a = l.shard_info(1, 0), b = l.shard_info(1, 1);
  TS_TEST(a.offset_in_shard == 4);
  TS_TEST(a.numel_in_shard == 1);
  TS_TEST(b.offset_in_shard == 0);
  TS_TEST(b.numel_in_shard == 4);
  TS_TEST(b.intra_param_start == 1);
  // NO_SHARD: no right padding, the shard is everything.
  auto n = flat_param_layout({3, 5}, 4, false, 3, false);
  TS_TEST(n.shard_numel == 8);
  TS_TEST(n.padded_numel == 8);
}

BOOST_AUTO_TEST_CASE(overflow_is_an_error) {
  const std::int64_t big = std::numeric_limits<std::int64_t>::max();
  TS_CHECK_THROW(flat_param_layout({big, big}, 4, false, 2, true), ValueError);
}

BOOST_AUTO_TEST_CASE(divide_factors) {
  auto f = [](int w) {
    auto d = gradient_divide_factors(w);
    return std::make_pair(d.pre, d.post);
  };
  TS_TEST((f(1) == std::make_pair(1.0, 1.0)));
  TS_TEST((f(2) == std::make_pair(2.0, 1.0)));
  TS_TEST((f(3) == std::make_pair(2.0, 1.5)));
  TS_TEST((f(4) == std::make_pair(2.0, 2.0)));
  TS_TEST((f(8) == std::make_pair(4.0, 2.0)));
  TS_TEST((f(16) == std::make_pair(4.0, 4.0)));
}

BOOST_AUTO_TEST_CASE(which_units_free_their_parameters_after_forward) {
  using S = ShardingStrategy;
  for (S s : {S::FULL_SHARD, S::HYBRID_SHARD}) {
    TS_TEST(frees_after_forward(s, false));
    TS_TEST(!frees_after_forward(s, true));  // the root keeps them for backward
  }
  for (S s : {S::SHARD_GRAD_OP, S::_HYBRID_SHARD_ZERO2, S::NO_SHARD}) {
    TS_TEST(!frees_after_forward(s, false));
    TS_TEST(!frees_after_forward(s, true));
  }
}

// The bound fsdp-plan predicts and train_gpt checks: the root and the units that keep their
// parameters through backward all count; of the resharding units only the two largest.
BOOST_AUTO_TEST_CASE(memory_bound_counts_kept_units_and_the_two_largest_others) {
  using S = ShardingStrategy;
  const std::vector<UnshardedUnit> units{
      {100, S::FULL_SHARD, true},    {7, S::FULL_SHARD, false},  {30, S::HYBRID_SHARD, false},
      {20, S::SHARD_GRAD_OP, false}, {50, S::FULL_SHARD, false}, {9, S::_HYBRID_SHARD_ZERO2, false},
      {3, S::NO_SHARD, false}};
  TS_TEST(peak_unsharded_bytes(units) == 100 + 20 + 9 + 3 + 50 + 30);
  TS_TEST(peak_unsharded_bytes({}) == 0);
  TS_TEST(peak_unsharded_bytes({{5, S::FULL_SHARD, false}}) == 5);
  TS_TEST(memory_bound_bytes(1000, 212, 34) == 1246);
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  try {
    memory_bound_bytes(max, 1, 0);
    BOOST_FAIL("expected ValueError");
  } catch (const ValueError& e) {
    TS_TEST(std::string(e.what()) == "the peak bytes with activations does not fit in 64 bits (" +
                                         std::to_string(max) + " + 1)");
  }
  BOOST_CHECK_THROW(peak_unsharded_bytes({{max, S::NO_SHARD, false}, {1, S::NO_SHARD, true}}),
                    ValueError);
}

BOOST_AUTO_TEST_SUITE_END()

const std::vector<ShardingStrategy> kFlatStrategies = {
    ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP, ShardingStrategy::NO_SHARD};

BOOST_AUTO_TEST_SUITE(sharded_vs_plain)

BOOST_DATA_TEST_CASE(strategies_world_sizes_orig_params,
                     bdata::make(kFlatStrategies) * bdata::make({1, 2, 3, 4}) *
                         bdata::make({false, true}),
                     strategy, world, orig) {
  RunOptions o;
  o.strategy = strategy;
  o.use_orig_params = orig;
  check_close(run_mlp(world, o), run_mlp_plain(world, o));
}

BOOST_DATA_TEST_CASE(hybrid_strategies,
                     bdata::make({ShardingStrategy::HYBRID_SHARD,
                                  ShardingStrategy::_HYBRID_SHARD_ZERO2}) *
                         bdata::make({false, true}),
                     strategy, orig) {
  RunOptions o;
  o.strategy = strategy;
  o.use_orig_params = orig;
  o.node_size = 2;
  check_close(run_mlp(4, o), run_mlp_plain(4, o));
}

BOOST_AUTO_TEST_CASE(prefetch_modes_and_adamw) {
  for (auto prefetch : {std::optional<BackwardPrefetch>(BackwardPrefetch::BACKWARD_PRE),
                        std::optional<BackwardPrefetch>(BackwardPrefetch::BACKWARD_POST),
                        std::optional<BackwardPrefetch>()})
    for (bool fwd : {false, true}) {
      RunOptions o;
      o.backward_prefetch = prefetch;
      o.forward_prefetch = fwd;
      o.optimizer = "adamw";
      check_close(run_mlp(2, o), run_mlp_plain(2, o));
    }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(schedule)

// The events of the second iteration (the first one records the execution order).
std::string second_step_events(const RunOptions& o) {
  std::string out;
  on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto fsdp = wrap_mlp(mlp(7), pg, o);
    for (int step = 0; step < 2; ++step) {
      fsdp->clear_runtime_events();
      Tensor x = ones({2, 6});
      (*fsdp)(x).tensor().sum().backward();
    }
    if (pg->rank() == 0) out = to_string(fsdp->runtime_events());
  });
  return out;
}

RunOptions schedule_options(ShardingStrategy s, std::optional<BackwardPrefetch> p, bool fwd) {
  RunOptions o;
  o.strategy = s;
  o.backward_prefetch = p;
  o.forward_prefetch = fwd;
  return o;
}

const auto kPre = std::optional<BackwardPrefetch>(BackwardPrefetch::BACKWARD_PRE);
const auto kPost = std::optional<BackwardPrefetch>(BackwardPrefetch::BACKWARD_POST);
const auto kNone = std::optional<BackwardPrefetch>();

// Root "" holds Linear 0; units "2" and "3" run in that order. The root keeps its parameters
// from forward to backward under FULL_SHARD; backward runs 3, 2, root.
BOOST_AUTO_TEST_CASE(full_shard) {
  TS_TEST(second_step_events(schedule_options(ShardingStrategy::FULL_SHARD, kPre, false)) ==
          "Unshard(), Unshard(2), Reshard(2), Unshard(3), Reshard(3), "
          "Unshard(3), Prefetch(2), Reshard(3), ReduceGrad(3), Reshard(2), ReduceGrad(2), "
          "Reshard(), ReduceGrad()");
  TS_TEST(second_step_events(schedule_options(ShardingStrategy::FULL_SHARD, kPost, false)) ==
          "Unshard(), Unshard(2), Reshard(2), Unshard(3), Reshard(3), "
          "Unshard(3), Reshard(3), Prefetch(2), ReduceGrad(3), Reshard(2), ReduceGrad(2), "
          "Reshard(), ReduceGrad()");
  TS_TEST(second_step_events(schedule_options(ShardingStrategy::FULL_SHARD, kNone, false)) ==
          "Unshard(), Unshard(2), Reshard(2), Unshard(3), Reshard(3), "
          "Unshard(3), Reshard(3), ReduceGrad(3), Unshard(2), Reshard(2), ReduceGrad(2), "
          "Reshard(), ReduceGrad()");
  // forward_prefetch: the next unit's all-gather is issued when the current one starts.
  TS_TEST(second_step_events(schedule_options(ShardingStrategy::FULL_SHARD, kNone, true)) ==
          "Unshard(), Prefetch(2), Prefetch(3), Reshard(2), Reshard(3), "
          "Unshard(3), Reshard(3), ReduceGrad(3), Unshard(2), Reshard(2), ReduceGrad(2), "
          "Reshard(), ReduceGrad()");
}

BOOST_AUTO_TEST_CASE(shard_grad_op_and_no_shard) {
  // SHARD_GRAD_OP keeps every unit unsharded from forward to backward.
  TS_TEST(second_step_events(schedule_options(ShardingStrategy::SHARD_GRAD_OP, kPre, false)) ==
          "Unshard(), Unshard(2), Unshard(3), Reshard(3), ReduceGrad(3), Reshard(2), "
          "ReduceGrad(2), Reshard(), ReduceGrad()");
  // NO_SHARD never gathers: only the all-reduces of the gradients.
  TS_TEST(second_step_events(schedule_options(ShardingStrategy::NO_SHARD, kPre, true)) ==
          "ReduceGrad(3), ReduceGrad(2), ReduceGrad()");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(gradients)

// Two micro-batches then one SGD step, sharded on 2 ranks (the first micro-batch under
// no_sync() or not) against the plain model on both global micro-batches.
std::vector<std::pair<std::string, std::vector<double>>> accumulate(bool sharded, bool use_no_sync,
                                                                    RunOptions o) {
  std::vector<std::pair<std::string, std::vector<double>>> params;
  auto batch = [](int micro, std::int64_t rows) {
    Generator gen(50 + static_cast<std::uint64_t>(micro));
    std::vector<double> x(static_cast<std::size_t>(rows * 6)),
        y(static_cast<std::size_t>(rows * 4));
    for (auto& v : x) v = gen.uniform();
    for (auto& v : y) v = gen.uniform();
    return std::make_pair(from_vector(x, {rows, 6}), from_vector(y, {rows, 4}));
  };
  if (!sharded) {
    auto model = mlp(7);
    optim::SGD opt(model->parameters(), optim::SGDOptions{});
    for (int micro = 0; micro < 2; ++micro) {
      auto [x, y] = batch(micro, 4);
      mse_loss((*model)(x).tensor(), y).backward();
    }
    opt.step();
    for (const auto& [n, t] : model->named_parameters()) params.emplace_back(n, t.to_vector());
    return params;
  }
  on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto fsdp = wrap_mlp(mlp(7), pg, o);
    optim::SGD opt(fsdp->parameters(), optim::SGDOptions{});
    for (int micro = 0; micro < 2; ++micro) {
      auto [x, y] = batch(micro, 4);
      auto run = [&] {
        Tensor out = (*fsdp)(x.narrow(0, 2 * pg->rank(), 2).contiguous()).tensor();
        mse_loss(out, y.narrow(0, 2 * pg->rank(), 2).contiguous()).backward();
      };
      if (micro == 0 && use_no_sync) {
        auto guard = fsdp->no_sync();
        fsdp->clear_runtime_events();
        run();
        for (const auto& e : fsdp->runtime_events())
          TS_TEST((e.kind != RuntimeEvent::Kind::ReduceGrad), "reduced under no_sync: " << e.str());
      } else {
        run();
      }
    }
    opt.step();
    auto state = full_state_dict(*fsdp);
    if (pg->rank() == 0)
      for (const auto& [n, t] : state) params.emplace_back(n, t.to_vector());
  });
  return params;
}

BOOST_DATA_TEST_CASE(accumulation_with_and_without_no_sync,
                     bdata::make(kFlatStrategies) * bdata::make({false, true}) *
                         bdata::make({false, true}),
                     strategy, use_no_sync, orig) {
  RunOptions o;
  o.strategy = strategy;
  o.use_orig_params = orig;
  RunResult got, want;
  got.params = accumulate(true, use_no_sync, o);
  want.params = accumulate(false, false, o);
  check_close(got, want);
}

BOOST_DATA_TEST_CASE(clip_grad_norm_equals_the_unsharded_norm,
                     bdata::make(kFlatStrategies) * bdata::make({false, true}), strategy, orig) {
  auto x = from_vector(std::vector<double>(24, 0.5), {4, 6});
  // The plain model's total gradient norm over the whole batch.
  auto model = mlp(7);
  (*model)(x).tensor().sum().backward();
  double sq = 0;
  for (const auto& p : model->parameters())
    for (double v : p.grad().to_vector()) sq += v * v;
  const double want = std::sqrt(sq);
  RunOptions o;
  o.strategy = strategy;
  o.use_orig_params = orig;
  on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto fsdp = wrap_mlp(mlp(7), pg, o);
    // sum() over 2 rows per rank, gradients averaged over 2 ranks: twice the plain gradient's
    // half, i.e. the plain gradient / 2.
    (*fsdp)(x.narrow(0, 2 * pg->rank(), 2).contiguous()).tensor().sum().backward();
    const double norm = clip_grad_norm_(*fsdp, 1e-3);
    TS_TEST(norm == want / 2, boost::test_tools::tolerance(1e-6));
    double clipped = 0;
    for (auto* u : fsdp->fsdp_units())
      if (u->handle())
        for (double v : u->handle()->flat_param().grad().to_vector()) clipped += v * v;
    if (is_sharded(strategy)) pg->all_reduce(&clipped, 1, DType::Float64);
    TS_TEST(std::sqrt(clipped) == 1e-3, boost::test_tools::tolerance(1e-3));
  });
}

// An ignored module's gradients take part in clip_grad_norm_ as upstream's: counted in the total
// norm as this rank's own (not reduced) and scaled with the others; for the infinity norm the
// largest over the ranks. They were left out (torch 2.15's norms and steps differed).
BOOST_DATA_TEST_CASE(clip_grad_norm_counts_ignored_modules,
                     bdata::make(kFlatStrategies) * bdata::make({false, true}) *
                         bdata::make({2.0, std::numeric_limits<double>::infinity()}),
                     strategy, orig, norm_type) {
  const bool inf = std::isinf(norm_type);
  auto x = from_vector(std::vector<double>(24, 0.5), {4, 6});
  // The managed parameters' norm is the plain model's (whole batch) over 2.
  auto model = mlp(7);
  (*model)(x).tensor().sum().backward();
  double managed = 0;
  for (const auto& [name, p] : model->named_parameters())
    if (name.rfind("2.", 0) != 0)
      for (double v : p.grad().to_vector())
        managed = inf ? std::max(managed, std::abs(v) / 2) : managed + v * v / 4;
  on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto m = mlp(7);
    const nn::ModulePtr ignored = m->child("2");
    WrapperOptions w;
    w.process_group = pg;
    w.sharding_strategy = strategy;
    w.use_orig_params = orig;
    w.ignored_modules = std::vector<nn::ModulePtr>{ignored};
    m->replace_child("3", FullyShardedDataParallel::make(m->child("3"), w));
    auto fsdp = FullyShardedDataParallel::make(m, w);
    (*fsdp)(x.narrow(0, 2 * pg->rank(), 2).contiguous()).tensor().sum().backward();
    double local = 0;  // this rank's ignored gradients
    for (const auto& p : ignored->parameters())
      for (double v : p.grad().to_vector())
        local = inf ? std::max(local, std::abs(v)) : local + v * v;
    double want = inf ? std::max(managed, local) : std::sqrt(managed + local);
    if (inf) pg->all_reduce(&want, 1, DType::Float64, comm::ReduceOp::Max);
    const double norm = clip_grad_norm_(*fsdp, 1e-3, norm_type);
    TS_TEST(norm == want, boost::test_tools::tolerance(1e-6));
    const double coef = 1e-3 / (want + 1e-6);
    double scaled = 0;
    for (const auto& p : ignored->parameters())
      for (double v : p.grad().to_vector())
        scaled = inf ? std::max(scaled, std::abs(v)) : scaled + v * v;
    TS_TEST((inf ? scaled : std::sqrt(scaled)) == coef * (inf ? local : std::sqrt(local)),
            boost::test_tools::tolerance(1e-5));
  });
}

// With use_orig_params a unit may hold frozen parameters beside trainable ones; their part of the
// flat gradient is not a gradient of theirs (upstream gives them none), so clip_grad_norm_ leaves
// it out, as torch 2.15's FSDP1 (which sums the original parameters' gradients). It was counted.
BOOST_DATA_TEST_CASE(clip_grad_norm_leaves_out_frozen_parameters,
                     bdata::make(kFlatStrategies) *
                         bdata::make({2.0, std::numeric_limits<double>::infinity()}),
                     strategy, norm_type) {
  const bool inf = std::isinf(norm_type);
  auto x = from_vector(std::vector<double>(24, 0.5), {4, 6});
  auto freeze = [](nn::Module& m) {
    Tensor w = m.child("0")->param("weight");
    w.requires_grad_(false);
  };
  auto model = mlp(7);
  freeze(*model);
  (*model)(x).tensor().sum().backward();
  double want = 0;  // the plain gradients over 2 (see clip_grad_norm_equals_the_unsharded_norm)
  for (const auto& p : model->parameters())
    if (p.grad().defined())
      for (double v : p.grad().to_vector())
        want = inf ? std::max(want, std::abs(v) / 2) : want + v * v / 4;
  if (!inf) want = std::sqrt(want);
  RunOptions o;
  o.strategy = strategy;
  o.use_orig_params = true;
  on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto m = mlp(7);
    freeze(*m);  // the root unit: 0.weight frozen, 0.bias trainable
    auto fsdp = wrap_mlp(m, pg, o);
    (*fsdp)(x.narrow(0, 2 * pg->rank(), 2).contiguous()).tensor().sum().backward();
    const double norm = clip_grad_norm_(*fsdp, 1e-3, norm_type);
    TS_TEST(norm == want, boost::test_tools::tolerance(1e-6));
  });
}

// use_orig_params: an original parameter with no element in this rank's shard has no gradient
// (None, upstream's _use_sharded_grad_views), not an empty one, so optimizers skip it there as
// torch's do (AdamW keeps no state for it on that rank); the others get views of the shard.
BOOST_AUTO_TEST_CASE(orig_params_outside_the_shard_have_no_grad) {
  on_ranks(2, [](std::shared_ptr<comm::ProcessGroup> pg) {
    manual_seed(3);
    auto lin = std::make_shared<nn::Linear>(4, 2);  // weight 8 + bias 2: 5 a rank
    WrapperOptions o;
    o.process_group = pg;
    o.use_orig_params = true;
    auto fsdp = FullyShardedDataParallel::make(lin, o);
    (*fsdp)(from_vector(std::vector<double>(8, 0.5), {2, 4})).tensor().sum().backward();
    std::map<std::string, Tensor> p;
    for (const auto& [name, t] : fsdp->named_parameters()) p[clean_tensor_name(name)] = t;
    TS_REQUIRE(p.count("weight") == 1u);
    TS_REQUIRE(p.count("bias") == 1u);
    TS_TEST(p["weight"].grad().defined());
    TS_TEST(p["weight"].grad().numel() == (pg->rank() == 0 ? 5 : 3));
    TS_TEST(p["bias"].grad().defined() == (pg->rank() == 1));
    optim::AdamW opt(fsdp->parameters(), optim::AdamWOptions{});
    opt.step();
    const auto& params = opt.params(0);
    for (std::size_t i = 0; i < params.size(); ++i)  // stepped only where there is a gradient
      TS_TEST(opt.state(0, i).step == (params[i].grad().defined() ? 1 : 0));
  });
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(errors)

BOOST_AUTO_TEST_CASE(shared_parameter_across_units_names_both_fqns) {
  auto a = std::make_shared<nn::Linear>(4, 4);
  auto b = std::make_shared<nn::Linear>(4, 4);
  b->set_parameter("weight", a->param("weight"));
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      a, std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{b})});
  WrapperOptions o;
  o.process_group = std::make_shared<comm::FakeProcessGroup>(0, 2);
  model->replace_child("1", FullyShardedDataParallel::make(model->child("1"), o));
  try {
    FullyShardedDataParallel::make(model, o);
    TS_FAIL("expected a ValueError");
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    TS_TEST(msg.find("'0.weight'") != std::string::npos, msg);
    TS_TEST(msg.find("'1.0.weight'") != std::string::npos, msg);
  }
}

BOOST_AUTO_TEST_CASE(ranks_with_different_models) {
  std::atomic<int> errors{0};
  try {
    on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
      auto model = std::make_shared<nn::Linear>(4, pg->rank() == 0 ? 4 : 5);
      WrapperOptions o;
      o.process_group = pg;
      auto fsdp = FullyShardedDataParallel::make(model, o);
      try {
        (*fsdp)(ones({1, 4}));
      } catch (const RuntimeError& e) {
        const std::string msg = e.what();
        if (msg.find("wrapped different models") != std::string::npos) ++errors;
        throw;
      }
    });
  } catch (const comm::RankFailedError&) {
  }
  TS_TEST(errors.load() == 2);
}

BOOST_AUTO_TEST_CASE(calling_a_submodule_inside_a_unit_directly) {
  on_ranks(2, [](std::shared_ptr<comm::ProcessGroup> pg) {
    auto model = mlp(7);
    auto fsdp = wrap_mlp(model, pg, RunOptions{});
    (*fsdp)(ones({1, 6})).tensor().sum().backward();
    // Linear 0 belongs to the root unit, which is resharded between steps.
    try {
      (*model->child("0"))(ones({1, 6}));
      TS_FAIL("expected a RuntimeError");
    } catch (const RuntimeError& e) {
      const std::string msg = e.what();
      TS_TEST(msg.find("has been freed") != std::string::npos, msg);
      TS_TEST(msg.find("call the FSDP unit") != std::string::npos, msg);
    }
  });
}

BOOST_AUTO_TEST_CASE(flattening_validations) {
  WrapperOptions o;
  o.process_group = std::make_shared<comm::FakeProcessGroup>(0, 2);
  auto mixed = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(2, 2), std::make_shared<nn::Linear>(2, 2)});
  Tensor w = mixed->child("1")->param("weight");
  w.requires_grad_(false);
  TS_CHECK_EXCEPTION(FullyShardedDataParallel::make(mixed, o), ValueError, [](const auto& e) {
    return std::string(e.what()).find(
               "Must flatten tensors with uniform `requires_grad` when "
               "`use_orig_params=False`") != std::string::npos;
  });
  auto dtypes = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(2, 2), std::make_shared<nn::Linear>(2, 2)});
  dtypes->child("1")->to(DType::Float64);
  TS_CHECK_EXCEPTION(FullyShardedDataParallel::make(dtypes, o), ValueError, [](const auto& e) {
    return std::string(e.what()).find("Must flatten tensors with uniform dtype but got") !=
           std::string::npos;
  });
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(memory)

// Per-rank parameter memory during a forward: own shards + at most two unsharded units (the
// current one and the prefetched one) beside the small root.
BOOST_AUTO_TEST_CASE(peak_parameter_memory_is_bounded) {
  on_ranks(2, [](std::shared_ptr<comm::ProcessGroup> pg) {
    manual_seed(3);
    std::vector<nn::ModulePtr> layers{std::make_shared<nn::Linear>(8, 64)};
    for (int i = 0; i < 6; ++i) layers.push_back(std::make_shared<nn::Linear>(64, 64));
    auto model = std::make_shared<nn::Sequential>(layers);
    WrapperOptions o;
    o.process_group = pg;
    o.forward_prefetch = true;
    for (int i = 1; i <= 6; ++i)
      model->replace_child(std::to_string(i),
                           FullyShardedDataParallel::make(model->child(std::to_string(i)), o));
    auto fsdp = FullyShardedDataParallel::make(model, o);
    std::int64_t shards = 0, largest = 0;
    for (auto* u : fsdp->fsdp_units()) {
      shards += static_cast<std::int64_t>(u->handle()->local_shard().nbytes());
      largest = std::max<std::int64_t>(largest, u->handle()->layout().padded_numel * 4);
    }
    autograd::NoGradGuard no_grad;
    (*fsdp)(ones({1, 8}));  // records the order
    auto stats = std::make_shared<MemoryStats>();
    {
      MemoryStatsScope scope(stats);
      (*fsdp)(ones({1, 8}));
    }
    const double peak = static_cast<double>(shards + stats->peak_bytes.load());
    const double bound = static_cast<double>(shards + 2 * largest);
    TS_TEST_MESSAGE("rank " << pg->rank() << ": peak " << peak << " bound " << bound);
    TS_TEST(peak <= 1.1 * bound);
    TS_TEST(stats->current_bytes.load() == 0);  // everything unsharded was freed
  });
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(init_and_summon)

// CPU offload on the CPU device: accepted, said once per rank, and training is unchanged
// (gradient accumulation too: the gradients never leave host memory). Under FSDP_TEST_DEVICE (a
// device run), the offloaded run really moves the shards to the host and gives the same losses.
BOOST_AUTO_TEST_CASE(cpu_offload_is_accepted_with_a_note_and_changes_nothing) {
  RunOptions o;
  o.steps = 3;
  const RunResult plain = run_mlp(2, o);
  o.offload_params = true;
  std::atomic<int> notes{0};
  on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    WarningCapture cap;
    auto fsdp = wrap_mlp(mlp(7), pg, o);
    for (int i = 0; i < 2; ++i)
      (*fsdp)(from_vector(std::vector<double>(12, 0.5), {2, 6})).tensor().sum().backward();
    for (const auto& w : cap.warnings())
      if (w.message.find("CPUOffload(offload_params=True)") != std::string::npos) ++notes;
  });
  TS_TEST(notes.load() == 2);
  const RunResult offloaded = run_mlp(2, o);
  TS_TEST(offloaded.losses == plain.losses, boost::test_tools::per_element());
}

// On the test device (FSDP_TEST_DEVICE), offloaded shards and gradients are host tensors, the
// shards in page-locked memory where the device type has it (CUDA: cudaHostAlloc, so the copies
// to the GPU are DMA); on the CPU device nothing moves.
BOOST_AUTO_TEST_CASE(offloaded_shards_are_host_tensors_pinned_where_the_device_pins) {
  RunOptions o;
  o.offload_params = true;
  on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    const Device d = test_device(pg->rank());
    auto model = mlp(7);
    model->to(d);
    auto fsdp = wrap_mlp(model, pg, o);
    (*fsdp)(ones({2, 6}, TensorOptions(DType::Float32, d))).tensor().sum().backward();
    const bool pins = !d.is_cpu() && pinned_host_allocator(d.type) != nullptr;
    for (auto* u : fsdp->fsdp_units()) {
      const FlatParamHandle* h = u->handle();
      TS_TEST(h->offloads_params() == !d.is_cpu());
      TS_TEST(h->local_shard().device().is_cpu());
      TS_TEST(h->local_shard().storage()->is_pinned() == pins);
      TS_TEST(h->flat_param().grad().device().is_cpu());
    }
  });
}

BOOST_DATA_TEST_CASE(summon_full_params_reads_writes_back_and_gives_grads,
                     bdata::make({false, true}), orig) {
  auto plain = mlp(7);
  const std::vector<double> w0 = plain->child("0")->param("weight").to_vector();
  Tensor x = from_vector(std::vector<double>(24, 0.25), {4, 6});
  (*plain)(x).tensor().sum().backward();
  const std::vector<double> g0 = plain->child("0")->param("weight").grad().to_vector();
  RunOptions o;
  o.use_orig_params = orig;
  on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto model = mlp(7);
    auto fsdp = wrap_mlp(model, pg, o);
    (*fsdp)(x.narrow(0, 2 * pg->rank(), 2).contiguous()).tensor().sum().backward();
    {
      SummonFullParams full(*fsdp, /*writeback=*/false, false, /*with_grads=*/orig);
      Tensor w = model->child("0")->param("weight");
      TS_TEST((w.shape() == Shape{10, 6}));
      TS_TEST(w.to_vector() == w0, boost::test_tools::per_element());
      if (orig) {
        const auto g = w.grad().to_vector();
        TS_REQUIRE_EQUAL(g.size(), g0.size());
        for (std::size_t i = 0; i < g.size(); ++i)
          TS_TEST(g[i] == g0[i] / 2, boost::test_tools::tolerance(1e-6));
      }
      w.fill_(0.5);  // not written back
    }
    const auto after = full_state_dict(*fsdp, false).front().second.to_vector();  // collective
    TS_TEST(after == w0, boost::test_tools::per_element());
    {
      SummonFullParams full(*fsdp, /*writeback=*/true);
      Tensor w = model->child("0")->param("weight");
      w.fill_(0.5);
    }
    const auto written = full_state_dict(*fsdp, false).front().second.to_vector();  // collective
    TS_TEST(written == std::vector<double>(60, 0.5), boost::test_tools::per_element());
    // Upstream's types and words (torch 2.15's _validate_unshard_params_args).
    TS_TEST(error_of<NotImplementedError>([&] { SummonFullParams(*fsdp, true, true); }) ==
            "writeback=True and rank0_only=True is not supported yet");
    if (!orig)
      TS_TEST(error_of<NotImplementedError>([&] { SummonFullParams(*fsdp, false, false, true); }) ==
              "with_grads=True, use_orig_params=False, offload_to_cpu=False is not supported yet "
              "(unit '')");
    // Training goes on after a summon: the shards are used again.
    (*fsdp)(x.narrow(0, 2 * pg->rank(), 2).contiguous()).tensor().sum().backward();
  });
}

// Inside summon_full_params the model's named_parameters() are the original parameters under
// their names, whole, with use_orig_params or without (upstream's unflatten_as_params: code that
// reads or edits the full model by name works either way); outside, the flat parameters again.
// Without use_orig_params they were the flat parameters ("_flat_param") inside too.
BOOST_DATA_TEST_CASE(summon_full_params_names_the_original_parameters, bdata::make({false, true}),
                     orig) {
  std::vector<std::string> want;
  std::map<std::string, std::vector<double>> values;
  for (const auto& [name, p] : mlp(7)->named_parameters()) {
    want.push_back(name);
    values[name] = p.to_vector();
  }
  RunOptions o;
  o.use_orig_params = orig;
  on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto fsdp = wrap_mlp(mlp(7), pg, o);
    auto names = [&] {
      std::vector<std::string> out;
      for (const auto& [name, p] : fsdp->named_parameters()) out.push_back(clean_tensor_name(name));
      return out;
    };
    const std::vector<std::string> outside = names();
    {
      SummonFullParams full(*fsdp, /*writeback=*/true);
      TS_TEST(names() == want, boost::test_tools::per_element());
      for (const auto& [name, p] : fsdp->named_parameters())
        TS_TEST(p.to_vector() == values.at(clean_tensor_name(name)),
                boost::test_tools::per_element());
      autograd::NoGradGuard no_grad;
      for (const auto& [name, p] : fsdp->named_parameters()) {
        Tensor t = p;
        t.fill_(0.25);  // by name, written back
      }
    }
    TS_TEST(names() == outside, boost::test_tools::per_element());
    if (!orig)
      TS_TEST(
          outside == (std::vector<std::string>{"_flat_param", "2._flat_param", "3._flat_param"}),
          boost::test_tools::per_element());
    for (const auto& [name, t] : full_state_dict(*fsdp, false))
      TS_TEST(t.to_vector() == std::vector<double>(std::size_t(t.numel()), 0.25),
              boost::test_tools::per_element());
    (*fsdp)(from_vector(std::vector<double>(12, 0.5), {2, 6})).tensor().sum().backward();
  });
}

// summon_full_params' misuse is refused on every rank with one line, as upstream's: a summon
// inside a forward, a second summon of a unit one already holds, a forward or a backward inside
// one (each of these ended the process: the summon's exit wrote back parameters that the
// forward had freed). A full state dict inside one reads what it holds, as upstream's, and
// training goes on afterwards.
BOOST_AUTO_TEST_CASE(summon_full_params_misuse_is_refused) {
  on_ranks(2, [](std::shared_ptr<comm::ProcessGroup> pg) {
    auto model = mlp(7);
    auto fsdp = wrap_mlp(model, pg, RunOptions{});
    const Tensor x = from_vector(std::vector<double>(12, 0.25), {2, 6});
    auto error = [](const std::function<void()>& fn) {
      try {
        fn();
      } catch (const std::exception& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    };
    std::unique_ptr<SummonFullParams> inner;
    HookHandle hook = model->child("1")->register_forward_pre_hook(
        [&](nn::Module&, const nn::Args&) -> std::optional<nn::Args> {
          inner = std::make_unique<SummonFullParams>(*fsdp);
          return std::nullopt;
        });
    const std::string in_forward = error([&] { (*fsdp)(x); });
    hook.remove();
    TS_TEST(in_forward == "Cannot manually unshard parameters during forward/backward");
    std::string nested, forward, backward, unit_then_root;
    Tensor y = (*fsdp)(x).tensor().sum();
    {
      SummonFullParams outer(*fsdp);
      nested = error([&] { SummonFullParams again(*fsdp); });
      forward = error([&] { (*fsdp)(x); });
      backward = error([&] { y.backward(); });
    }
    {
      SummonFullParams unit(*fsdp->fsdp_units()[1]);  // the unit wrapping "2"
      unit_then_root = error([&] { SummonFullParams root(*fsdp); });
    }
    TS_TEST(nested ==
            "Cannot manually unshard parameters when already unsharding parameters (unit '' is "
            "inside summon_full_params already)");
    TS_TEST(forward ==
            "FSDP unit '': forward inside summon_full_params (which holds unit '' unsharded): "
            "exit the context first");
    TS_TEST(backward ==
            "FSDP unit '3': backward inside summon_full_params (which holds unit '' unsharded): "
            "exit the context first");
    TS_TEST(unit_then_root ==
            "Cannot manually unshard parameters when already unsharding parameters (unit '2' "
            "is inside summon_full_params already)");
    // A full state dict inside a summon: the values it holds, writes included.
    const auto before = full_state_dict(*fsdp, false);
    std::vector<std::pair<std::string, Tensor>> inside;
    {
      SummonFullParams full(*fsdp);
      Tensor w = model->child("0")->param("weight");
      w.fill_(0.5);
      inside = full_state_dict(*fsdp, false);
    }
    TS_REQUIRE_EQUAL(inside.size(), before.size());
    for (std::size_t i = 0; i < inside.size(); ++i) {
      TS_CONTEXT(inside[i].first) {
        TS_TEST(inside[i].first == before[i].first);
        const std::vector<double> want = inside[i].first == "0.weight"
                                             ? std::vector<double>(60, 0.5)
                                             : before[i].second.to_vector();
        TS_TEST(inside[i].second.to_vector() == want, boost::test_tools::per_element());
      }
    }
    (*fsdp)(x).tensor().sum().backward();  // training goes on
    optim::SGD(fsdp->parameters(), optim::SGDOptions{}).step();
  });
}

// Each Linear is a unit and they are built in order, so materialising them unit by unit with
// reset_parameters draws what the eager constructors draw.
BOOST_DATA_TEST_CASE(meta_init_equals_eager_init, bdata::make({false, true}), orig) {
  auto build = [](Device device) {
    manual_seed(11);
    TensorOptions t(DType::Float32, device);
    return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
        std::make_shared<nn::Linear>(4, 6, true, t), std::make_shared<nn::Linear>(6, 6, true, t),
        std::make_shared<nn::Linear>(6, 3, true, t)});
  };
  auto eager = build(kCPU);
  std::map<std::string, std::vector<double>> want;
  for (const auto& [n, p] : eager->named_parameters()) want[n] = p.to_vector();
  on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto stats = std::make_shared<MemoryStats>();
    auto model = build(kMeta);
    WrapperOptions o;
    o.process_group = pg;
    o.use_orig_params = orig;
    std::shared_ptr<FullyShardedDataParallel> fsdp;
    {
      MemoryStatsScope scope(stats);
      manual_seed(11);
      for (const char* name : {"0", "1", "2"})
        model->replace_child(name, FullyShardedDataParallel::make(model->child(name), o));
      fsdp = FullyShardedDataParallel::make(model, o);
    }
    // Each rank keeps its shards only (half of the 105 elements, padded).
    TS_TEST(stats->current_bytes.load() <= static_cast<std::int64_t>((30 + 42 + 21) / 2 + 3) * 4);
    for (const auto& [n, t] : full_state_dict(*fsdp, false))
      TS_TEST(t.to_vector() == want.at(n), boost::test_tools::per_element());
  });
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(frozen)

BOOST_DATA_TEST_CASE(a_frozen_unit_reshards_after_its_backward, bdata::make({false, true}), orig) {
  auto freeze = [](const nn::ModulePtr& model) {
    for (auto& p : model->child("2")->parameters()) p.requires_grad_(false);
  };
  // Plain reference with the same frozen unit.
  auto plain = mlp(7);
  freeze(plain);
  optim::SGD opt(plain->parameters(), optim::SGDOptions{});
  Tensor x = from_vector(std::vector<double>(24, 0.3), {4, 6});
  (*plain)(x).tensor().sum().backward();
  opt.step();
  std::map<std::string, std::vector<double>> want;
  for (const auto& [n, p] : plain->named_parameters()) want[n] = p.to_vector();
  RunOptions o;
  o.use_orig_params = orig;
  on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto model = mlp(7);
    freeze(model);
    auto fsdp = wrap_mlp(model, pg, o);
    std::vector<Tensor> trainable;
    for (const auto& p : fsdp->parameters())
      if (p.requires_grad()) trainable.push_back(p);
    optim::SGD sgd(trainable, optim::SGDOptions{});
    fsdp->clear_runtime_events();
    // x requires grad so that the frozen unit's inputs carry the hook, as activations do.
    Tensor xin = x.narrow(0, 2 * pg->rank(), 2).contiguous();
    mul((*fsdp)(xin).tensor().sum(), 2.0).backward();
    sgd.step();
    const std::string events = to_string(fsdp->runtime_events());
    // Unit 2 is freed in backward, before the root reduces, not by the final catch-all.
    TS_TEST(events.find("Reshard(2), ReduceGrad(2)") == std::string::npos, events);
    const std::string backward = events.substr(events.find("ReduceGrad(3)"));
    TS_TEST(backward.find("Reshard(2)") < backward.find("ReduceGrad()"), events);
    for (const auto& [n, t] : full_state_dict(*fsdp, false))
      TS_TEST(t.to_vector() == want.at(n), boost::test_tools::tolerance(1e-5)
                                               << boost::test_tools::per_element());
  });
}

BOOST_AUTO_TEST_SUITE_END()
