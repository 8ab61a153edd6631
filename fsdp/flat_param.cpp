#include "fsdp/flat_param.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "core/autograd.h"
#include "core/error.h"
#include "core/memory_stats.h"
#include "core/ops.h"
#include "core/stream_sanitizer.h"
#include "fsdp/flat_param_views.h"

namespace fsdp {

namespace {

// A 1-D view of `t` (contiguous) of `numel` elements starting at `offset`.
Tensor flat_view(const Tensor& t, std::int64_t offset, std::int64_t numel) {
  return make_view(t, {numel}, {1}, t.storage_offset() + offset);
}

// A 1-D tensor of `numel` elements of `dtype` over `storage` (which may be empty: freed).
Tensor over_storage(const std::shared_ptr<Storage>& storage, std::int64_t numel, DType dtype,
                    Device device) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = storage;
  impl->set_sizes({numel});
  impl->strides = {1};
  impl->dtype = dtype;
  impl->device = device;
  return Tensor(std::move(impl));
}

}  // namespace

FlatParamHandle::FlatParamHandle(std::vector<FlatParamInfo> params,
                                 std::vector<SharedParamInfo> shared, const FlatParamConfig& config,
                                 const std::string& unit_name)
    : unit_name_(unit_name),
      config_(config),
      params_(std::move(params)),
      shared_(std::move(shared)) {
  FSDP_CHECK(!params_.empty(), RuntimeError, "FlatParamHandle for unit '{}': no parameters",
             unit_name_);
  // Validation, as upstream's FlatParamHandle._init_flat_param_and_metadata.
  const Tensor& first = params_.front().orig;
  dtype_ = first.dtype();
  const Device orig_device = first.device();
  const bool materialize = orig_device.is_meta() && config_.materialize_meta_on.has_value();
  const Device device = materialize ? *config_.materialize_meta_on : orig_device;
  compute_device_ = device;
  offload_ = config_.offload_params && !device.is_cpu() && !device.is_meta();
  bool any_requires_grad = false, all_require_grad = true;
  for (const auto& p : params_) {
    FSDP_CHECK(p.orig.is_floating_point(), ValueError,
               "Cannot flatten integer dtype tensors (unit '{}', parameter '{}' is {})", unit_name_,
               p.fqn, dtype_name(p.orig.dtype()));
    FSDP_CHECK(p.orig.dtype() == dtype_, ValueError,
               "Must flatten tensors with uniform dtype but got {} and {} (unit '{}', parameters "
               "'{}' and '{}')",
               dtype_name(dtype_), dtype_name(p.orig.dtype()), unit_name_, params_.front().fqn,
               p.fqn);
    FSDP_CHECK(p.orig.device() == orig_device, ValueError,
               "Must flatten tensors on the same device but got {} and {} (unit '{}', parameters "
               "'{}' and '{}')",
               orig_device.str(), p.orig.device().str(), unit_name_, params_.front().fqn, p.fqn);
    any_requires_grad = any_requires_grad || p.orig.requires_grad();
    all_require_grad = all_require_grad && p.orig.requires_grad();
  }
  FSDP_CHECK(config_.use_orig_params || any_requires_grad == all_require_grad, ValueError,
             "Must flatten tensors with uniform `requires_grad` when `use_orig_params=False` "
             "(unit '{}')",
             unit_name_);
  requires_grad_ = any_requires_grad;
  MemoryCategoryScope category(MemoryCategory::Parameters);
  // Upstream's _init_param_reduce_dtypes: a param_dtype alone also sets the reduction dtype.
  compute_dtype_ = config_.param_dtype.value_or(dtype_);
  reduce_dtype_ = config_.param_dtype && !config_.reduce_dtype
                      ? *config_.param_dtype
                      : config_.reduce_dtype.value_or(dtype_);
  for (DType d : {compute_dtype_, reduce_dtype_})
    FSDP_CHECK(is_floating(d), ValueError,
               "FSDP unit '{}': mixed precision dtypes must be floating, got {}", unit_name_,
               dtype_name(d));

  std::vector<std::int64_t> numels;
  numels.reserve(params_.size());
  for (const auto& p : params_) numels.push_back(p.orig.numel());
  // Aligned for the dtype forward and backward use (upstream's
  // _get_aligned_numel(_fwd_bwd_param_dtype)): param_dtype under mixed precision.
  layout_ = flat_param_layout(numels, dtype_size(compute_dtype_), config_.use_orig_params,
                              config_.group_size, is_sharded(config_.strategy));

  // The unsharded flat buffer: parameters, alignment padding (42, as upstream), zero right padding.
  const bool meta = device.is_meta();
  const TensorOptions opts(dtype_, device);
  full_storage_ = std::make_shared<Storage>(
      meta ? 0 : static_cast<std::size_t>(layout_.padded_numel) * dtype_size(dtype_), device);
  full_padded_ = over_storage(full_storage_, layout_.padded_numel, dtype_, device);
  // Sharded over a meta unit (allocate_only), the unsharded buffer is released below before
  // anything reads it: the shard is built directly, so wrapping a large meta model does not write
  // every unit's full buffer on every rank (most of a sharded load's time otherwise).
  const bool shard_only = materialize && layout_.sharded;
  if (!meta && !shard_only) {
    autograd::NoGradGuard no_grad;
    full_padded_.zero_();
    for (const auto& pad : layout_.paddings)
      flat_view(full_padded_, pad.start, pad.numel).fill_(kFlatParamPaddingValue);
    if (!materialize)  // else the parameters have no values yet: the buffer becomes theirs
      for (std::size_t i = 0; i < params_.size(); ++i)
        copy_unversioned(flat_view(full_padded_, layout_.offsets[i], layout_.numels[i]),
                         params_[i].orig.reshape({layout_.numels[i]}));
  }
  if (layout_.sharded) {
    local_shard_ = zeros({layout_.shard_numel}, opts);
    const std::int64_t b = layout_.shard_begin(config_.rank), e = layout_.shard_end(config_.rank);
    if (!meta && e > b && !shard_only) {
      copy_unversioned(flat_view(local_shard_, 0, e - b), flat_view(full_padded_, b, e - b));
    } else if (!meta && e > b) {  // what the full buffer would have held: zeros, 42 in padding
      autograd::NoGradGuard no_grad;
      for (const auto& pad : layout_.paddings) {
        const std::int64_t lo = std::max(pad.start, b), hi = std::min(pad.start + pad.numel, e);
        if (hi > lo) flat_view(local_shard_, lo - b, hi - lo).fill_(kFlatParamPaddingValue);
      }
    }
  } else {
    local_shard_ = flat_view(full_padded_, 0, layout_.unpadded_numel);
  }
  if (offload_) {
    // The shard moves to the host, pinned where the device has page-locked memory (its copies to
    // the device are then DMA, asynchronous to the host); the device keeps nothing of it between
    // uses.
    const std::int64_t n = local_shard_.numel();
    Tensor host = over_storage(
        Storage::pinned(static_cast<std::size_t>(n) * dtype_size(dtype_), compute_device_), n,
        dtype_, kCPU);  // host by design: CPUOffload
    copy_unversioned(host, local_shard_);
    local_shard_ = host;
  }
  flat_param_ = empty({0}, opts);
  flat_param_.set_data(local_shard_);
  flat_param_.requires_grad_(requires_grad_);

  // Point the module slots at the flat buffer.
  std::vector<Shape> shapes;
  for (const auto& p : params_) shapes.push_back(p.orig.shape());
  {
    autograd::NoGradGuard no_grad;
    views_ = flat_param_views(full_padded_, shapes, layout_.offsets);
  }
  for (std::size_t i = 0; i < params_.size(); ++i) {
    params_[i].shape = params_[i].orig.shape();
    // The original tensors now view the flat buffer: their own storage is released (a handle
    // holding them must not keep a second, unsharded copy of the unit alive).
    params_[i].orig.set_data(views_[i]);
  }
  if (!config_.use_orig_params) {
    for (std::size_t i = 0; i < params_.size(); ++i) {
      params_[i].module->remove_parameter(params_[i].name);
      params_[i].module->set_tensor_attribute(params_[i].name, views_[i]);
    }
    for (const auto& s : shared_) {
      s.module->remove_parameter(s.name);
      s.module->set_tensor_attribute(s.name, views_[s.primary]);
    }
  }
  if (uses_param_mixed_precision()) {
    // The buffer built above holds the parameters' own dtype: sharded (or offloaded), it becomes
    // the full-precision unsharded buffer; NO_SHARD, it is the shard itself. The compute-dtype
    // buffer is allocated at each unshard.
    if (separate_unsharded_buffer()) {
      full_prec_storage_ = full_storage_;
      full_prec_padded_ = full_padded_;
    }
    full_storage_ = std::make_shared<Storage>(0, device);
    full_padded_ = over_storage(full_storage_, layout_.padded_numel, compute_dtype_, device);
  }
  if (separate_unsharded_buffer()) {
    (full_prec_storage_ ? full_prec_storage_ : full_storage_)->resize(0);
    unsharded_ = false;
  } else {
    unsharded_ = !uses_param_mixed_precision();
  }
  use_sharded_views();
}

