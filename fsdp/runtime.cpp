#include "fsdp/runtime.h"

#include <fmt/format.h>

#include <cstdlib>
#include <functional>

#include "core/autograd.h"
#include "core/env.h"
#include "core/error.h"
#include "core/memory_stats.h"
#include "core/memory_timeline.h"
#include "core/multi_grad_hook.h"
#include "core/ops.h"
#include "core/traversal/unit_modules.h"
#include "core/warnings.h"
#include "fsdp/attribute_forwarding.h"
#include "fsdp/fully_sharded_data_parallel.h"

namespace fsdp {

namespace {

// Every FSDP unit in `root`'s tree (root included), pre-order, each once, with its FQN from the
// root, cleaned of "_fsdp_wrapped_module.".
void for_each_unit(FullyShardedDataParallel& root,
                   const std::function<void(FullyShardedDataParallel&, const std::string&)>& fn) {
  for (const auto& [name, m] : traversal::named_units(root))
    if (auto* unit = dynamic_cast<FullyShardedDataParallel*>(m)) fn(*unit, clean_tensor_name(name));
}

// Upstream's FSDP_USE_FULL_PREC_IN_EVAL: "1" runs eval() forwards in full precision. Read at
// each use (a process may set it after start-up).
bool full_precision_in_eval() {
  return env::enabled("FSDP_USE_FULL_PREC_IN_EVAL");
}

// The buffers of `unit`'s own modules: not those of nested units or ignored modules.
std::vector<Tensor> unit_buffers(FullyShardedDataParallel& unit) {
  std::vector<Tensor> out;
  for (const auto& [name, child] : unit.child_slots())
    if (child)
      for (const auto& [m, fqn] : traversal::unit_own_modules(*child, unit.ignored_modules()))
        for (const auto& [buffer_name, b] : m->buffer_slots())
          if (b.defined()) out.push_back(b);
  return out;
}

// What this unit's collectives move (fsdp/sharding.h), for the runtime's byte counters: nothing
// is sent within a shard group of one rank.
CollectiveElements collective_elements(const FlatParamHandle& h, const UnitConfig& c) {
  const bool replicated = c.replicate_group != nullptr && c.replicate_group->size() > 1;
  const FlatParamLayout& l = h.layout();
  CollectiveElements e = unit_collective_elements(h.sharded(), replicated, l.unpadded_numel,
                                                  l.padded_numel, l.shard_numel);
  if (c.shard_group->size() == 1) {
    e.all_gather = e.reduce_scatter = 0;
    if (!h.sharded()) e.all_reduce = 0;
  }
  return e;
}

}  // namespace

// --- RootState

void RootState::record(RuntimeEvent::Kind kind, const UnitRuntime& unit) {
  if (record_events) events.push_back({kind, unit.fqn()});
}

int RootState::order_index(const UnitRuntime* unit) const {
  for (std::size_t i = 0; i < forward_order.size(); ++i)
    if (forward_order[i] == unit) return static_cast<int>(i);
  return -1;
}

int RootState::unshards_in_flight(bool backward) const {
  int n = 0;
  for (const auto* u : units) {
    const auto* h = u->handle();
    if (h == nullptr || !h->sharded()) continue;
    if (!h->is_unsharded() && !h->unshard_in_flight()) continue;
    // The root keeps its parameters for the whole step; in forward, SHARD_GRAD_OP units keep
    // theirs for backward by design: neither is a unit "in flight".
    if (u->is_root()) continue;
    if (!backward && !reshards_after_forward(u->config().strategy)) continue;
    if (backward && u->post_backward_done_) continue;
    ++n;
  }
  return n;
}

void RootState::reshard_all() {
  for (auto* u : units)
    if (u->handle() != nullptr && u->handle()->needs_unshard() &&
        (u->handle()->is_unsharded() || u->handle()->unshard_in_flight()))
      u->reshard();
}

Tensor RootState::buffer_for_state_dict(const Tensor& buffer) const {
  for (const auto& b : mixed_precision_buffers)
    if (b.buffer.is_same(buffer) && buffer.dtype() != b.original) return buffer.to(b.original);
  return buffer;
}

void RootState::final_callback() {
  comm.finish_reductions(0);
  // The optimizer reads the reduced gradients on the compute stream.
  if (streams.on_accelerator()) comm.stream_wait(streams.post_backward, streams.compute());
  // CPU offload: the gradients' copies to the host (on the post-backward stream, after the
  // backward's compute and the shards' copies to the device) are done before the optimizer
  // steps on the host: one host wait for all units, as upstream's final callback.
  bool offloads = false;
  for (auto* u : units) offloads = offloads || (u->handle() && u->handle()->offloads_params());
  if (offloads && streams.on_accelerator()) streams.post_backward.synchronize();
  for (auto* u : units) {
    auto* h = u->handle();
    if (h == nullptr) continue;
    // Catch-all reshard: units whose post-backward hook did not run (no gradient reached them)
    // or that keep parameters under no_sync().
    if (h->needs_unshard() && (h->is_unsharded() || h->unshard_in_flight())) u->reshard();
    if (!h->needs_unshard()) h->use_sharded_views();
    if (streams.on_accelerator()) h->record_reduced_grad_use(streams.compute());
    h->finalize_gradients(sync_gradients);
  }
  for (auto* u : units) {
    u->pre_backward_done_ = false;
    u->post_backward_done_ = false;
    u->in_backward_ = false;
  }
  final_callback_queued = false;
  order_recorded = true;
}

// --- UnitRuntime

UnitRuntime::UnitRuntime(FullyShardedDataParallel& owner, UnitConfig config,
                         std::unique_ptr<FlatParamHandle> handle)
    : owner_(owner), config_(std::move(config)), handle_(std::move(handle)) {}

UnitRuntime::~UnitRuntime() {
  for (auto& h : container_hooks_) h.remove();
}

RootState& UnitRuntime::root_state() {
  if (!state_) lazy_init();
  return *state_;
}

void UnitRuntime::lazy_init() {
  is_root_ = true;
  state_ = std::make_shared<RootState>();
  for_each_unit(owner_, [&](FullyShardedDataParallel& unit, const std::string& name) {
    UnitRuntime& r = unit.runtime();
    if (&r != this) {
      FSDP_CHECK(!r.state_, RuntimeError,
                 "FSDP unit '{}' already belongs to another root's tree: a nested unit was run "
                 "on its own before its root",
                 name);
      r.is_root_ = false;
      r.state_ = state_;
    }
    r.fqn_ = name;
    state_->units.push_back(&r);
  });
  // The streams of the tree's device (its first flat parameter's).
  for (auto* u : state_->units)
    if (u->handle_ != nullptr) {
      state_->streams = RootStreams::for_device(u->handle_->device());
      break;
    }
  if (state_->streams.on_accelerator())
    state_->comm.set_post_backward_stream(state_->streams.post_backward);
  // The collective queues, made in the same order on every rank.
  for (auto* u : state_->units) {
    if (u->handle_ == nullptr || u->config_.shard_group->size() == 1) continue;
    state_->comm.all_gather_queue(u->config_.shard_group);
    state_->comm.reduce_queue(u->config_.shard_group);
  }
  // Every rank must have built the same units: compare the layout's fingerprint.
  const auto& group = config_.shard_group;
  if (group->size() > 1) {
    std::int64_t sig[3] = {0, 0, 0};
    std::uint64_t hash = 0;  // unsigned: the hash wraps around (signed overflow is undefined)
    for (auto* u : state_->units) {
      if (u->handle_ == nullptr) continue;
      sig[0] += 1;
      sig[1] += u->handle_->layout().unpadded_numel;
      hash = hash * 1000003u + static_cast<std::uint64_t>(u->handle_->layout().unpadded_numel) +
             static_cast<std::uint64_t>(u->handle_->params().size());
    }
    sig[2] = static_cast<std::int64_t>(hash);
    std::vector<std::int64_t> all(3 * static_cast<std::size_t>(group->size()));
    group->all_gather(sig, all.data(), 3, DType::Int64);
    for (int r = 0; r < group->size(); ++r) {
      const std::int64_t* s = all.data() + 3 * r;
      FSDP_CHECK(s[0] == sig[0] && s[1] == sig[1] && s[2] == sig[2], RuntimeError,
                 "FSDP: rank {} and rank {} wrapped different models: rank {} has {} units with "
                 "{} flat parameter elements, rank {} has {} units with {} (every rank must "
                 "build the same model with the same wrapping)",
                 group->rank(), r, group->rank(), sig[0], sig[1], r, s[0], s[1]);
    }
  }
  for (auto* u : state_->units) u->register_post_backward_hook();
  // Buffers in their unit's buffer_dtype (upstream casts them in the root's lazy init); the
  // original dtype is kept for state dicts and eval in full precision.
  for (auto* u : state_->units) {
    const auto& dt = u->owner_.mixed_precision().buffer_dtype;
    if (!dt) continue;
    for (const Tensor& b : unit_buffers(u->owner_))
      if (b.defined() && b.is_floating_point())
        state_->mixed_precision_buffers.push_back({b, b.dtype(), *dt});
  }
  cast_buffers_for_mode();
  bool offload = false;
  for (auto* u : state_->units)  // on an accelerator the handle moves the shard to the host
    offload = offload || (u->owner_.cpu_offload().offload_params && u->handle_ != nullptr &&
                          u->handle_->device().is_cpu());
  if (offload)
    warn(
        "FSDP: CPUOffload(offload_params=True) on the CPU device: the sharded parameters and "
        "gradients already live in host memory and the optimizer steps there, so nothing is "
        "moved; unlike upstream's CUDA offload, gradient accumulation without no_sync() works");
}

void UnitRuntime::register_post_backward_hook() {
  if (handle_ == nullptr || post_backward_hook_registered_ || !handle_->requires_grad()) return;
  post_backward_hook_registered_ = true;
  handle_->flat_param().register_post_accumulate_grad_hook(
      [this](const Tensor&) { post_backward(); });
}

void UnitRuntime::mark_unit_event(const char* what) const {
  if (!MemoryScopes::current().timeline()) return;  // the common case: nothing records
  mark_memory_event(fmt::format("{} {}", fqn_.empty() ? "(root)" : fqn_, what));
}

bool UnitRuntime::force_full_precision() const {
  return handle_ != nullptr && handle_->uses_param_mixed_precision() && full_precision_in_eval() &&
         !owner_.is_training();
}

std::optional<DType> UnitRuntime::forward_input_dtype() const {
  const auto& mp = owner_.mixed_precision();
  if (!mp.param_dtype) return std::nullopt;
  // Upstream: the root casts when cast_root_forward_inputs and no unit of its tree runs in full
  // precision; every unit with parameters casts when cast_forward_inputs and it does not.
  if (is_root() && mp.cast_root_forward_inputs) {
    bool any_handle = false, all_low = true;
    for (const auto* u : state_->units) {
      if (u->handle_ == nullptr) continue;
      any_handle = true;
      all_low = all_low && !u->force_full_precision();
    }
    if (any_handle && all_low) return mp.param_dtype;
  }
  if (handle_ != nullptr && mp.cast_forward_inputs && !force_full_precision())
    return mp.param_dtype;
  return std::nullopt;
}

void UnitRuntime::cast_buffers_for_mode() {
  // Eval under FSDP_USE_FULL_PREC_IN_EVAL=1 computes with the buffers' original dtypes.
  const bool full = full_precision_in_eval() && !owner_.is_training();
  autograd::NoGradGuard no_grad;
  for (auto& b : state_->mixed_precision_buffers) {
    const DType want = full ? b.original : b.low;
    if (b.buffer.dtype() != want) b.buffer.set_data(b.buffer.to(want));
  }
}

void UnitRuntime::unshard(bool prefetch, bool full_precision) {
  auto* h = handle_.get();
  if (h == nullptr || h->is_unsharded_in(full_precision)) return;
  if (!h->unshard_in_flight_in(full_precision)) {
    state_->record(prefetch ? RuntimeEvent::Kind::Prefetch : RuntimeEvent::Kind::Unshard, *this);
    if (h->sharded() && config_.shard_group->size() > 1)
      state_->comm.bytes.all_gather +=
          static_cast<std::uint64_t>(collective_elements(*h, config_).all_gather) *
          dtype_size(full_precision || !h->uses_param_mixed_precision() ? h->dtype()
                                                                        : h->compute_dtype());
    auto& st = *state_;
    if (st.streams.on_accelerator() && config_.limit_all_gathers) {
      // Upstream's rate limiter: at most two units freed on the host but still in use on the
      // device; the host waits for the oldest before allocating another unsharded buffer.
      if (std::optional<Event> freed = st.free_events.dequeue_if_needed()) freed->synchronize();
    }
    h->unshard_async(st.comm.all_gather_queue(config_.shard_group), full_precision, &st.streams);
  }
  if (prefetch) return;
  try {
    h->wait_unshard([this](comm::Work& w) { wait_for_all_gather(w); });
  } catch (const std::exception& e) {
    throw RuntimeError(
        fmt::format("FSDP unit '{}' on rank {}: all-gather of its parameters "
                    "failed: {}",
                    fqn_, config_.shard_group->world_rank(config_.shard_group->rank()), e.what()));
  }
}

void UnitRuntime::wait_for_all_gather(comm::Work& work) {
  if (state_->streams.on_accelerator()) {
    if (!state_->skip_all_gather_wait) state_->comm.stream_wait(work, state_->streams.compute());
  } else
    state_->comm.wait(work);
}

UnitRuntime* UnitRuntime::handle_to_prefetch(PrefetchPoint point) const {
  const RootState& st = *state_;
  // Forward prefetches the next unit of the recorded forward order; backward, the previous one.
  int step = 0;
  switch (point) {
    case PrefetchPoint::Forward:
      if (!config_.forward_prefetch || !st.order_recorded) return nullptr;
      step = 1;
      break;
    case PrefetchPoint::PreBackward:
      if (config_.backward_prefetch != policies::BackwardPrefetch::BACKWARD_PRE) return nullptr;
      step = -1;
      break;
    case PrefetchPoint::PostBackward:
      if (config_.backward_prefetch != policies::BackwardPrefetch::BACKWARD_POST) return nullptr;
      step = -1;
      break;
  }
  const int i = st.order_index(this);
  const int target = i + step;
  if (i < 0 || target < 0 || target >= static_cast<int>(st.forward_order.size())) return nullptr;
  return st.forward_order[static_cast<std::size_t>(target)];
}

void UnitRuntime::prefetch_handle(PrefetchPoint point) {
  prefetch(handle_to_prefetch(point));
}

void UnitRuntime::prefetch(UnitRuntime* next) {
  if (next == nullptr || next->handle_ == nullptr) return;
  auto* h = next->handle_.get();
  const bool full = !in_backward_ && next->force_full_precision();
  if (h->is_unsharded_in(full) || h->unshard_in_flight_in(full)) return;
  if (config_.limit_all_gathers && state_->unshards_in_flight(in_backward_) >= 2) return;
  next->unshard(/*prefetch=*/true, full);
}

void UnitRuntime::reshard(bool record) {
  auto* h = handle_.get();
  if (h == nullptr || !h->needs_unshard()) return;
  if (h->unshard_in_flight()) h->wait_unshard([this](comm::Work& w) { wait_for_all_gather(w); });
  if (!h->is_unsharded()) return;
  if (record) state_->record(RuntimeEvent::Kind::Reshard, *this);
  RootState& st = *state_;
  if (!st.streams.on_accelerator()) {
    h->reshard();
    return;
  }
  // The block goes back to the allocator once the compute stream's work so far is done; the
  // event lets the next unshard wait for that (limit_all_gathers).
  h->record_unsharded_use(st.streams.compute());
  h->reshard();
  if (config_.limit_all_gathers) {
    Event freed(st.streams.device);
    freed.record();
    st.free_events.enqueue(freed);
  }
}

void UnitRuntime::pre_forward() {
  if (!state_) lazy_init();
  auto& st = *state_;
  // Upstream's training states: no forward of units that summon_full_params holds.
  for (auto* u : is_root() ? st.units : std::vector<UnitRuntime*>{this})
    FSDP_CHECK(!u->summoned_, RuntimeError,
               "FSDP unit '{}': forward inside summon_full_params (which holds unit '{}' "
               "unsharded): exit the context first",
               fqn_, u->fqn_);
  if (is_root()) {
    // A backward that failed left its flags set; a forward without backward left parameters
    // unsharded: start the iteration clean.
    if (!autograd::in_backward()) {
      for (auto* u : st.units) {
        u->pre_backward_done_ = false;
        u->post_backward_done_ = false;
        u->in_backward_ = false;
      }
      st.final_callback_queued = false;
      st.forward_depth = 0;  // a forward that failed did not finish
      st.reshard_all();
      cast_buffers_for_mode();
      st.streams.wait_for_compute();
    }
  }
  ++st.forward_depth;
  if (handle_ == nullptr) return;
  mark_unit_event("forward");
  if (!st.order_recorded && st.order_index(this) < 0) st.forward_order.push_back(this);
  unshard(false, force_full_precision());
  handle_->use_unsharded_views();
  prefetch_handle(PrefetchPoint::Forward);
}

void UnitRuntime::post_forward(nn::Value& output) {
  auto& st = *state_;
  if (st.forward_depth > 0) --st.forward_depth;
  const bool will_backward = autograd::is_grad_enabled();
  if (handle_ != nullptr && frees_after_forward(config_.strategy, is_root())) reshard();
  if (will_backward) {
    nn::map_tensors(output, [this](const Tensor& t) {
      if (t.defined() && t.requires_grad())
        t.register_hook([this](const Tensor&) {
          pre_backward();
          return Tensor();
        });
      return t;
    });
  }
  // A forward whose outputs will never see a backward (no_grad, eval): free what the root or
  // SHARD_GRAD_OP units kept for it.
  if (is_root() && !will_backward) st.reshard_all();
}

void UnitRuntime::pre_backward() {
  if (pre_backward_done_) return;
  for (auto* u : state_->units)
    FSDP_CHECK(!u->summoned_, ValueError,
               "FSDP unit '{}': backward inside summon_full_params (which holds unit '{}' "
               "unsharded): exit the context first",
               fqn_, u->fqn_);
  pre_backward_done_ = true;
  in_backward_ = true;
  auto& st = *state_;
  if (!st.final_callback_queued) {
    st.final_callback_queued = true;
    auto state = state_;
    autograd::queue_callback([state] { state->final_callback(); });
  }
  if (handle_ == nullptr) return;
  mark_unit_event("backward");
  unshard(false);
  handle_->use_unsharded_flat_param();
  handle_->use_forward_views_in_backward();
  prefetch_handle(PrefetchPoint::PreBackward);
  handle_->prepare_gradient_for_backward();
}

void UnitRuntime::post_backward() {
  auto& st = *state_;
  auto* h = handle_.get();
  const Tensor grad = h->flat_param().grad();
  if (!grad.defined()) return;
  FSDP_CHECK(!grad.requires_grad(), RuntimeError, "FSDP does not support gradients of gradients");
  post_backward_done_ = true;
  in_backward_ = true;
  if (h->needs_unshard() && (st.sync_gradients || reshards_after_forward(config_.strategy)))
    reshard();
  prefetch_handle(PrefetchPoint::PostBackward);
  if (!st.sync_gradients) return;

  // Reduce: cast to the reduction dtype, pre-divide, reduce-scatter (all-reduce for NO_SHARD) on
  // the reduction queue; on an accelerator all on the post-backward stream, after the compute
  // stream's work that produced the gradient.
  autograd::NoGradGuard no_grad;
  std::optional<StreamGuard> reduce_stream;
  if (st.streams.on_accelerator()) {
    st.streams.post_backward.wait_stream(st.streams.compute());
    reduce_stream.emplace(st.streams.post_backward);
  }
  Tensor g = h->take_unsharded_grad();
  // Freed on the host while the post-backward stream still reads it.
  if (reduce_stream) g.storage()->record_stream(st.streams.post_backward);
  if (g.dtype() != h->reduce_dtype()) {
    MemoryCategoryScope category(MemoryCategory::CommBuffers);
    g = g.to(h->reduce_dtype());
  }
  MemoryCategoryScope category(MemoryCategory::Gradients);
  const int shard_size = config_.shard_group->size();
  const int replicas = config_.replicate_group ? config_.replicate_group->size() : 1;
  const DivideFactors f = gradient_divide_factors(shard_size * replicas);
  if (f.pre != 1.0) mul_(g, 1.0 / f.pre);
  PendingReduction r;
  r.handle = h;
  r.unit = fqn_;
  r.input = g;
  r.replicate = config_.replicate_group.get();
  r.postdivide = f.post;
  const CollectiveElements moved = collective_elements(*h, config_);
  const std::uint64_t size = dtype_size(g.dtype());
  st.comm.bytes.reduce_scatter += static_cast<std::uint64_t>(moved.reduce_scatter) * size;
  st.comm.bytes.all_reduce += static_cast<std::uint64_t>(moved.all_reduce) * size;
  if (shard_size > 1) {
    auto& queue = st.comm.reduce_queue(config_.shard_group);
    if (h->sharded()) {
      r.output = empty({h->layout().shard_numel}, TensorOptions(g.dtype(), g.device()));
      r.work = queue.reduce_scatter_async(g.data_ptr(), r.output.data_ptr(),
                                          static_cast<std::size_t>(h->layout().shard_numel),
                                          g.dtype(), comm::ReduceOp::Sum, g.device());
    } else {
      r.output = g;
      r.work = queue.all_reduce_async(g.data_ptr(), static_cast<std::size_t>(g.numel()), g.dtype(),
                                      comm::ReduceOp::Sum, g.device());
    }
  } else {
    r.output = h->sharded() ? g.narrow(0, 0, h->layout().shard_numel).contiguous() : g;
  }
  st.record(RuntimeEvent::Kind::ReduceGrad, *this);
  st.comm.enqueue(std::move(r));
  // Keep at most two unsharded gradients alive in flight.
  st.comm.finish_reductions(2);
}

void UnitRuntime::post_backward_reshard_only() {
  auto& st = *state_;
  post_backward_done_ = true;
  in_backward_ = true;
  if (handle_->needs_unshard() && (st.sync_gradients || reshards_after_forward(config_.strategy)))
    reshard();
  prefetch_handle(PrefetchPoint::PostBackward);
}

void UnitRuntime::register_reshard_only_hook(const nn::Args& args) {
  // A frozen unit's flat parameter gets no gradient, so no post-accumulate-grad hook runs: free
  // its parameters once the gradients of its inputs are computed (upstream's
  // _register_post_backward_reshard_only_hook).
  std::vector<Tensor> inputs;
  auto collect = [&](const Tensor& t) {
    if (t.defined() && t.requires_grad()) inputs.push_back(t);
    return t;
  };
  for (const auto& v : args.positional) nn::map_tensors(v, collect);
  for (const auto& [k, v] : args.kwargs) nn::map_tensors(v, collect);
  if (inputs.empty()) return;
  autograd::register_multi_grad_hook(
      inputs, [this](const std::vector<Tensor>&) { post_backward_reshard_only(); });
}

std::optional<nn::Args> UnitRuntime::prepare_forward(const nn::Args& in) {
  pre_forward();
  std::optional<nn::Args> cast;
  if (auto dtype = forward_input_dtype()) {
    // Upstream's _cast_forward_inputs: floating tensors only, and only those of another dtype.
    auto to = [&](const Tensor& t) {
      return t.defined() && t.is_floating_point() && t.dtype() != *dtype ? t.to(*dtype) : t;
    };
    cast.emplace();
    for (const auto& v : in.positional) cast->positional.push_back(nn::map_tensors(v, to));
    for (const auto& [k, v] : in.kwargs) cast->kwargs[k] = nn::map_tensors(v, to);
  }
  if (handle_ != nullptr && !handle_->requires_grad() && autograd::is_grad_enabled())
    register_reshard_only_hook(cast ? *cast : in);
  return cast;
}

nn::Value UnitRuntime::forward(nn::Module& module, const nn::Args& in) {
  const std::optional<nn::Args> cast = prepare_forward(in);
  nn::Value out = module(cast ? *cast : in);
  post_forward(out);
  return out;
}

void UnitRuntime::run_around_container_modules(nn::Module& container,
                                               const traversal::ModuleSet& ignored) {
  // Upstream's FSDP1 leaves such parameters sharded (it warns); FSDP2 runs hooks on the
  // container's modules. Each module's forward unshards and reshards the unit, so a backward
  // sees it as a unit called several times. A recomputation in backward (activation
  // checkpointing) runs the hooks again: the unit is unsharded for backward then and stays so.
  for (const auto& [name, m] : container.child_slots()) {
    if (!m || dynamic_cast<FullyShardedDataParallel*>(m.get()) != nullptr || ignored.count(m.get()))
      continue;
    container_hooks_.push_back(m->register_forward_pre_hook(
        [this](nn::Module&, const nn::Args& args) -> std::optional<nn::Args> {
          if (autograd::in_backward()) return std::nullopt;
          return prepare_forward(args);
        }));
    container_hooks_.push_back(m->register_forward_hook(
        [this](nn::Module&, const nn::Args&, const nn::Value& out) -> std::optional<nn::Value> {
          if (autograd::in_backward()) return std::nullopt;
          nn::Value hooked = out;
          post_forward(hooked);
          return std::nullopt;
        }));
  }
}

void UnitRuntime::unshard_now() {
  if (!state_) lazy_init();
  state_->streams.wait_for_compute();
  unshard(false, /*full_precision=*/true);
  if (handle_ != nullptr) {
    autograd::NoGradGuard no_grad;
    handle_->use_unsharded_views();
  }
}

void UnitRuntime::reshard_now() {
  if (handle_ == nullptr) return;
  if (handle_->needs_unshard())
    reshard();
  else
    handle_->use_sharded_views();
}

}  // namespace fsdp
