#include "ops/checkpoint.h"

#include <fmt/format.h>

#include <any>
#include <vector>

#include "core/autograd.h"
#include "core/random.h"

namespace fsdp::ops {

namespace {
thread_local std::int64_t t_recomputes = 0;

// Thrown to end a recomputation early, once every saved tensor has been recomputed.
struct StopRecomputation {};

struct TensorMeta {
  Shape shape;
  DType dtype;
  Device device;
  bool operator==(const TensorMeta&) const = default;
  std::string str() const {
    return fmt::format("{{'shape': {}, 'dtype': {}, 'device': {}}}", shape_str(shape),
                       dtype_name(dtype), device.str());
  }
};

// One checkpointed call: what recomputation needs, and the recomputed saved tensors.
struct Frame {
  Function fn;
  nn::Args inputs;
  bool preserve_rng = true;
  Generator::State rng;
  dispatch::ModePtr recompute_mode;
  bool check_metadata = true;
  bool early_stop = true;
  std::vector<TensorMeta> saved_meta;  // per saved tensor, at forward
  std::vector<Tensor> recomputed;      // per saved tensor; cleared once unpacked

  void recompute();
  Tensor unpack(std::size_t index) {
    if (index >= recomputed.size() || !recomputed[index].defined()) recompute();
    Tensor t = std::move(recomputed[index]);
    recomputed[index] = Tensor();
    return t;
  }
};

TensorMeta meta_of(const Tensor& t) {
  return {t.shape(), t.dtype(), t.device()};
}

// Restores the thread's default generator when the recomputation ends (torch's fork_rng).
class ForkRng {
 public:
  ForkRng(bool active, const Generator::State& state)
      : active_(active), saved_(default_generator().get_state()) {
    if (active_) default_generator().set_state(state);
  }
  ~ForkRng() {
    if (active_) default_generator().set_state(saved_);
  }

 private:
  bool active_;
  Generator::State saved_;
};

void Frame::recompute() {
  ++t_recomputes;
  recomputed.assign(saved_meta.size(), Tensor());
  std::size_t count = 0;
  autograd::SavedTensorHooks hooks;
  hooks.pack = [this, &count](const Tensor& t) -> std::any {
    const std::size_t i = count++;
    if (i >= saved_meta.size())
      throw CheckpointError(
          "torch.utils.checkpoint: trying to save more tensors during recomputation than during "
          "the original forward pass.");
    if (check_metadata && !(meta_of(t) == saved_meta[i]))
      throw CheckpointError(fmt::format(
          "torch.utils.checkpoint: Recomputed values for the following tensors have different "
          "metadata than during the forward pass.\ntensor at position {}:\nsaved metadata: {}\n"
          "recomputed metadata: {}\n",
          i, saved_meta[i].str(), meta_of(t).str()));
    recomputed[i] = t.detach();
    if (early_stop && count == saved_meta.size()) throw StopRecomputation{};
    return {};
  };
  hooks.unpack = [](const std::any&) -> Tensor {
    throw CheckpointError("torch.utils.checkpoint: the recomputation's graph is not for backward");
  };
  // Inputs as leaves with the forward's requires_grad, so the recomputation records a graph of
  // its own (and its ops save what they saved in the forward).
  nn::Args detached = inputs;
  for (auto& v : detached.positional)
    v = nn::map_tensors(v, [](const Tensor& t) {
      Tensor d = t.detach();
      if (t.requires_grad()) d.requires_grad_(true);
      return d;
    });
  bool stopped = false;
  {
    autograd::GradModeGuard grad(true);  // backward runs under no_grad
    ForkRng rng_guard(preserve_rng, rng);
    autograd::SavedTensorHooksGuard hooks_guard(hooks);
    std::optional<dispatch::ModeGuard> mode_guard;
    if (recompute_mode) mode_guard.emplace(recompute_mode);
    try {
      fn(detached);
    } catch (const StopRecomputation&) {
      stopped = true;
    }
  }
  if (!stopped && count != saved_meta.size())
    throw CheckpointError(fmt::format(
        "torch.utils.checkpoint: A different number of tensors was saved during the original "
        "forward and recomputation.\nNumber of tensors saved during forward: {}\nNumber of "
        "tensors saved during recomputation: {}",
        saved_meta.size(), count));
}

void validate(const CheckpointOptions& o) {
  if (o.use_reentrant.value_or(false)) {
    FSDP_CHECK(!o.context_fn && !o.debug, ValueError,
               "Passing `context_fn` or `debug` is only supported when use_reentrant=False.");
    throw NotImplementedError(
        "checkpoint: use_reentrant=True is not supported (only the non-reentrant algorithm "
        "exists here); pass use_reentrant=False");
  }
  FSDP_CHECK(o.determinism_check == "default" || o.determinism_check == "none", ValueError,
             "determinism_check should be one of ['default', 'none'], but got {}",
             o.determinism_check);
  FSDP_CHECK(!(o.debug && o.context_fn), ValueError,
             "debug=True is incompatible with non-default context_fn");
}
}  // namespace

std::int64_t checkpoint_recompute_count() {
  return t_recomputes;
}

nn::Value checkpoint(const Function& fn, const nn::Args& args, const CheckpointOptions& options) {
  validate(options);
  auto frame = std::make_shared<Frame>();
  frame->fn = fn;
  frame->inputs = args;
  frame->preserve_rng = options.preserve_rng_state;
  frame->rng = default_generator().get_state();
  frame->check_metadata = options.determinism_check == "default";
  // Selective checkpointing replays cached outputs in order: the recomputation must run to the end.
  frame->early_stop = options.early_stop && !options.context_fn;
  dispatch::ModePtr forward_mode;
  if (options.context_fn) std::tie(forward_mode, frame->recompute_mode) = options.context_fn();

  autograd::SavedTensorHooks hooks;
  Frame* f = frame.get();
  hooks.pack = [f](const Tensor& t) -> std::any {
    f->saved_meta.push_back(meta_of(t));
    return std::any(f->saved_meta.size() - 1);
  };
  // The unpack hook owns the frame: it lives as long as the graph's saved tensors.
  hooks.unpack = [frame](const std::any& packed) -> Tensor {
    return frame->unpack(std::any_cast<std::size_t>(packed));
  };
  autograd::SavedTensorHooksGuard guard(std::move(hooks));
  std::optional<dispatch::ModeGuard> mode_guard;
  if (forward_mode) mode_guard.emplace(forward_mode);
  return fn(args);
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x,
                  const CheckpointOptions& options) {
  return checkpoint([fn](const nn::Args& a) { return nn::Value(fn(a.tensor(0))); }, nn::Args{x},
                    options)
      .tensor();
}

nn::Value checkpoint(const Function& fn, const std::vector<nn::Value>& args, const Kwargs& kwargs) {
  CheckpointOptions o;
  nn::Args call(args);
  for (const auto& [k, v] : kwargs) {
    if (k == "use_reentrant") {
      o.use_reentrant = v.value().to_bool();
    } else if (k == "preserve_rng_state") {
      o.preserve_rng_state = v.value().to_bool();
    } else if (k == "context_fn") {
      if (!v.is_none()) o.context_fn = std::any_cast<ContextFn>(v.opaque());
    } else if (k == "determinism_check") {
      o.determinism_check = v.value().str();
    } else if (k == "debug") {
      o.debug = v.value().to_bool();
    } else if (k == "early_stop") {
      o.early_stop = v.value().to_bool();
    } else {
      call.kwargs.emplace(k, v.value());
    }
  }
  return checkpoint(fn, call, o);
}

}  // namespace fsdp::ops
