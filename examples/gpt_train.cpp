#include "examples/gpt_train.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>

#include "core/autograd.h"
#include "core/error.h"
#include "core/io/checksum.h"
#include "core/io/safetensors.h"
#include "core/memory.h"
#include "core/memory_stats.h"
#include "core/memory_timeline.h"
#include "core/memory_timeline_svg.h"
#include "core/nn/clip_grad.h"
#include "core/optim/optim.h"
#include "core/random.h"
#include "examples/gpt_checkpoint_checks.h"
#include "examples/gpt_data.h"
#include "examples/gpt_job_model.h"
#include "examples/gpt_job_settings.h"
#include "examples/loop_clock.h"
#include "fsdp/attribute_forwarding.h"
#include "fsdp/checkpoint.h"
#include "fsdp/checkpoint_full.h"
#include "fsdp/checkpoint_lock.h"
#include "fsdp/clip_grad_norm.h"
#include "fsdp/flat_param.h"
#include "fsdp/full_state_dict.h"
#include "fsdp/fully_sharded_data_parallel.h"
#include "fsdp/memory_bound.h"
#include "ops/checkpoint_wrapper.h"
#include "policies/policy_build.h"

namespace fsdp::examples {

namespace {

std::unique_ptr<optim::Optimizer> make_optimizer(const GPTTrainConfig& cfg,
                                                 std::vector<Tensor> params) {
  if (cfg.optimizer == "sgd") {
    optim::SGDOptions o;
    o.lr = cfg.lr;
    o.weight_decay = cfg.weight_decay.value_or(o.weight_decay);
    return std::make_unique<optim::SGD>(std::move(params), o);
  }
  FSDP_CHECK(cfg.optimizer == "adamw", ValueError,
             "--optimizer: unknown optimizer '{}' (sgd or adamw)", cfg.optimizer);
  optim::AdamWOptions o;
  o.lr = cfg.lr;
  o.weight_decay = cfg.weight_decay.value_or(o.weight_decay);
  return std::make_unique<optim::AdamW>(std::move(params), o);
}

// The mean over ranks of a per-rank mean loss: the mean over the global batch.
double global_mean(double local, comm::ProcessGroup* group) {
  if (group == nullptr || group->size() == 1) return local;
  group->all_reduce(&local, 1, DType::Float64);
  return local / group->size();
}

}  // namespace

namespace {

// This rank's device: an accelerator without an index is device `rank` (LOCAL_RANK's role).
Device rank_device(Device device, int rank) {
  if (device.is_accelerator() && device.index < 0) return Device(device.type, rank);
  return device;
}

TokenBatch on_device(TokenBatch b, Device device) {
  if (device.is_cpu()) return b;
  return {b.inputs.to(device), b.targets.to(device)};
}

// Bytes of the parameters as the optimizer sees them (FSDP: this rank's shards).
std::int64_t resident_parameter_bytes(nn::Module& model) {
  std::int64_t n = 0;
  for (const auto& p : model.parameters()) n += static_cast<std::int64_t>(p.nbytes());
  return n;
}

std::int64_t optimizer_state_bytes(const optim::Optimizer& opt) {
  std::int64_t n = 0;
  for (std::size_t g = 0; g < opt.num_param_groups(); ++g)
    for (std::size_t i = 0; i < opt.params(g).size(); ++i)
      for (const auto& [name, t] : opt.state(g, i).tensors)
        if (t.defined()) n += static_cast<std::int64_t>(t.nbytes());
  return n;
}

// The step's peak against FSDP's bound (fsdp/memory_bound.h): own shards of parameters,
// gradients (as many bytes as the parameters) and optimizer state, the unsharded units, and the
// activations.
void report_step_memory(const MemoryTimeline& timeline, nn::Module& model,
                        const optim::Optimizer& opt, FullyShardedDataParallel* fsdp_model,
                        GPTTrainResult& result) {
  result.step_peak_bytes = timeline.peak_total_bytes();
  result.step_peak_by_category = timeline.bytes_at_peak_total();
  std::vector<UnshardedUnit> units;
  if (fsdp_model != nullptr)
    for (auto* u : fsdp_model->fsdp_units())
      if (u->handle() && u->handle()->needs_unshard())
        units.push_back({u->handle()->layout().padded_numel *
                             static_cast<std::int64_t>(dtype_size(u->handle()->compute_dtype())),
                         u->sharding_strategy(), u == fsdp_model});
  const std::int64_t params = resident_parameter_bytes(model);
  result.memory_bound_bytes = memory_bound_bytes(
      2 * params + optimizer_state_bytes(opt), peak_unsharded_bytes(units),
      timeline.peak_bytes()[static_cast<std::size_t>(MemoryCategory::Activations)]);
}

// Where the first non-finite gradient is, over all ranks: " (first non-finite gradient: unit
// 'blocks.0')", or "" when every gradient is finite. Every rank calls it (one all_reduce): only
// after a non-finite global loss, which every rank sees alike, so it costs nothing otherwise.
std::string first_nonfinite_gradient(nn::Module& model, comm::ProcessGroup* group) {
  autograd::NoGradGuard no_grad;
  const auto params = clean_named_parameters(model);
  std::int64_t first = std::numeric_limits<std::int64_t>::max();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor g = params[i].second.grad();
    // A sum in float64 cannot overflow from finite float32 values; NaN and inf reach it.
    if (g.defined() && !std::isfinite(g.to(DType::Float64).sum().item())) {
      first = static_cast<std::int64_t>(i);
      break;
    }
  }
  if (group != nullptr && group->size() > 1)
    group->all_reduce(&first, 1, DType::Int64, comm::ReduceOp::Min);
  if (first == std::numeric_limits<std::int64_t>::max()) return "";
  const std::string& name = params[static_cast<std::size_t>(first)].first;
  // A flat parameter stands for its unit: name the unit.
  constexpr std::string_view kFlat = "_flat_param";
  if (name.ends_with(kFlat)) {
    std::string unit = name.substr(0, name.size() - kFlat.size());
    if (!unit.empty()) unit.pop_back();  // the dot before _flat_param
    return unit.empty() ? " (first non-finite gradient: the root unit)"
                        : fmt::format(" (first non-finite gradient: unit '{}')", unit);
  }
  return fmt::format(" (first non-finite gradient: '{}')", name);
}

// The step a resumed run starts at: the saved data position, at most `steps` (then nothing is
// left to train). Clamped as 64-bit, since a position past INT_MAX would wrap to a negative step.
int first_step_after(const TrainingProgress& p, const std::string& checkpoint, int steps) {
  FSDP_CHECK(p.data_position >= 0, ValueError,
             "--resume: '{}' has data position {}; expected 0 or more", checkpoint,
             p.data_position);
  return static_cast<int>(std::min<std::int64_t>(p.data_position, steps));
}

}  // namespace

