// FSDP on the fake_cuda test device (each rank on fake_cuda:rank, the threads backend): the stream
// protocol (fsdp/streams.h) gives the CPU run's per-step losses and final parameters bit for bit,
// for every strategy, prefetch mode, use_orig_params, mixed precision and CPU offload, and the
// stream sanitizer reports nothing; the seeded missing wait (a test hook) is reported. The same
// with the collectives queued by the host as on CUDA buffers (tests/support/queued_like_cuda.h).
// With FSDP_TEST_DEVICE=cuda the two stream sanitizer cases run on cuda:0 instead (every rank on
// it, the threads backend's CUDA path; the CUDA kernel table, copies and streams report to the
// sanitizer): the GPU machine's stream_sanitizer step and the emulated device's run.
#define BOOST_TEST_MODULE fsdp_fake_cuda_runtime
#include <fmt/format.h>

#include <boost/test/unit_test.hpp>

#include "core/fake_cuda/fake_cuda.h"
#include "core/ops.h"
#include "core/stream_sanitizer.h"
#include "fsdp/flat_param.h"
#include "fsdp/optim_state_dict.h"
#include "fsdp/state_dict_sharded.h"
#include "tests/support/queued_like_cuda.h"
#include "tests/support/runtime_harness.h"
#include "tests/support/test_device.h"
#include "tests/support/thread_safe_test.h"

using namespace fsdp;
using namespace fsdp::testing;

