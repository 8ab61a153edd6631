// FSDP mixed precision (upstream's MixedPrecision, spec §5.5): parameters all-gathered and
// computed in param_dtype over float32 shards, gradients reduced in reduce_dtype and upcast,
// buffers in buffer_dtype (saved in full precision), forward inputs cast, eval in full precision
// under FSDP_USE_FULL_PREC_IN_EVAL=1, summon_full_params in full precision, and the BatchNorm
// override of auto-wrap. (train_gpt's GPT in bf16/fp16:
// tests/examples/test_gpt_mixed_precision.cpp.)
#define BOOST_TEST_MODULE fsdp_mixed_precision
#pragma GCC diagnostic ignored "-Wrestrict"
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdlib>
#include <mutex>

#include "comm/threads/run_ranks.h"
#include "core/nn/nn.h"
#include "core/ops.h"
#include "fsdp/flat_param.h"
#include "fsdp/full_state_dict.h"
#include "fsdp/state_dict_sharded.h"
#include "fsdp/summon_full_params.h"
#include "policies/module_wrap_policy.h"
#include "tests/support/runtime_harness.h"
#include "tests/support/thread_safe_test.h"

using namespace fsdp;
using namespace fsdp::testing;
using policies::ShardingStrategy;
namespace bdata = boost::unit_test::data;

namespace {

MixedPrecision bf16_params() {
  MixedPrecision mp;
  mp.param_dtype = DType::BFloat16;
  return mp;
}

// Records the dtype of a module's weight and of its first input at each forward.
struct Seen {
  std::mutex mu;
  std::vector<DType> weight, input;
};

void watch(const nn::ModulePtr& m, Seen& seen) {
  m->register_forward_pre_hook([&seen](nn::Module& mod, const nn::Args& args) {
    std::lock_guard<std::mutex> lock(seen.mu);
    seen.weight.push_back(mod.param("weight").dtype());
    seen.input.push_back(args.positional.at(0).tensor().dtype());
    return std::optional<nn::Args>();
  });
}

Tensor batch_for(int rank) {
  std::vector<double> v(2 * 6);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.1 * double(i) - 0.4 + 0.05 * rank;
  return from_vector(v, {2, 6});
}

}  // namespace

BOOST_AUTO_TEST_SUITE(handle)

// Forward and backward compute in bf16; the optimizer sees float32 shards and float32 gradients,
// which are the gradient of the bf16 computation, upcast.
BOOST_DATA_TEST_CASE(compute_in_param_dtype_step_in_float32,
                     bdata::make({ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP,
                                  ShardingStrategy::NO_SHARD}) *
                         bdata::make({false, true}),
                     strategy, orig) {
  RunOptions o;
  o.strategy = strategy;
  o.use_orig_params = orig;
  o.mixed_precision = bf16_params();
  on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto model = mlp(7);
    Seen first, last;
    watch(model->child("0"), first);
    watch(model->child("3"), last);
    auto fsdp = wrap_mlp(model, pg, o);
    for (int step = 0; step < 2; ++step) {
      Tensor out = (*fsdp)(batch_for(pg->rank())).tensor();
      TS_TEST((out.dtype() == DType::BFloat16));
      out.to(DType::Float32).sum().backward();
    }
    for (auto* u : fsdp->fsdp_units()) {
      auto* h = u->handle();
      if (h == nullptr) continue;
      TS_TEST((h->flat_param().dtype() == DType::Float32));
      TS_TEST((h->flat_param().grad().dtype() == DType::Float32));
      TS_TEST(h->flat_param().numel() == h->local_shard().numel());
      TS_TEST((h->compute_dtype() == DType::BFloat16));
      TS_TEST((h->reduce_dtype() == DType::BFloat16));  // param_dtype alone sets it
    }
    std::lock_guard<std::mutex> lock(first.mu);
    TS_REQUIRE(first.weight.size() == 2u);
    for (DType d : first.weight) TS_TEST((d == DType::BFloat16));
    for (DType d : first.input) TS_TEST((d == DType::BFloat16));  // the root cast the input
    for (DType d : last.weight) TS_TEST((d == DType::BFloat16));
  });
}

// Mixed-precision gradients equal the float32 gradients to bf16 accuracy, and the sharded
// training follows the float32 run.
BOOST_DATA_TEST_CASE(training_follows_float32, bdata::make({"sgd", "adamw"}), optimizer) {
  RunOptions o;
  o.optimizer = optimizer;
  o.steps = 6;
  const RunResult full = run_mlp(2, o);
  o.mixed_precision = bf16_params();
  const RunResult low = run_mlp(2, o);
  TS_REQUIRE(low.losses.size() == full.losses.size());
  for (std::size_t i = 0; i < full.losses.size(); ++i)
    TS_TEST(low.losses[i] == full.losses[i], boost::test_tools::tolerance(2e-2));
  // The saved parameters are float32 master weights, close to the float32 run's.
  TS_REQUIRE(low.params.size() == full.params.size());
  for (std::size_t p = 0; p < full.params.size(); ++p)
    for (std::size_t i = 0; i < full.params[p].second.size(); ++i)
      TS_TEST(std::abs(low.params[p].second[i] - full.params[p].second[i]) < 2e-2);
}