namespace {

// Checkpoint checks on rank 0 before any work: --save can be written, the checkpoint directory
// is this job's alone (`lock` holds it), and what is in the directories but is not a checkpoint
// is said once.
void prepare_checkpoint_dirs(const GPTTrainConfig& cfg, std::optional<CheckpointDirLock>& lock) {
  auto warn = [&](const std::string& what) {
    if (cfg.on_warning) cfg.on_warning(what);
  };
  if (!cfg.save_path.empty()) check_save_path_writable(cfg.save_path);
  if (!cfg.checkpoint_dir.empty()) {
    std::string takeover;
    lock.emplace(cfg.checkpoint_dir, &takeover);
    if (!takeover.empty()) warn("--checkpoint-dir: " + takeover);
  }
  std::set<std::string> said;
  for (const auto& [option, dir] :
       {std::pair<const char*, const std::string&>{"--resume", cfg.resume_dir},
        {"--checkpoint-dir", cfg.checkpoint_dir}}) {
    if (dir.empty()) continue;
    CheckpointDirScan scan;
    try {
      scan = scan_checkpoint_dir(dir);
    } catch (const ValueError& e) {
      throw ValueError(fmt::format("{}: {}", option, e.what()));
    }
    for (const auto& [path, why] : scan.ignored)
      if (said.insert(path).second) warn(fmt::format("{}: ignoring {}: {}", option, path, why));
  }
}

// Runs `check` on rank 0 alone and, when it fails, makes every rank fail with its message (sent
// to all), so that no rank waits in a collective for a rank 0 that has given up.
void check_on_rank0(comm::ProcessGroup& group, const std::function<void()>& check) {
  std::string error;
  if (group.rank() == 0) {
    try {
      check();
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (group.size() > 1) {
    std::int64_t n = static_cast<std::int64_t>(error.size());
    group.broadcast(&n, 1, DType::Int64, 0);
    error.resize(static_cast<std::size_t>(n));
    if (n > 0) group.broadcast(error.data(), error.size(), DType::UInt8, 0);
  }
  if (!error.empty()) throw RuntimeError(error);
}

// The newest checkpoint in --resume's directory, checked against this job.
std::string checkpoint_to_resume(const GPTTrainConfig& cfg, const JobIdentity& job) {
  std::optional<std::string> latest;
  try {
    latest = latest_checkpoint(cfg.resume_dir);
  } catch (const ValueError& e) {
    throw ValueError(fmt::format("--resume: {}", e.what()));
  }
  FSDP_CHECK(latest.has_value(), ValueError, "--resume: no checkpoint in '{}'", cfg.resume_dir);
  check_resume_matches(*latest, job, cfg.allow_changes);
  return *latest;
}

}  // namespace

GPTTrainResult train_gpt(const GPTTrainConfig& cfg,
                         const std::shared_ptr<comm::ProcessGroup>& group) {
  FSDP_CHECK(static_cast<bool>(cfg.data), ValueError, "train_gpt: no training data");
  FSDP_CHECK(cfg.sharding.has_value() || group->size() == 1, ValueError,
             "train_gpt: the unsharded model runs on one rank (got {} ranks)", group->size());
  FSDP_CHECK(!cfg.mixed_precision || cfg.sharding.has_value(), ValueError,
             "train_gpt: mixed precision is FSDP's (--mixed-precision needs --sharding other "
             "than none)");
  auto stats = std::make_shared<MemoryStats>();
  MemoryStatsScope scope(stats);
  GPTTrainResult result;
  const int world = group->size(), rank = group->rank();
  FSDP_CHECK((cfg.checkpoint_dir.empty() && cfg.resume_dir.empty()) || cfg.sharding.has_value(),
             ValueError,
             "train_gpt: --checkpoint-dir and --resume need FSDP (--sharding other "
             "than none)");
  std::optional<CheckpointDirLock> checkpoint_lock;
  check_on_rank0(*group, [&] { prepare_checkpoint_dirs(cfg, checkpoint_lock); });

  const std::shared_ptr<const JobModel> job_model =
      cfg.job_model ? cfg.job_model : gpt_job_model(cfg.model);
  manual_seed(cfg.seed);
  nn::ModulePtr net = job_model->build(cfg.sharding.has_value());
  // Ranks launched with different arguments stop here, every one saying which and how.
  // The corpus is hashed once: the ranks' agreement and the checkpoints' identity both use it.
  const std::string_view raw = cfg.data.raw();
  const std::string data_xxh3 = cfg.data ? io::xxh3_hex(raw.data(), raw.size()) : "";
  comm::require_agreement(*group, gpt_job_settings(cfg, *job_model, *net, data_xxh3));
  job_model->initialize(*net);
  const Device device = rank_device(cfg.device, rank);
  // A sharded build on the meta device (finetune's) gets its storage from FSDP on device_id;
  // anything else is moved there whole.
  bool meta = false;
  for (const Tensor& p : net->parameters()) meta = meta || p.is_meta();
  if (!device.is_cpu() && !meta) net->to(device);
  result.num_parameters = net->num_parameters();
  // The plain model's FQNs, before FSDP wraps its blocks.
  const JobIdentity job = gpt_job_identity(cfg, world, *job_model, *net, data_xxh3);
  // Every rank reads and checks the same index: they refuse together, before any collective.
  std::string resume_from;
  if (!cfg.resume_dir.empty()) resume_from = checkpoint_to_resume(cfg, job);

  nn::ModulePtr model = net;
  std::shared_ptr<FullyShardedDataParallel> fsdp_model;
  if (cfg.sharding.has_value()) {
    WrapperOptions o;
    if (policies::is_hybrid(*cfg.sharding)) {
      const int node = cfg.node_size > 0 ? cfg.node_size : world;
      o.hybrid_process_groups =
          std::make_shared<const comm::HybridGroups>(comm::split_hybrid(*group, node));
    } else {
      o.process_group = group;
    }
    o.sharding_strategy = *cfg.sharding;
    o.use_orig_params = cfg.use_orig_params;
    o.forward_prefetch = cfg.forward_prefetch;
    if (cfg.cpu_offload) o.cpu_offload = CPUOffload{.offload_params = true};
    if (cfg.backward_prefetch.has_value())
      o.backward_prefetch = *cfg.backward_prefetch;
    else
      o.backward_prefetch = policies::Setting<BackwardPrefetch>::none();
    o.limit_all_gathers = cfg.limit_all_gathers;
    if (cfg.mixed_precision) {
      MixedPrecision mp;
      mp.param_dtype = mp.reduce_dtype = mp.buffer_dtype = *cfg.mixed_precision;
      o.mixed_precision = mp;
    }
    if (!cfg.policy.empty()) o.auto_wrap_policy = policies::build_policy(cfg.policy);
    if (auto init = job_model->param_init_fn()) o.param_init_fn = init;
    if (meta && !device.is_cpu()) o.device_id = device;
    fsdp_model = FullyShardedDataParallel::make(net, o);
    model = fsdp_model;
  }
  job_model->load(cfg, *net, fsdp_model.get());

  ops::checkpoint_activations(model, cfg.checkpoint_activations,
                              nn::ClassSet{job_model->block_class()});
  auto optimizer = make_optimizer(cfg, model->parameters());
  int first_step = 0;
  if (!resume_from.empty()) {
    const TrainingProgress p = load_sharded_checkpoint(resume_from, *fsdp_model, optimizer.get());
    // --allow-change lr: the saved groups' lr gives way to this job's.
    if (optimizer->lr() != cfg.lr) optimizer->set_lr(cfg.lr);
    first_step = first_step_after(p, resume_from, cfg.steps);
    // This rank's generator as the same rank left it (rank 0's for ranks the saver lacked).
    if (!p.rng.empty())
      default_generator().set_state(
          p.rng[static_cast<std::size_t>(rank) < p.rng.size() ? rank : 0]);
  }
  check_on_rank0(*group, [&] { check_checkpoint_names_free(cfg, first_step); });
  auto save_checkpoint = [&](int steps_done) {
    CheckpointOptions co;
    co.keep = cfg.keep;
    co.job = job;
    save_sharded_checkpoint(cfg.checkpoint_dir, *fsdp_model, optimizer.get(),
                            {steps_done, steps_done, {}}, *group, co);
  };
  const std::int64_t T = job_model->seq();

  auto evaluate = [&]() {
    if (!cfg.eval_data || cfg.eval_batches <= 0) return 0.0;
    autograd::NoGradGuard no_grad;
    double total = 0;
    for (int i = 0; i < cfg.eval_batches; ++i) {
      TokenBatch b = on_device(gpt_batch(cfg.eval_data, i, cfg.batch, world, rank, T), device);
      total += global_mean(job_model->loss(*model, b.inputs, b.targets).item(), group.get());
    }
    return total / cfg.eval_batches;
  };
  result.eval_before = evaluate();

  LoopClock clock(device);
  result.first_step = first_step;
  // One step's memory by category: the second (the optimizer state exists), or the only one.
  const int timeline_step = std::min(first_step + 1, cfg.steps - 1);
  std::shared_ptr<MemoryTimeline> timeline;
  for (int step = first_step; step < cfg.steps; ++step) {
    if (step == first_step + 1) {
      // Step 0 builds the execution order and warms the allocator: time from step 1.
      clock.start();
      if (fsdp_model) {
        fsdp_model->reset_exposed_comm_seconds();
        fsdp_model->reset_comm_bytes();
      }
    }
    TokenBatch b = on_device(gpt_batch(cfg.data, step, cfg.batch, world, rank, T), device);
    optimizer->zero_grad();
    std::optional<MemoryTimelineScope> recording;
    if (step == timeline_step) {
      timeline = std::make_shared<MemoryTimeline>();
      // What lives across steps, allocated before the recording: the shards and the state.
      timeline->record(resident_parameter_bytes(*model), MemoryCategory::Parameters);
      timeline->record(optimizer_state_bytes(*optimizer), MemoryCategory::OptimizerState);
      recording.emplace(timeline);
    }
    Tensor loss;
    {
      MemoryCategoryScope activations(MemoryCategory::Activations);
      loss = job_model->loss(*model, b.inputs, b.targets);
      loss.backward();
    }
    const double global = global_mean(loss.item(), cfg.sharding ? group.get() : nullptr);
    if (!std::isfinite(global) && !cfg.allow_nonfinite)
      throw RuntimeError(fmt::format(
          "step {}: the loss is {}{}; stopped before the optimizer step and before saving "
          "anything (--allow-nonfinite trains on)",
          step,
          std::isnan(global) ? "NaN"
          : global > 0       ? "+inf"
                             : "-inf",
          first_nonfinite_gradient(*model, cfg.sharding ? group.get() : nullptr)));
    if (cfg.clip_grad_norm > 0 && fsdp_model)
      clip_grad_norm_(*fsdp_model, cfg.clip_grad_norm);
    else if (cfg.clip_grad_norm > 0)  // the unsharded model: torch.nn.utils.clip_grad_norm_
      nn::clip_grad_norm_(model->parameters(), cfg.clip_grad_norm);
    {
      MemoryCategoryScope state(MemoryCategory::OptimizerState);
      mark_memory_event("optimizer step");
      optimizer->step();
    }
    if (recording) {
      recording.reset();
      report_step_memory(*timeline, *model, *optimizer, fsdp_model.get(), result);
      if (!cfg.memory_timeline.empty() && rank == 0)
        write_memory_timeline_svg(
            *timeline, cfg.memory_timeline,
            {.title = fmt::format("train_gpt memory, rank 0 of {}, step {}", world, step)});
    }
    result.losses.push_back(global);
    if (cfg.on_step) cfg.on_step(step, global);
    if (!cfg.checkpoint_dir.empty() &&
        ((cfg.save_every > 0 && (step + 1) % cfg.save_every == 0) || step + 1 == cfg.steps))
      save_checkpoint(step + 1);
  }
  result.seconds = clock.elapsed_seconds();
  result.timed_by = clock.source();
  result.device = device;
  if (fsdp_model) {
    result.exposed_comm_seconds = fsdp_model->exposed_comm_seconds();
    const CommBytes bytes = fsdp_model->comm_bytes();
    result.all_gather_bytes = bytes.all_gather;
    result.reduce_bytes = bytes.reduce_scatter + bytes.all_reduce;
  }
  result.eval_after = evaluate();
  result.peak_bytes = stats->peak_bytes.load();

  if (!cfg.save_path.empty()) job_model->save(cfg, *net, fsdp_model.get(), rank);
  return result;
}

}  // namespace fsdp::examples