namespace {

// The device of the stream sanitizer cases: cuda:0 for every rank with FSDP_TEST_DEVICE=cuda,
// else each rank's fake_cuda device.
void on_sanitized_device(RunOptions& o) {
  o.on_cuda = test_device_type() == DeviceType::CUDA;
  o.on_fake_cuda = !o.on_cuda;
}

void expect_cpu_equal(int world, RunOptions o, const std::string& label) {
  o.on_fake_cuda = false;
  const RunResult cpu = run_mlp(world, o);
  o.on_fake_cuda = true;
  const RunResult fake = run_mlp(world, o);
  BOOST_TEST_CONTEXT(label) {
    BOOST_TEST(fake.losses == cpu.losses, boost::test_tools::per_element());
    BOOST_REQUIRE_EQUAL(fake.params.size(), cpu.params.size());
    for (std::size_t i = 0; i < cpu.params.size(); ++i) {
      BOOST_TEST(fake.params[i].first == cpu.params[i].first);
      BOOST_TEST(fake.params[i].second == cpu.params[i].second, boost::test_tools::per_element());
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(strategies_equal_cpu) {
  for (int world : {2, 4}) {
    for (auto s : {ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP,
                   ShardingStrategy::NO_SHARD}) {
      RunOptions o;
      o.strategy = s;
      expect_cpu_equal(world, o, fmt::format("{} at {} ranks", to_string(s), world));
    }
  }
  RunOptions hybrid;
  hybrid.strategy = ShardingStrategy::HYBRID_SHARD;
  hybrid.node_size = 2;
  expect_cpu_equal(4, hybrid, "HYBRID_SHARD at 4 ranks, 2 per node");
}

BOOST_AUTO_TEST_CASE(prefetch_modes_and_orig_params_equal_cpu) {
  for (std::optional<BackwardPrefetch> p :
       {std::optional<BackwardPrefetch>(BackwardPrefetch::BACKWARD_PRE),
        std::optional<BackwardPrefetch>(BackwardPrefetch::BACKWARD_POST),
        std::optional<BackwardPrefetch>()}) {
    for (bool orig : {false, true}) {
      RunOptions o;
      o.backward_prefetch = p;
      o.forward_prefetch = true;
      o.use_orig_params = orig;
      o.optimizer = "adamw";
      expect_cpu_equal(2, o,
                       fmt::format("{}, forward prefetch, use_orig_params={}",
                                   p ? to_string(*p) : std::string("no backward prefetch"), orig));
    }
  }
}

BOOST_AUTO_TEST_CASE(mixed_precision_equals_cpu) {
  for (auto s : {ShardingStrategy::FULL_SHARD, ShardingStrategy::NO_SHARD}) {
    RunOptions o;
    o.strategy = s;
    o.mixed_precision = MixedPrecision{.param_dtype = DType::BFloat16,
                                       .reduce_dtype = DType::BFloat16,
                                       .buffer_dtype = DType::BFloat16};
    expect_cpu_equal(2, o, fmt::format("bfloat16 mixed precision, {}", to_string(s)));
  }
}

BOOST_AUTO_TEST_CASE(no_sync_and_activation_checkpointing_equal_cpu) {
  for (int world : {2, 4}) {
    RunOptions accumulate;
    accumulate.no_sync_microbatch = true;
    expect_cpu_equal(world, accumulate, "no_sync micro-batch");
    RunOptions recompute;
    recompute.checkpoint_activations = "full";
    expect_cpu_equal(world, recompute, "activation checkpointing");
  }
}

// CPUOffload(offload_params=True) on the device: the CPU run's losses and parameters (the
// optimizer steps on the host shards), for every strategy, bfloat16 mixed precision,
// use_orig_params with AdamW, a no_sync micro-batch and gradients accumulated over two backwards.
std::vector<std::pair<std::string, RunOptions>> offload_configs() {
  std::vector<std::pair<std::string, RunOptions>> configs;
  for (auto s : {ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP,
                 ShardingStrategy::NO_SHARD}) {
    RunOptions o;
    o.strategy = s;
    configs.emplace_back(to_string(s), o);
    o.mixed_precision =
        MixedPrecision{.param_dtype = DType::BFloat16, .reduce_dtype = DType::BFloat16};
    configs.emplace_back(to_string(s) + ", bfloat16 mixed precision", o);
  }
  RunOptions orig;
  orig.use_orig_params = true;
  orig.optimizer = "adamw";
  configs.emplace_back("use_orig_params, adamw", orig);
  RunOptions accumulate;
  accumulate.no_sync_microbatch = true;
  configs.emplace_back("no_sync micro-batch", accumulate);
  for (auto& [label, o] : configs) o.offload_params = true;
  return configs;
}

BOOST_AUTO_TEST_CASE(cpu_offload_equals_cpu) {
  for (const auto& [label, o] : offload_configs()) expect_cpu_equal(2, o, "CPU offload, " + label);
}

// Offloaded, the shards and their reduced gradients are host tensors, the device holds none of
// the unit's parameters between uses (its allocated bytes return to what they were before the
// model came), and gradients accumulate on the host over two backwards without no_sync (upstream
// overwrites them: `_cpu_grad.copy_`).
BOOST_AUTO_TEST_CASE(cpu_offload_keeps_shards_and_gradients_on_the_host) {
  for (auto strategy : {ShardingStrategy::FULL_SHARD, ShardingStrategy::NO_SHARD}) {
    on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
      const Device d(DeviceType::FakeCUDA, pg->rank());
      auto allocated = [&] { return fake_cuda::memory_stats(d).at("allocated_bytes.all.current"); };
      const std::int64_t base = allocated();
      RunOptions o;
      o.strategy = strategy;
      o.offload_params = true;
      auto model = mlp(7);
      model->to(d);
      TS_TEST(allocated() > base);
      auto fsdp = wrap_mlp(model, pg, o);
      TS_TEST(allocated() == base, to_string(strategy) << ": the device keeps nothing");
      const Tensor x = ones({2, 6}, TensorOptions(DType::Float32, d));
      const std::int64_t with_input = allocated();
      std::vector<Tensor> first_grads;
      for (int pass = 0; pass < 2; ++pass) {
        (*fsdp)(x).tensor().sum().backward();
        TS_TEST(allocated() == with_input, to_string(strategy) << ": after backward " << pass);
        const auto units = fsdp->fsdp_units();
        for (std::size_t i = 0; i < units.size(); ++i) {
          const FlatParamHandle* h = units[i]->handle();
          TS_TEST_REQUIRE(h != nullptr);
          TS_TEST((h->device() == d));
          TS_TEST(h->offloads_params());
          TS_TEST(h->flat_param().device().is_cpu());
          const Tensor g = h->flat_param().grad();
          TS_TEST_REQUIRE(g.defined());
          TS_TEST(g.device().is_cpu());
          if (pass == 0) {
            first_grads.push_back(g.clone());
          } else {  // the same input twice: the kept gradient doubled
            const Tensor twice = mul(first_grads[i], 2.0);
            TS_TEST(g.to_vector() == twice.to_vector(), boost::test_tools::per_element());
          }
        }
      }
    });
  }
}

// Offloaded shards through sharded checkpoints: two AdamW steps, the model's and the optimizer's
// sharded state saved, two more; a fresh offloaded model loading that state takes the same two
// steps bit for bit (the pieces are host tensors read from and written into the host shards).
BOOST_AUTO_TEST_CASE(cpu_offload_resumes_from_sharded_state_bit_for_bit) {
  struct Saved {
    ShardedStateDict model, optim;
    ShardedOptimStateDict meta;
  };
  std::vector<Saved> saved(2);
  std::vector<double> straight, resumed;
  auto steps = [](FullyShardedDataParallel& m, optim::Optimizer& opt, Device d, int from, int to,
                  std::vector<double>* losses) {
    for (int step = from; step < to; ++step) {
      Generator g(300 + static_cast<std::uint64_t>(step));
      Tensor x = randn({3, 6}, {}, &g).to(d), y = randn({3, 4}, {}, &g).to(d);
      opt.zero_grad();
      Tensor loss = mse_loss(m(x).tensor(), y);
      loss.backward();
      opt.step();
      if (losses != nullptr) losses->push_back(loss.item());
    }
  };
  RunOptions o;
  o.offload_params = true;
  on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    const Device d(DeviceType::FakeCUDA, pg->rank());
    auto model = mlp(7);
    model->to(d);
    auto fsdp = wrap_mlp(model, pg, o);
    auto opt = make_mlp_optimizer("adamw", fsdp->parameters());
    steps(*fsdp, *opt, d, 0, 2, nullptr);
    Saved& mine = saved[static_cast<std::size_t>(pg->rank())];
    mine.model = sharded_state_dict(*fsdp);
    mine.meta = sharded_optim_state_dict(*fsdp, *opt);
    mine.optim = std::move(mine.meta.pieces);
    steps(*fsdp, *opt, d, 2, 4, pg->rank() == 0 ? &straight : nullptr);
  });
  on_ranks(2, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    const Device d(DeviceType::FakeCUDA, pg->rank());
    auto model = mlp(8);  // other initial weights: the load replaces them
    model->to(d);
    auto fsdp = wrap_mlp(model, pg, o);
    auto opt = make_mlp_optimizer("adamw", fsdp->parameters());
    ShardedStateDict all_model, all_optim;
    for (const Saved& s : saved) {
      all_model.insert(all_model.end(), s.model.begin(), s.model.end());
      all_optim.insert(all_optim.end(), s.optim.begin(), s.optim.end());
    }
    load_sharded_state_dict(*fsdp, PieceSet(all_model));
    load_sharded_optim_state_dict(*fsdp, *opt, PieceSet(all_optim), saved[0].meta);
    for (auto* u : fsdp->fsdp_units()) TS_TEST(u->handle()->local_shard().device().is_cpu());
    steps(*fsdp, *opt, d, 2, 4, pg->rank() == 0 ? &resumed : nullptr);
  });
  BOOST_TEST(straight.size() == 2u);
  BOOST_TEST(resumed == straight, boost::test_tools::per_element());
}