void FlatParamHandle::set_module_tensor(nn::Module& m, const std::string& name, const Tensor& t,
                                        bool as_param) {
  if (as_param)
    m.set_parameter(name, t);
  else
    m.set_tensor_attribute(name, t);
}

bool FlatParamHandle::is_unsharded_in(bool full_precision) const {
  if (!needs_unshard()) return true;
  if (!unsharded_) return false;
  return !uses_param_mixed_precision() || unsharded_low_ == !full_precision;
}

bool FlatParamHandle::unshard_in_flight_in(bool full_precision) const {
  return pending_unshard_ != nullptr &&
         (!uses_param_mixed_precision() || unsharded_low_ == !full_precision);
}

void FlatParamHandle::unshard_async(comm::ProcessGroup& group, bool full_precision,
                                    const RootStreams* streams) {
  if (!needs_unshard() || is_unsharded_in(full_precision) || unshard_in_flight_in(full_precision))
    return;
  if (unsharded_ || pending_unshard_) reshard();  // unsharded in the other precision
  const bool low = uses_param_mixed_precision() && !full_precision;
  unsharded_low_ = low;
  const bool into_full_prec = uses_param_mixed_precision() && !low;
  if (!layout_.sharded) {
    // NO_SHARD: the shard is the full-precision parameter; the compute copy is a cast of it,
    // and an offloaded shard is copied to the device (in either precision).
    if (low || offload_) {
      MemoryCategoryScope category(MemoryCategory::Parameters);
      Storage& storage = into_full_prec ? *full_prec_storage_ : *full_storage_;
      const Tensor& dst = into_full_prec ? full_prec_padded_ : full_padded_;
      storage.resize(static_cast<std::size_t>(layout_.padded_numel) * dtype_size(dst.dtype()));
      copy_unversioned(flat_view(dst, 0, local_shard_.numel()), local_shard_);
      if (offload_) shard_read_.record(current_stream(compute_device_));
    }
    unsharded_ = true;
    return;
  }
  Storage& storage = into_full_prec ? *full_prec_storage_ : *full_storage_;
  const Tensor& dst = into_full_prec ? full_prec_padded_ : full_padded_;
  const bool on_streams = streams != nullptr && streams->on_accelerator();
  // On an accelerator the buffer is allocated on the unshard stream, the cast runs on the
  // pre-unshard stream, and the all-gather is queued on the unshard stream after it.
  std::optional<StreamGuard> gather_stream;
  if (on_streams) gather_stream.emplace(streams->unshard);
  {
    MemoryCategoryScope category(MemoryCategory::Parameters);
    storage.resize(static_cast<std::size_t>(layout_.padded_numel) * dtype_size(dst.dtype()));
  }
  if (on_streams && stream_sanitizer::enabled())
    stream_sanitizer::set_owner(
        storage.data(), storage.nbytes(),
        fmt::format("the unsharded flat parameter of FSDP unit '{}'", unit_name_));
  const void* src = local_shard_.data_ptr();
  const bool staged = low || offload_;  // the all-gather's input is a cast or device copy
  if (staged) {
    std::optional<StreamGuard> cast_stream;
    if (on_streams) cast_stream.emplace(streams->pre_unshard);
    MemoryCategoryScope category(MemoryCategory::CommBuffers);
    mp_shard_ = empty({layout_.shard_numel}, TensorOptions(dst.dtype(), compute_device_));
    copy_unversioned(mp_shard_, local_shard_);
    if (offload_) shard_read_.record(current_stream(compute_device_));
    src = mp_shard_.data_ptr();
  }
  if (on_streams) {
    streams->unshard.wait_stream(streams->pre_unshard);
    // The host frees the staged shard once the all-gather is waited for, not when it has run.
    if (staged) mp_shard_.storage()->record_stream(streams->unshard);
  }
  pending_unshard_ =
      group.all_gather_async(src, dst.data_ptr(), static_cast<std::size_t>(layout_.shard_numel),
                             dst.dtype(), compute_device_);
}