BOOST_AUTO_TEST_CASE(keep_low_precision_grads_leaves_the_reduced_gradient_in_param_dtype) {
  RunOptions o;
  o.mixed_precision = bf16_params();
  o.mixed_precision->keep_low_precision_grads = true;
  on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto fsdp = wrap_mlp(mlp(7), pg, o);
    (*fsdp)(batch_for(pg->rank())).tensor().to(DType::Float32).sum().backward();
    for (auto* u : fsdp->fsdp_units())
      if (u->handle()) {
        TS_TEST((u->handle()->flat_param().dtype() == DType::Float32));
        TS_TEST((u->handle()->flat_param().grad().dtype() == DType::BFloat16));
      }
  });
}

// reduce_dtype alone: parameters stay float32 (the all-gather too), gradients are reduced in
// bf16 (half the reduction bytes) and upcast back.
BOOST_AUTO_TEST_CASE(reduce_dtype_alone_halves_only_the_reduction) {
  auto bytes = [](std::optional<MixedPrecision> mp) {
    RunOptions o;
    o.mixed_precision = mp;
    CommBytes b;
    std::vector<DType> grad_dtypes;
    std::mutex mu;
    on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
      auto model = mlp(7);
      Seen seen;
      watch(model->child("0"), seen);
      auto fsdp = wrap_mlp(model, pg, o);
      (*fsdp)(batch_for(pg->rank())).tensor().sum().backward();
      std::lock_guard<std::mutex> lock(mu);
      if (pg->rank() != 0) return;
      b = fsdp->comm_bytes();
      for (auto* u : fsdp->fsdp_units())
        if (u->handle()) grad_dtypes.push_back(u->handle()->flat_param().grad().dtype());
      grad_dtypes.push_back(seen.weight.at(0));
    });
    return std::make_pair(b, grad_dtypes);
  };
  MixedPrecision reduce_only;
  reduce_only.reduce_dtype = DType::BFloat16;
  const auto [full, full_dtypes] = bytes(std::nullopt);
  const auto [low, low_dtypes] = bytes(reduce_only);
  TS_TEST(full.all_gather > 0u);
  TS_TEST(low.all_gather == full.all_gather);
  TS_TEST(2 * low.reduce_scatter == full.reduce_scatter);
  for (DType d : low_dtypes) TS_TEST((d == DType::Float32));
  const auto [both, both_dtypes] = bytes(bf16_params());
  TS_TEST(2 * both.all_gather == full.all_gather);
  TS_TEST(2 * both.reduce_scatter == full.reduce_scatter);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(inputs_buffers_and_modes)

BOOST_DATA_TEST_CASE(root_input_cast_follows_cast_root_forward_inputs, bdata::make({false, true}),
                     cast_root) {
  RunOptions o;
  o.mixed_precision = bf16_params();
  o.mixed_precision->cast_root_forward_inputs = cast_root;
  on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto model = mlp(7);
    DType root_input = DType::Float64;
    model->register_forward_pre_hook([&](nn::Module&, const nn::Args& args) {
      root_input = args.positional.at(0).tensor().dtype();
      return std::optional<nn::Args>();
    });
    auto fsdp = wrap_mlp(model, pg, o);
    // Without the root's cast the caller provides the compute dtype.
    Tensor x = batch_for(pg->rank());
    if (!cast_root) x = x.to(DType::BFloat16);
    (*fsdp)(x).tensor().to(DType::Float32).sum().backward();
    TS_TEST((root_input == DType::BFloat16));
    TS_TEST((x.dtype() == (cast_root ? DType::Float32 : DType::BFloat16)));
  });
}

// A float32 input to a unit that does not cast (cast_forward_inputs false, not the root) meets
// bf16 weights: the op names the mismatch rather than computing something else.
BOOST_AUTO_TEST_CASE(uncast_float32_input_is_a_clear_error) {
  RunOptions o;
  o.mixed_precision = bf16_params();
  o.mixed_precision->cast_root_forward_inputs = false;
  on_ranks(1, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto fsdp = wrap_mlp(mlp(7), pg, o);
    try {
      (*fsdp)(batch_for(0));
      TS_FAIL("a float32 input met bf16 weights without an error");
    } catch (const std::exception& e) {
      const std::string what = e.what();
      TS_TEST(
          (what.find("float32") != std::string::npos && what.find("bfloat16") != std::string::npos),
          what);
    }
  });
}

