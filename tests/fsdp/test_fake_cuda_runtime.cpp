// FSDP on the fake_cuda test device (each rank on fake_cuda:rank, the threads backend): the stream
// protocol (fsdp/streams.h) gives the CPU run's per-step losses and final parameters bit for bit,
// for every strategy, prefetch mode, use_orig_params and mixed precision, and the stream
// sanitizer reports nothing; the seeded missing wait (a test hook) is reported. The same with the
// collectives queued by the host as on CUDA buffers (tests/support/queued_like_cuda.h).
#define BOOST_TEST_MODULE fsdp_fake_cuda_runtime
#include <fmt/format.h>

#include <boost/test/unit_test.hpp>

#include "core/stream_sanitizer.h"
#include "tests/support/queued_like_cuda.h"
#include "tests/support/runtime_harness.h"

using namespace fsdp;
using namespace fsdp::testing;

namespace {

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

// Under the stream sanitizer (core/stream_sanitizer.h), at 2 and 4 ranks: no unordered
// cross-stream access and no free without record_stream, for every strategy (HYBRID over nodes of
// 2), no backward prefetch, BACKWARD_POST with forward prefetch and use_orig_params, mixed
// precision, a no_sync micro-batch and activation checkpointing.
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
  for (int world : {2, 4}) {
    for (auto& [label, o] : configs) {
      o.on_fake_cuda = true;
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
  o.on_fake_cuda = true;
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