void FlatParamHandle::record_unsharded_use(const Stream& stream) {
  if (!needs_unshard() || !unsharded_) return;
  if (full_storage_->nbytes() > 0) full_storage_->record_stream(stream);
  if (full_prec_storage_ && full_prec_storage_->nbytes() > 0)
    full_prec_storage_->record_stream(stream);
}

void FlatParamHandle::wait_unshard(const std::function<void(comm::Work&)>& wait) {
  if (!pending_unshard_) return;
  auto work = std::move(pending_unshard_);
  pending_unshard_.reset();
  if (wait)
    wait(*work);
  else
    work->wait();
  mp_shard_ = Tensor();
  unsharded_ = true;
}

const Tensor& FlatParamHandle::unsharded_padded() const {
  FSDP_CHECK(is_unsharded() && !pending_unshard_, RuntimeError,
             "FSDP unit '{}': the flat parameter is not unsharded (internal schedule error)",
             unit_name_);
  if (!uses_param_mixed_precision()) return full_padded_;
  if (unsharded_low_) return full_padded_;
  return separate_unsharded_buffer() ? full_prec_padded_ : local_shard_;
}

void FlatParamHandle::use_unsharded_flat_param() {
  FSDP_CHECK(is_unsharded(), RuntimeError,
             "FSDP unit '{}': the flat parameter is not unsharded (internal schedule error)",
             unit_name_);
  if (needs_unshard()) flat_param_.set_data(unsharded_padded());
}