// buffer_dtype: buffers are cast in the root's lazy init and saved in full precision.
BOOST_AUTO_TEST_CASE(buffers_cast_to_buffer_dtype_and_saved_in_full_precision) {
  RunOptions o;
  o.mixed_precision = bf16_params();
  o.mixed_precision->buffer_dtype = DType::BFloat16;
  on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto model = mlp(7);
    model->child("0")->register_buffer("scale", from_vector(std::vector<double>{0.1, 0.2}, {2}));
    auto fsdp = wrap_mlp(model, pg, o);
    TS_TEST((model->child("0")->buffer("scale").dtype() == DType::Float32));  // before lazy init
    (*fsdp)(batch_for(pg->rank())).tensor().to(DType::Float32).sum().backward();
    TS_TEST((model->child("0")->buffer("scale").dtype() == DType::BFloat16));
    const auto state = full_state_dict(*fsdp, false);
    bool found = false;
    for (const auto& [name, t] : state) {
      TS_TEST((t.dtype() == DType::Float32), name);
      if (name == "0.scale") {
        found = true;
        TS_TEST(t.to_vector().at(0) == 0.1, boost::test_tools::tolerance(1e-2));
      }
    }
    TS_TEST(found);
    for (const auto& piece : sharded_state_dict(*fsdp))
      TS_TEST((piece.local.dtype() == DType::Float32), piece.fqn);
  });
}

// FSDP_USE_FULL_PREC_IN_EVAL=1: eval() runs in full precision (weights, inputs, buffers),
// train() in the compute dtype again.
BOOST_AUTO_TEST_CASE(full_precision_in_eval_under_the_environment_variable) {
  RunOptions o;
  o.mixed_precision = bf16_params();
  o.mixed_precision->buffer_dtype = DType::BFloat16;
  ::setenv("FSDP_USE_FULL_PREC_IN_EVAL", "1", 1);
  on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto model = mlp(7);
    model->child("0")->register_buffer("scale", from_vector(std::vector<double>{0.1, 0.2}, {2}));
    Seen seen;
    watch(model->child("0"), seen);
    auto fsdp = wrap_mlp(model, pg, o);
    (*fsdp)(batch_for(pg->rank())).tensor().to(DType::Float32).sum().backward();
    fsdp->eval();
    Tensor y = (*fsdp)(batch_for(pg->rank())).tensor();
    TS_TEST((y.dtype() == DType::Float32));
    TS_TEST((model->child("0")->buffer("scale").dtype() == DType::Float32));
    fsdp->train();
    (*fsdp)(batch_for(pg->rank())).tensor().to(DType::Float32).sum().backward();
    TS_TEST((model->child("0")->buffer("scale").dtype() == DType::BFloat16));
    std::lock_guard<std::mutex> lock(seen.mu);
    TS_REQUIRE(seen.weight.size() == 3u);
    TS_TEST((seen.weight[0] == DType::BFloat16));
    TS_TEST((seen.weight[1] == DType::Float32));
    TS_TEST((seen.input[1] == DType::Float32));
    TS_TEST((seen.weight[2] == DType::BFloat16));
  });
  ::unsetenv("FSDP_USE_FULL_PREC_IN_EVAL");
}

// Without the variable, eval keeps the compute dtype (upstream's default).
BOOST_AUTO_TEST_CASE(eval_stays_in_param_dtype_by_default) {
  RunOptions o;
  o.mixed_precision = bf16_params();
  on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto fsdp = wrap_mlp(mlp(7), pg, o);
    fsdp->eval();
    const DType out = (*fsdp)(batch_for(pg->rank())).tensor().dtype();
    TS_TEST((out == DType::BFloat16));
  });
}

// summon_full_params gives the float32 master values, not a bf16 copy, and writes back.
BOOST_DATA_TEST_CASE(summon_full_params_is_in_full_precision,
                     bdata::make({ShardingStrategy::FULL_SHARD, ShardingStrategy::NO_SHARD}),
                     strategy) {
  RunOptions o;
  o.strategy = strategy;
  o.mixed_precision = bf16_params();
  const std::vector<double> w0 = mlp(7)->child("0")->param("weight").to_vector();
  on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    auto model = mlp(7);
    auto fsdp = wrap_mlp(model, pg, o);
    (*fsdp)(batch_for(pg->rank())).tensor().to(DType::Float32).sum().backward();
    {
      SummonFullParams full(*fsdp, /*writeback=*/true);
      Tensor w = model->child("0")->param("weight");
      TS_TEST((w.dtype() == DType::Float32));
      TS_TEST(w.to_vector() == w0, boost::test_tools::per_element());  // exact, not bf16
      w.fill_(0.123456789);
    }
    const auto state = full_state_dict(*fsdp, false);
    TS_TEST((state.front().second.dtype() == DType::Float32));
    TS_TEST(state.front().second.to_vector().front() == 0.123456789,
            boost::test_tools::tolerance(1e-7));
    // Training goes on in bf16 after the summon.
    Tensor y = (*fsdp)(batch_for(pg->rank())).tensor();
    TS_TEST((y.dtype() == DType::BFloat16));
  });
}

