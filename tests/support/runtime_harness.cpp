#include "tests/support/runtime_harness.h"

#include <cstdlib>
#include <mutex>
#include <optional>

#include "comm/threads/run_ranks.h"
#include "core/autograd.h"
#include "core/nn/nn.h"
#include "core/ops.h"
#include "core/optim/optim.h"
#include "core/random.h"
#include "core/stream_sanitizer_mode.h"
#include "fsdp/full_state_dict.h"
#include "fsdp/runtime.h"
#include "ops/checkpoint_wrapper.h"

namespace fsdp::testing {

void on_ranks(int world, const std::function<void(std::shared_ptr<comm::ProcessGroup>)>& body) {
  // A hang (two ranks out of step) fails in a minute rather than at the 5-minute default.
  comm::ThreadsOptions options;
  options.timeout = std::chrono::seconds(60);
  comm::run_ranks(world, body, options);
}

nn::ModulePtr mlp(std::uint64_t seed) {
  manual_seed(seed);
  auto inner = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(10, 10), std::make_shared<nn::ReLU>()});
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(6, 10), std::make_shared<nn::ReLU>(), inner,
      std::make_shared<nn::Linear>(10, 4)});
}

std::shared_ptr<FullyShardedDataParallel> wrap_mlp(const nn::ModulePtr& model,
                                                   const std::shared_ptr<comm::ProcessGroup>& pg,
                                                   const RunOptions& o) {
  WrapperOptions w;
  if (policies::is_hybrid(o.strategy))
    w.hybrid_process_groups =
        std::make_shared<const comm::HybridGroups>(comm::split_hybrid(*pg, o.node_size));
  else
    w.process_group = pg;
  w.sharding_strategy = o.strategy;
  w.use_orig_params = o.use_orig_params;
  w.forward_prefetch = o.forward_prefetch;
  if (o.backward_prefetch)
    w.backward_prefetch = *o.backward_prefetch;
  else
    w.backward_prefetch = policies::Setting<BackwardPrefetch>::none();
  if (o.mixed_precision) w.mixed_precision = *o.mixed_precision;
  if (o.offload_params) w.cpu_offload = CPUOffload{.offload_params = true};
  for (const char* name : {"2", "3"})
    model->replace_child(name, FullyShardedDataParallel::make(model->child(name), w));
  return FullyShardedDataParallel::make(model, w);
}

namespace {

Tensor rows(const Tensor& t, std::int64_t begin, std::int64_t n) {
  return t.narrow(0, begin, n).contiguous();
}

// The global batch of step `step`: inputs [world*batch, 6], targets [world*batch, 4].
std::pair<Tensor, Tensor> global_batch(int step, int world, std::int64_t batch) {
  Generator gen(1000 + static_cast<std::uint64_t>(step));
  const std::int64_t n = world * batch;
  std::vector<double> x(static_cast<std::size_t>(n * 6)), y(static_cast<std::size_t>(n * 4));
  for (auto& v : x) v = gen.uniform() * 2 - 1;
  for (auto& v : y) v = gen.uniform() * 2 - 1;
  return {from_vector(x, {n, 6}), from_vector(y, {n, 4})};
}

}  // namespace

std::unique_ptr<optim::Optimizer> make_mlp_optimizer(const std::string& name,
                                                     std::vector<Tensor> params) {
  if (name == "adamw") {
    optim::AdamWOptions o;
    o.lr = 0.01;
    return std::make_unique<optim::AdamW>(std::move(params), o);
  }
  optim::SGDOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  return std::make_unique<optim::SGD>(std::move(params), o);
}

RunResult run_mlp(int world, const RunOptions& o) {
  RunResult result;
  std::mutex mu;
  on_ranks(world, [&](std::shared_ptr<comm::ProcessGroup> pg) {
    const Device device = o.on_fake_cuda ? Device(DeviceType::FakeCUDA, pg->rank())
                          : o.on_cuda    ? Device(DeviceType::CUDA, 0)
                                         : Device(DeviceType::CPU);
    std::optional<dispatch::ModeGuard> sanitize;
    if (o.stream_sanitizer)
      sanitize.emplace(std::make_shared<stream_sanitizer::StreamSanitizerMode>());
    auto model = mlp(7);
    model->to(device);
    auto fsdp = wrap_mlp(model, pg, o);
    ops::checkpoint_activations(fsdp, o.checkpoint_activations, nn::ClassSet{"Linear"});
    if (o.skip_all_gather_wait) fsdp->runtime().root_state().skip_all_gather_wait = true;
    auto opt = make_mlp_optimizer(o.optimizer, fsdp->parameters());
    std::vector<double> losses;
    for (int step = 0; step < o.steps; ++step) {
      auto [x, y] = global_batch(step, world, o.batch);
      opt->zero_grad();
      if (o.no_sync_microbatch) {  // a first micro-batch accumulating unreduced gradients
        auto guard = fsdp->no_sync();
        Tensor first = (*fsdp)(rows(x, pg->rank() * o.batch, o.batch).to(device)).tensor();
        mse_loss(first.to(DType::Float32), rows(y, pg->rank() * o.batch, o.batch).to(device))
            .backward();
      }
      Tensor out = (*fsdp)(rows(x, pg->rank() * o.batch, o.batch).to(device)).tensor();
      Tensor loss =
          mse_loss(out.to(DType::Float32), rows(y, pg->rank() * o.batch, o.batch).to(device));
      loss.backward();
      opt->step();
      double l = loss.item();
      pg->all_reduce(&l, 1, DType::Float64);
      losses.push_back(l / world);
    }
    auto state = full_state_dict(*fsdp, /*rank0_only=*/true);
    if (pg->rank() == 0) {
      std::lock_guard<std::mutex> lock(mu);
      result.losses = losses;
      for (const auto& [name, t] : state) result.params.emplace_back(name, t.to_vector());
    }
  });
  return result;
}

RunResult run_mlp_plain(int world_for_batch, const RunOptions& o) {
  RunResult result;
  auto model = mlp(7);
  auto opt = make_mlp_optimizer(o.optimizer, model->parameters());
  for (int step = 0; step < o.steps; ++step) {
    auto [x, y] = global_batch(step, world_for_batch, o.batch);
    opt->zero_grad();
    if (o.no_sync_microbatch) mse_loss((*model)(x).tensor(), y).backward();
    Tensor loss = mse_loss((*model)(x).tensor(), y);
    loss.backward();
    opt->step();
    result.losses.push_back(loss.item());
  }
  for (const auto& [name, t] : model->named_parameters())
    result.params.emplace_back(name, t.to_vector());
  return result;
}

}  // namespace fsdp::testing