void FlatParamHandle::use_unsharded_views() {
  use_unsharded_flat_param();
  std::vector<Shape> shapes;
  shapes.reserve(params_.size());
  for (const auto& p : params_) shapes.push_back(p.shape);
  views_ = flat_param_views(flat_param_, shapes, layout_.offsets);
  const bool as_param = config_.use_orig_params;
  for (std::size_t i = 0; i < params_.size(); ++i)
    set_module_tensor(*params_[i].module, params_[i].name, views_[i], as_param);
  for (const auto& s : shared_) set_module_tensor(*s.module, s.name, views_[s.primary], as_param);
}

void FlatParamHandle::use_forward_views_in_backward() {
  // Upstream re-establishes unsharded views in its pre-backward for the same reason. Ours are the
  // forward's own tensors: the unshard refilled their storage, and they carry the forward's
  // autograd history, so the recomputed ops save what the forward's saved.
  if (!config_.use_orig_params || !needs_unshard()) return;
  FSDP_CHECK(is_unsharded() && !pending_unshard_, RuntimeError,
             "FSDP unit '{}': the flat parameter is not unsharded (internal schedule error)",
             unit_name_);
  for (std::size_t i = 0; i < params_.size(); ++i)
    set_module_tensor(*params_[i].module, params_[i].name, views_[i], /*as_param=*/true);
  for (const auto& s : shared_)
    set_module_tensor(*s.module, s.name, views_[s.primary], /*as_param=*/true);
}

void FlatParamHandle::use_unsharded_param_views(const Tensor& full_grad) {
  use_unsharded_flat_param();
  autograd::NoGradGuard no_grad;
  const Tensor& full = needs_unshard() ? unsharded_padded() : local_shard_;
  auto view = [&](const Tensor& base, std::size_t i) {
    return make_view(base, params_[i].shape, contiguous_strides(params_[i].shape),
                     base.storage_offset() + layout_.offsets[i]);
  };
  std::vector<Tensor> values;
  // Without use_orig_params the module slots are plain attributes: the views replace them as
  // parameters, as upstream's unflattened Parameters.
  auto expose = [&](nn::Module& m, const std::string& name, const Tensor& t) {
    if (m.has_parameter(name)) return;  // a module met twice: exposed at its first name
    if (m.has_tensor_attribute(name)) m.remove_tensor_attribute(name);
    m.register_parameter(name, t, requires_grad());
  };
  for (std::size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    if (!config_.use_orig_params) {
      values.push_back(view(full, i));
      expose(*p.module, p.name, values.back());
      continue;
    }
    p.orig.set_data(view(full, i));
    if (full_grad.defined() && p.orig.requires_grad()) p.orig.set_grad(view(full_grad, i));
    p.module->set_parameter(p.name, p.orig);
    values.push_back(p.orig);
  }
  for (const auto& sp : shared_) {
    if (config_.use_orig_params)
      set_module_tensor(*sp.module, sp.name, values[sp.primary], true);
    else
      expose(*sp.module, sp.name, values[sp.primary]);
  }
  if (!config_.use_orig_params) exposed_ = values;
}