// The BatchNorm override: under auto-wrap with mixed precision, each BatchNorm is its own unit
// with mixed precision disabled, computing in float32 between bf16 layers.
BOOST_AUTO_TEST_CASE(batch_norm_units_compute_in_float32) {
  on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    manual_seed(3);
    auto bn = std::make_shared<nn::BatchNorm1d>(8);
    auto lin = std::make_shared<nn::Linear>(6, 8);
    auto model = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
        lin, bn, std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(8, 3)});
    Seen bn_seen, lin_seen;
    WrapperOptions w;
    w.process_group = pg;
    w.mixed_precision = bf16_params();
    w.auto_wrap_policy = policies::AutoWrapPolicy(std::shared_ptr<const policies::Policy>(
        policies::ModuleWrapPolicy::make(nn::ClassSet{"Linear"})));
    auto fsdp = FullyShardedDataParallel::make(model, w);
    // After the override's hooks (registered by the auto-wrap), as a user's later hook would.
    watch(bn, bn_seen);
    watch(lin, lin_seen);
    Tensor y = (*fsdp)(cat({batch_for(pg->rank()), batch_for(pg->rank())})).tensor();
    TS_TEST((y.dtype() == DType::BFloat16));
    y.to(DType::Float32).sum().backward();
    TS_TEST((bn->buffer("running_mean").dtype() == DType::Float32));
    std::lock_guard<std::mutex> lock(bn_seen.mu);
    TS_TEST((bn_seen.weight.at(0) == DType::Float32));
    TS_TEST((bn_seen.input.at(0) == DType::Float32));  // upcast by the override's hook
    TS_TEST((lin_seen.weight.at(0) == DType::BFloat16));
    int bn_units = 0;
    for (auto* u : fsdp->fsdp_units())
      if (u->handle() && u->handle()->params().front().module == bn.get()) {
        ++bn_units;
        TS_TEST((u->mixed_precision() == MixedPrecision()));
        TS_TEST((u->handle()->compute_dtype() == DType::Float32));
      }
    TS_TEST(bn_units == 1);
  });
}

BOOST_AUTO_TEST_SUITE_END()

// With use_orig_params, each original parameter starts at a 16-byte boundary of the unsharded
// parameters as forward and backward use them: in param_dtype (upstream aligns to
// _get_aligned_numel(_fwd_bwd_param_dtype), 8 elements for bfloat16); the layout used float32's 4,
// so its flat parameters' numels and per-rank shards differed from torch 2.15's.
BOOST_DATA_TEST_CASE(use_orig_params_aligns_to_the_param_dtype,
                     bdata::make({"none", "bfloat16", "float16"}) ^ bdata::make({4, 8, 8}) ^
                         bdata::make({6, 10, 10}),
                     param_dtype, bias_offset, numel) {
  on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    WrapperOptions w;
    w.process_group = pg;
    w.use_orig_params = true;
    MixedPrecision mp;
    if (std::string(param_dtype) == "bfloat16") mp.param_dtype = DType::BFloat16;
    if (std::string(param_dtype) == "float16") mp.param_dtype = DType::Float16;
    if (mp.param_dtype) w.mixed_precision = mp;
    auto linear = std::make_shared<nn::Linear>(2, 1);  // weight 2 elements, bias 1
    std::vector<std::pair<std::string, std::vector<double>>> want;
    for (const auto& [name, t] : linear->named_parameters()) want.emplace_back(name, t.to_vector());
    auto fsdp = FullyShardedDataParallel::make(linear, w);
    const FlatParamLayout& layout = fsdp->handle()->layout();
    TS_TEST((layout.offsets == std::vector<std::int64_t>{0, bias_offset}));
    TS_TEST(layout.unpadded_numel == numel);  // bias + padding to a multiple of the 2 ranks
    TS_TEST(fsdp->handle()->local_shard().numel() == numel / 2);
    // The parameters read back from their places in the flat parameter.
    std::vector<std::pair<std::string, std::vector<double>>> got;
    for (const auto& [name, t] : full_state_dict(*fsdp, false))
      got.emplace_back(name, t.to_vector());
    TS_TEST((got == want));
  });
}