// Under the stream sanitizer (core/stream_sanitizer.h), at 2 and 4 ranks: no unordered
// cross-stream access and no free without record_stream, for every strategy (HYBRID over nodes of
// 2), no backward prefetch, BACKWARD_POST with forward prefetch and use_orig_params, mixed
// precision, a no_sync micro-batch, activation checkpointing and CPU offload's configurations.
BOOST_AUTO_TEST_CASE(clean_under_the_stream_sanitizer) {
  std::vector<std::pair<std::string, RunOptions>> configs;
  for (auto s :
       {ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP, ShardingStrategy::NO_SHARD,
        ShardingStrategy::HYBRID_SHARD, ShardingStrategy::_HYBRID_SHARD_ZERO2}) {
    RunOptions o;
    o.strategy = s;
    o.node_size = 2;
    configs.emplace_back(to_string(s), o);
  }
  RunOptions no_prefetch;
  no_prefetch.backward_prefetch.reset();
  configs.emplace_back("no backward prefetch", no_prefetch);
  RunOptions post;
  post.backward_prefetch = BackwardPrefetch::BACKWARD_POST;
  post.forward_prefetch = true;
  post.use_orig_params = true;
  post.optimizer = "adamw";
  configs.emplace_back("BACKWARD_POST, forward prefetch, use_orig_params, adamw", post);
  RunOptions mp;
  mp.mixed_precision =
      MixedPrecision{.param_dtype = DType::BFloat16, .reduce_dtype = DType::BFloat16};
  configs.emplace_back("bfloat16 mixed precision", mp);
  RunOptions accumulate;
  accumulate.no_sync_microbatch = true;
  configs.emplace_back("no_sync micro-batch", accumulate);
  RunOptions recompute;
  recompute.checkpoint_activations = "full";
  configs.emplace_back("activation checkpointing", recompute);
  for (auto& [label, o] : offload_configs()) configs.emplace_back("CPU offload, " + label, o);
  for (int world : {2, 4}) {
    for (auto& [label, o] : configs) {
      on_sanitized_device(o);
      o.stream_sanitizer = true;
      stream_sanitizer::clear_reports();
      run_mlp(world, o);
      for (const auto& r : stream_sanitizer::reports())
        BOOST_ERROR(fmt::format("{} ranks, {}: {}", world, label, r.message));
    }
  }
}