void FlatParamHandle::hide_unsharded_param_views() {
  if (exposed_.empty()) return;
  auto hide = [](nn::Module& m, const std::string& name, const Tensor& t) {
    if (m.has_parameter(name)) m.remove_parameter(name);
    m.set_tensor_attribute(name, t);
  };
  for (std::size_t i = 0; i < params_.size(); ++i)
    hide(*params_[i].module, params_[i].name, exposed_[i]);
  for (const auto& sp : shared_) hide(*sp.module, sp.name, exposed_[sp.primary]);
  exposed_.clear();
}

void FlatParamHandle::wait_for_shard_reads() const {
  // Query first: at the end of backward the runtime has synchronised already, and a query is no
  // host wait.
  if (shard_read_.recorded() && !shard_read_.query()) shard_read_.synchronize();
}

void FlatParamHandle::land_offloaded_grad() {
  if (!grad_in_flight_) return;
  if (!grad_copied_.query()) grad_copied_.synchronize();
  grad_in_flight_ = false;
  autograd::NoGradGuard no_grad;
  MemoryCategoryScope category(MemoryCategory::Gradients);
  if (saved_grad_shard_.defined())
    add_(saved_grad_shard_, grad_staging_);
  else
    saved_grad_shard_ = grad_staging_.clone();  // the staging buffer is reused next backward
}

void FlatParamHandle::write_back_unsharded() {
  const Tensor& full = unsharded_padded();
  wait_for_shard_reads();
  if (full.is_same(local_shard_) || !needs_unshard()) return;  // the views are the shard itself
  if (!sharded()) {  // a compute-dtype copy (never summoned so, but kept consistent)
    copy_unversioned(local_shard_, flat_view(full, 0, local_shard_.numel()));
    local_shard_.storage()->bump_version();
    return;
  }
  const std::int64_t b = layout_.shard_begin(config_.rank), e = layout_.shard_end(config_.rank);
  if (e > b) {
    copy_unversioned(flat_view(local_shard_, 0, e - b), flat_view(full, b, e - b));
    local_shard_.storage()->bump_version();
  }
}

void FlatParamHandle::reshard() {
  if (!needs_unshard()) return;
  if (pending_unshard_) wait_unshard();  // a prefetch in the other precision, say
  flat_param_.set_data(local_shard_);
  full_storage_->resize(0);
  if (full_prec_storage_) full_prec_storage_->resize(0);
  unsharded_ = false;
  use_sharded_views();
}

void FlatParamHandle::use_sharded_views() {
  if (!config_.use_orig_params) {
    flat_param_.set_data(local_shard_);
    return;
  }
  if (!layout_.sharded) flat_param_.set_data(local_shard_);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    if (layout_.sharded) {
      const ShardParamInfo info = layout_.shard_info(i, config_.rank);
      p.orig.set_data(
          flat_view(local_shard_, info.in_shard ? info.offset_in_shard : 0, info.numel_in_shard));
    } else {
      p.orig.set_data(
          make_view(local_shard_, p.shape, contiguous_strides(p.shape), layout_.offsets[i]));
    }
    p.module->set_parameter(p.name, p.orig);
  }
  for (const auto& s : shared_) s.module->set_parameter(s.name, params_[s.primary].orig);
}

void FlatParamHandle::prepare_gradient_for_backward() {
  if (unreduced_grad_kept_) return;  // no_sync(): AccumulateGrad adds into the kept gradient
  if (config_.use_orig_params) {
    // The original parameters' grads are views of the sharded gradient: zero_grad() on them
    // (set to None) means "start afresh".
    bool any = false;
    for (const auto& p : params_) any = any || p.orig.grad().defined();
    if (!any) flat_param_.set_grad(Tensor());
  }
  // A reduced gradient from an earlier backward: the next reduction adds into it.
  saved_grad_shard_ = flat_param_.grad();
  flat_param_.set_grad(Tensor());
}

Tensor FlatParamHandle::take_unsharded_grad() {
  Tensor g = flat_param_.grad();
  flat_param_.set_grad(Tensor());
  unreduced_grad_kept_ = false;
  return g;
}

