#include "ops/checkpoint.h"

#include <fmt/format.h>

#include <any>
#include <vector>

#include "core/autograd.h"
#include "core/random.h"
#include "ops/checkpoint_frame.h"

namespace fsdp::ops {

namespace detail {

namespace {
thread_local Frame* t_frame = nullptr;
thread_local std::int64_t t_recomputes = 0;

// Thrown to end a recomputation early, once every saved tensor has been recomputed.
struct StopRecomputation {};

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

bool same_storage(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && !a.is_meta() && !b.is_meta() && a.storage() &&
         a.storage() == b.storage();
}
}  // namespace

std::string TensorMeta::str() const {
  return fmt::format("{{'shape': {}, 'dtype': {}, 'device': {}}}", shape_str(shape),
                     dtype_name(dtype), device.str());
}

Frame* current_frame() {
  return t_frame;
}
FrameScope::FrameScope(Frame* frame) : prev_(t_frame) {
  t_frame = frame;
}
FrameScope::~FrameScope() {
  t_frame = prev_;
}

std::size_t Frame::pack(const Tensor& t) {
  saved_meta_.push_back(meta_of(t));
  if (recording_) op_saved_.push_back(t);
  return saved_meta_.size() - 1;
}

Tensor Frame::unpack(std::size_t index) {
  if (index >= recomputed_.size() || !recomputed_[index].defined()) recompute();
  Tensor t = std::move(recomputed_[index]);
  recomputed_[index] = Tensor();
  return t;
}

void Frame::begin_op() {
  recording_ = true;
  op_start_ = saved_meta_.size();
  op_saved_.clear();
}

std::vector<SavedSource> Frame::end_op(const std::vector<Tensor>& inputs,
                                       const std::vector<Tensor>& outputs) {
  recording_ = false;
  std::vector<SavedSource> sources;
  for (std::size_t k = 0; k < op_saved_.size(); ++k) {
    const Tensor& t = op_saved_[k];
    SavedSource s;
    s.index = op_start_ + k;
    auto locate = [&](const std::vector<Tensor>& bases, SavedSource::Kind kind) {
      for (std::size_t i = 0; i < bases.size(); ++i) {
        if (!same_storage(t, bases[i])) continue;
        s.kind = kind;
        s.position = i;
        s.sizes = t.shape();
        s.strides = t.strides();
        s.offset = t.storage_offset() - bases[i].storage_offset();
        s.base_sizes = bases[i].shape();
        s.base_strides = bases[i].strides();
        return true;
      }
      return false;
    };
    if (!locate(outputs, SavedSource::Kind::Output) && !locate(inputs, SavedSource::Kind::Input)) {
      s.kind = SavedSource::Kind::Kept;  // an op-internal temporary: kept as in the forward
      s.kept = t.detach();
    }
    sources.push_back(std::move(s));
  }
  op_saved_.clear();
  return sources;
}

void Frame::replay_op(const char* op, const std::vector<SavedSource>& sources,
                      const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) {
  for (const auto& s : sources) {
    FSDP_CHECK(s.index == recompute_count_, CheckpointError,
               "torch.utils.checkpoint: {} saved tensor {} during the forward but is replayed "
               "when {} tensors have been saved during recomputation",
               op, s.index, recompute_count_);
    Tensor t;
    if (s.kind == SavedSource::Kind::Kept) {
      t = s.kept;
    } else {
      const auto& bases = s.kind == SavedSource::Kind::Input ? inputs : outputs;
      const Tensor& base = bases.at(s.position);
      FSDP_CHECK(base.shape() == s.base_sizes && base.strides() == s.base_strides, CheckpointError,
                 "torch.utils.checkpoint: {} {} {} has shape {} and strides {} at recomputation, "
                 "{} and {} during the forward",
                 op, s.kind == SavedSource::Kind::Input ? "input" : "output", s.position,
                 shape_str(base.shape()), shape_str(base.strides()), shape_str(s.base_sizes),
                 shape_str(s.base_strides));
      t = make_view(base.detach(), s.sizes, s.strides, base.storage_offset() + s.offset);
    }
    recomputed_.at(s.index) = t;
    ++recompute_count_;
  }
}

void Frame::recompute_pack(const Tensor& t) {
  const std::size_t i = recompute_count_++;
  if (i >= saved_meta_.size())
    throw CheckpointError(
        "torch.utils.checkpoint: trying to save more tensors during recomputation than during "
        "the original forward pass.");
  if (check_metadata && !(meta_of(t) == saved_meta_[i]))
    throw CheckpointError(fmt::format(
        "torch.utils.checkpoint: Recomputed values for the following tensors have different "
        "metadata than during the forward pass.\ntensor at position {}:\nsaved metadata: {}\n"
        "recomputed metadata: {}\n",
        i, saved_meta_[i].str(), meta_of(t).str()));
  recomputed_[i] = t.detach();
  if (early_stop && recompute_count_ == saved_meta_.size()) throw StopRecomputation{};
}

void Frame::recompute() {
  ++t_recomputes;
  recomputed_.assign(saved_meta_.size(), Tensor());
  recompute_count_ = 0;
  autograd::SavedTensorHooks hooks;
  hooks.pack = [this](const Tensor& t) -> std::any {
    recompute_pack(t);
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
    FrameScope scope(this);
    std::optional<dispatch::ModeGuard> mode_guard;
    if (recompute_mode) mode_guard.emplace(recompute_mode);
    try {
      fn(detached);
    } catch (const StopRecomputation&) {
      stopped = true;
    }
  }
  if (!stopped && recompute_count_ != saved_meta_.size())
    throw CheckpointError(fmt::format(
        "torch.utils.checkpoint: A different number of tensors was saved during the original "
        "forward and recomputation.\nNumber of tensors saved during forward: {}\nNumber of "
        "tensors saved during recomputation: {}",
        saved_meta_.size(), recompute_count_));
}

}  // namespace detail

namespace {
using detail::Frame;

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
  return detail::t_recomputes;
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
  hooks.pack = [f](const Tensor& t) -> std::any { return std::any(f->pack(t)); };
  // The unpack hook owns the frame: it lives as long as the graph's saved tensors.
  hooks.unpack = [frame](const std::any& packed) -> Tensor {
    return frame->unpack(std::any_cast<std::size_t>(packed));
  };
  autograd::SavedTensorHooksGuard guard(std::move(hooks));
  detail::FrameScope scope(f);
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