// The seeded missing wait: the compute stream no longer waits for the all-gathers; the sanitizer
// names the all-gather, the op that read its output early and the flat parameter.
BOOST_AUTO_TEST_CASE(the_seeded_missing_wait_is_reported) {
  RunOptions o;
  on_sanitized_device(o);
  o.stream_sanitizer = true;
  o.skip_all_gather_wait = true;
  stream_sanitizer::clear_reports();
  run_mlp(2, o);
  const auto reports = stream_sanitizer::reports();
  BOOST_REQUIRE(!reports.empty());
  bool named = false;
  for (const auto& r : reports)
    named =
        named || (r.message.find("all_gather on stream") != std::string::npos &&
                  r.message.find("linear") != std::string::npos &&
                  r.message.find("the unsharded flat parameter of FSDP unit") != std::string::npos);
  BOOST_TEST(named, reports.front().message);
}

// The threads backend's CUDA path (collectives queued by the host, ordered by events between the
// ranks' streams) under FULL_SHARD's streams, prefetch and rate limiter, as on one GPU: the CPU's
// losses and parameters, and nothing for the stream sanitizer.
BOOST_AUTO_TEST_CASE(collectives_queued_as_on_cuda_equal_cpu_and_are_clean) {
  QueuedLikeCuda queued;
  for (int world : {2, 4}) {
    RunOptions o;
    o.strategy = ShardingStrategy::FULL_SHARD;
    expect_cpu_equal(world, o, fmt::format("queued, FULL_SHARD at {} ranks", world));
  }
  RunOptions post;
  post.backward_prefetch = BackwardPrefetch::BACKWARD_POST;
  post.forward_prefetch = true;
  post.optimizer = "adamw";
  expect_cpu_equal(2, post, "queued, BACKWARD_POST, forward prefetch, adamw");
  RunOptions mp;
  mp.mixed_precision = MixedPrecision{.param_dtype = DType::BFloat16,
                                      .reduce_dtype = DType::BFloat16,
                                      .buffer_dtype = DType::BFloat16};
  expect_cpu_equal(2, mp, "queued, bfloat16 mixed precision");
  for (int world : {2, 4}) {
    RunOptions o;
    o.on_fake_cuda = true;
    o.stream_sanitizer = true;
    stream_sanitizer::clear_reports();
    run_mlp(world, o);
    for (const auto& r : stream_sanitizer::reports())
      BOOST_ERROR(fmt::format("queued, {} ranks: {}", world, r.message));
  }
}