void FlatParamHandle::accumulate_reduced_grad(const Tensor& shard_grad) {
  autograd::NoGradGuard no_grad;
  MemoryCategoryScope category(MemoryCategory::Gradients);
  const DType grad_dtype = config_.keep_low_precision_grads ? compute_dtype_ : dtype_;
  Tensor g = shard_grad.dtype() == grad_dtype ? shard_grad : shard_grad.to(grad_dtype);
  if (offload_) {
    // To the host, where the optimizer steps: into a pinned buffer without waiting (the copy runs
    // after the reduction, on its stream), added to the kept gradient at the end of backward
    // (finalize_gradients), as upstream's _cpu_grad. Where the device has no pinned memory the
    // copy is done when this returns.
    land_offloaded_grad();  // (one reduction per backward: nothing in flight here)
    if (!grad_staging_.defined() || grad_staging_.dtype() != g.dtype()) {
      const std::int64_t n = g.numel();
      grad_staging_ = over_storage(
          Storage::pinned(static_cast<std::size_t>(n) * dtype_size(g.dtype()), compute_device_), n,
          g.dtype(), kCPU);  // host by design: CPUOffload
    }
    copy_unversioned_non_blocking(grad_staging_, g.contiguous());
    grad_copied_.record(current_stream(compute_device_));
    grad_in_flight_ = true;
    return;
  }
  if (saved_grad_shard_.defined()) {
    add_(saved_grad_shard_, g);
  } else {
    saved_grad_shard_ = g;
  }
}

void FlatParamHandle::record_reduced_grad_use(const Stream& stream) {
  if (saved_grad_shard_.defined() && !saved_grad_shard_.device().is_cpu())
    saved_grad_shard_.storage()->record_stream(stream);
}

void FlatParamHandle::finalize_gradients(bool synced) {
  wait_for_shard_reads();  // the optimizer writes the shard next
  land_offloaded_grad();
  if (!synced) {
    unreduced_grad_kept_ = flat_param_.grad().defined();
    return;
  }
  flat_param_.set_grad(saved_grad_shard_);
  saved_grad_shard_ = Tensor();
  use_sharded_grad_views();
}

void FlatParamHandle::use_sharded_grad_views() {
  if (!config_.use_orig_params) return;
  const Tensor g = flat_param_.grad();
  for (std::size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    if (!p.orig.requires_grad()) continue;
    if (!g.defined()) {
      p.orig.set_grad(Tensor());
    } else if (layout_.sharded) {
      // A parameter with nothing in this rank's shard has no gradient here (upstream: None), so
      // optimizers skip it on this rank.
      const ShardParamInfo info = layout_.shard_info(i, config_.rank);
      p.orig.set_grad(info.in_shard ? flat_view(g, info.offset_in_shard, info.numel_in_shard)
                                    : Tensor());
    } else {
      p.orig.set_grad(make_view(g, p.shape, contiguous_strides(p.shape), layout_.offsets[i]));
    }
  }
}

void FlatParamHandle::load_full_param(std::size_t param, const Tensor& full) {
  const auto& p = params_.at(param);
  FSDP_CHECK(full.shape() == p.shape, ValueError,
             "loading '{}' of unit '{}': the value has shape {}, the parameter {}", p.fqn,
             unit_name_, shape_str(full.shape()), shape_str(p.shape));
  autograd::NoGradGuard no_grad;
  wait_for_shard_reads();
  Tensor flat = full.contiguous().reshape({layout_.numels[param]});
  if (!layout_.sharded) {
    copy_unversioned(flat_view(local_shard_, layout_.offsets[param], layout_.numels[param]),
                     flat.to(dtype_));
    local_shard_.storage()->bump_version();
    return;
  }
  const ShardParamInfo info = layout_.shard_info(param, config_.rank);
  if (!info.in_shard) return;
  copy_unversioned(flat_view(local_shard_, info.offset_in_shard, info.numel_in_shard),
                   flat_view(flat, info.intra_param_start, info.numel_in_shard).to(dtype_));
  local_shard_.storage()->bump_version();
}

Tensor FlatParamHandle::shard_piece(std::size_t param) const {
  const ShardParamInfo info = shard_info(param);
  return flat_view(local_shard_, info.offset_in_shard, info.numel_in_shard);
}

void FlatParamHandle::load_shard_piece(std::size_t param, const Tensor& values) {
  const ShardParamInfo info = shard_info(param);
  FSDP_CHECK(values.numel() == info.numel_in_shard, ValueError,
             "loading '{}' of unit '{}': this rank's piece has {} elements, the value {}",
             params_.at(param).fqn, unit_name_, info.numel_in_shard, values.numel());
  if (info.numel_in_shard == 0) return;
  autograd::NoGradGuard no_grad;
  wait_for_shard_reads();
  copy_unversioned(flat_view(local_shard_, info.offset_in_shard, info.numel_in_shard),
                   values.contiguous().reshape({info.numel_in_shard}).to(dtype_));
  local_shard_.storage()->bump_version();
}

}  // namespace fsdp
