#include "fsdp/optim_state_dict.h"

#include <algorithm>
#include <set>
#include <unordered_map>

#include "core/autograd.h"
#include "core/error.h"
#include "fsdp/param_shards.h"
#include "fsdp/runtime.h"

namespace fsdp {

namespace {

// Which parameters of the model an optimizer parameter carries: a flat parameter carries all
// parameters of its unit (state sliced at each one's offset in the shard), an original
// parameter (use_orig_params) one (its state is the whole piece).
struct OptimParam {
  std::vector<const ParamShard*> params;
  bool flat = false;
};

std::unordered_map<const TensorImpl*, OptimParam> optim_params(
    const std::vector<ParamShard>& shards) {
  std::unordered_map<const TensorImpl*, OptimParam> out;
  for (const auto& p : shards) {
    auto& flat = out[p.handle->flat_param().impl()];
    flat.flat = true;
    flat.params.push_back(&p);
    const Tensor& orig = p.handle->params()[p.index].orig;
    if (orig.defined() && !orig.is_same(p.handle->flat_param())) out[orig.impl()].params = {&p};
  }
  return out;
}

// Parameters no unit manages (an ignored module's), as pieces that are the whole parameter on
// every rank (replicas beyond rank 0, as buffers): their optimizer state is saved and loaded
// whole, as upstream's.
std::vector<ParamShard> unmanaged_shards(FullyShardedDataParallel& root) {
  std::vector<ParamShard> out;
  for (const auto& [fqn, t] : unmanaged_params(root)) {
    ParamShard p;
    p.fqn = fqn;
    p.shape = t.shape();
    p.info = {.in_shard = true,
              .offset_in_shard = 0,
              .numel_in_shard = t.numel(),
              .intra_param_start = 0,
              .intra_param_end = t.numel() - 1};
    p.replica = root.rank() != 0;
    out.push_back(std::move(p));
  }
  return out;
}

// Every parameter the optimizer may hold: the units' (as their flat parameters, and with
// use_orig_params as the originals) and the unmanaged ones (as themselves).
std::unordered_map<const TensorImpl*, OptimParam> optim_params(
    FullyShardedDataParallel& root, const std::vector<ParamShard>& shards,
    const std::vector<ParamShard>& unmanaged) {
  auto out = optim_params(shards);
  const auto tensors = unmanaged_params(root);
  for (std::size_t k = 0; k < unmanaged.size(); ++k)
    out[tensors[k].second.impl()].params = {&unmanaged[k]};
  return out;
}

// The part of state tensor `t` (of an optimizer parameter) that belongs to parameter `p`.
Tensor state_piece(const Tensor& t, const OptimParam& op, const ParamShard& p) {
  if (op.flat) return t.narrow(0, p.info.offset_in_shard, p.info.numel_in_shard);
  return t.reshape({-1});
}

// Every rank's state names over `group`. A rank holding no element of a parameter has no
// gradient for it and its optimizer no state (upstream's), so one rank may know no name at all;
// every rank must still take part in each name's collectives.
std::set<std::string> union_over(const std::set<std::string>& mine, comm::ProcessGroup& group) {
  std::string joined;
  for (const auto& name : mine) joined += name + '\n';
  const std::int64_t length = static_cast<std::int64_t>(joined.size());
  std::vector<std::int64_t> lengths(std::size_t(group.size()));
  group.all_gather(&length, lengths.data(), 1, DType::Int64);
  const std::int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  std::set<std::string> out;
  if (longest == 0) return out;
  joined.resize(std::size_t(longest), '\n');
  std::string all(std::size_t(longest * group.size()), '\n');
  group.all_gather(joined.data(), all.data(), std::size_t(longest), DType::UInt8);
  std::size_t start = 0;
  for (std::size_t end = all.find('\n'); end != std::string::npos; end = all.find('\n', start)) {
    if (end > start) out.insert(all.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

const OptimParam& lookup(const std::unordered_map<const TensorImpl*, OptimParam>& map,
                         const Tensor& param, std::size_t group, std::size_t index) {
  auto it = map.find(param.impl());
  FSDP_CHECK(it != map.end(), ValueError,
             "optimizer state dict: parameter {} of group {} (shape {}) is not a parameter of "
             "this FSDP model",
             index, group, shape_str(param.shape()));
  return it->second;
}

}  // namespace

std::string optim_state_key(const std::string& fqn, const std::string& name) {
  return "state." + fqn + "." + name;
}

ShardedOptimStateDict sharded_optim_state_dict(FullyShardedDataParallel& root,
                                               const optim::Optimizer& optimizer) {
  autograd::NoGradGuard no_grad;
  const auto shards = param_shards(root);
  const auto unmanaged = unmanaged_shards(root);
  const auto map = optim_params(root, shards, unmanaged);
  const optim::OptimizerStateDict sd = optimizer.state_dict();
  ShardedOptimStateDict out;
  out.param_groups = sd.param_groups;
  for (std::size_t g = 0; g < optimizer.num_param_groups(); ++g) {
    std::vector<std::string> fqns;
    const auto& params = optimizer.params(g);
    for (std::size_t i = 0; i < params.size(); ++i) {
      const OptimParam& op = lookup(map, params[i], g, i);
      for (const ParamShard* p : op.params) fqns.push_back(p->fqn);
      auto it = sd.state.find(sd.group_params[g][i]);
      if (it == sd.state.end()) continue;
      for (const auto& [name, t] : it->second) {
        out.state_names.insert(name);
        for (const ParamShard* p : op.params) {
          if (name == "step") {
            out.pieces.push_back(
                {optim_state_key(p->fqn, name),
                 {},
                 0,
                 t.reshape({1}).clone(),
                 p->replica || p->info.intra_param_start != 0 || !p->info.in_shard});
            continue;
          }
          out.pieces.push_back({optim_state_key(p->fqn, name), p->shape, p->info.intra_param_start,
                                state_piece(t, op, *p).clone(), p->replica});
        }
      }
    }
    out.group_fqns.push_back(std::move(fqns));
  }
  if (root.process_group() && root.process_group()->size() > 1)
    out.state_names = union_over(out.state_names, *root.process_group());
  return out;
}

void load_sharded_optim_state_dict(FullyShardedDataParallel& root, optim::Optimizer& optimizer,
                                   const PieceSet& pieces, const ShardedOptimStateDict& meta) {
  const auto shards = param_shards(root);
  const auto unmanaged = unmanaged_shards(root);
  const auto map = optim_params(root, shards, unmanaged);
  FSDP_CHECK(meta.param_groups.size() == optimizer.num_param_groups(), ValueError,
             "load_sharded_optim_state_dict: the state has {} parameter groups, the optimizer {}",
             meta.param_groups.size(), optimizer.num_param_groups());
  optim::OptimizerStateDict sd;
  sd.param_groups = meta.param_groups;
  std::int64_t index = 0;
  autograd::NoGradGuard no_grad;
  for (std::size_t g = 0; g < optimizer.num_param_groups(); ++g) {
    std::vector<std::int64_t> ids;
    const auto& params = optimizer.params(g);
    for (std::size_t i = 0; i < params.size(); ++i, ++index) {
      ids.push_back(index);
      const OptimParam& op = lookup(map, params[i], g, i);
      std::map<std::string, Tensor> state;
      for (const auto& name : meta.state_names) {
        std::size_t found = 0;
        for (const ParamShard* p : op.params)
          found += pieces.contains(optim_state_key(p->fqn, name));
        if (found == 0) continue;
        FSDP_CHECK(found == op.params.size(), ValueError,
                   "load_sharded_optim_state_dict: '{}' is saved for some parameters of FSDP "
                   "unit '{}' but not for '{}'",
                   name, op.params.front()->unit ? op.params.front()->unit->runtime().fqn() : "",
                   [&] {
                     for (const ParamShard* p : op.params)
                       if (!pieces.contains(optim_state_key(p->fqn, name))) return p->fqn;
                     return std::string();
                   }());
        if (name == "step") {
          Tensor step = empty(
              {1},
              TensorOptions(DType::Float32, kCPU));  // host by design: torch keeps step on the CPU
          pieces.read(optim_state_key(op.params.front()->fqn, name), 0, step);
          state[name] = step.reshape({});
          continue;
        }
        Tensor t = zeros(params[i].shape(), TensorOptions(params[i].dtype(), params[i].device()));
        for (const ParamShard* p : op.params) {
          const std::string key = optim_state_key(p->fqn, name);
          FSDP_CHECK(pieces.global_shape(key) == p->shape, ValueError,
                     "load_sharded_optim_state_dict: '{}' has shape {} in the state dict but "
                     "the parameter {}",
                     key, shape_str(pieces.global_shape(key)), shape_str(p->shape));
          if (p->info.in_shard) pieces.read(key, p->info.intra_param_start, state_piece(t, op, *p));
        }
        state[name] = t;
      }
      if (!state.empty()) sd.state[index] = std::move(state);
    }
    sd.group_params.push_back(std::move(ids));
  }
  optimizer.load_state_dict(sd);
}

std::map<std::string, std::map<std::string, Tensor>> full_optim_state_dict(
    FullyShardedDataParallel& root, const optim::Optimizer& optimizer, bool rank0_only) {
  autograd::NoGradGuard no_grad;
  const ShardedOptimStateDict sharded = sharded_optim_state_dict(root, optimizer);
  const PieceSet local(sharded.pieces);
  const bool keep = !rank0_only || root.rank() == 0;
  std::map<std::string, std::map<std::string, Tensor>> out;
  // Unit by unit and name by name (the same order on every rank): this rank's pieces placed in
  // a flat shard, all-gathered over the unit's shard group, cut per parameter.
  const auto shards = param_shards(root);
  for (std::size_t begin = 0; begin < shards.size();) {
    std::size_t end = begin;
    while (end < shards.size() && shards[end].handle == shards[begin].handle) ++end;
    FlatParamHandle& h = *shards[begin].handle;
    const FlatParamLayout& layout = h.layout();
    // Which of the unit's parameters have state on some rank of the shard group (a parameter
    // without a gradient, such as a frozen one, has none, and gets no entry: upstream's).
    const auto has_state = [&](const std::string& name) {
      std::vector<float> flags(end - begin, 0.0f);
      for (std::size_t k = begin; k < end; ++k)
        flags[k - begin] = local.contains(optim_state_key(shards[k].fqn, name)) ? 1.0f : 0.0f;
      if (h.sharded())
        shards[begin].unit->process_group()->all_reduce(flags.data(), flags.size(), DType::Float32,
                                                        comm::ReduceOp::Max);
      return flags;
    };
    for (const auto& name : sharded.state_names) {
      const std::vector<float> present = has_state(name);
      if (name == "step") {
        // A rank whose pieces are empty may hold no step: the group's largest is the step.
        const TensorOptions host(DType::Float32, kCPU);  // host by design: torch's step
        std::vector<float> steps(end - begin, 0.0f);
        for (std::size_t k = begin; k < end; ++k) {
          const std::string key = optim_state_key(shards[k].fqn, name);
          if (!local.contains(key)) continue;
          Tensor step = empty({1}, host);
          local.read(key, 0, step);
          steps[k - begin] = static_cast<float>(step.item());
        }
        if (h.sharded())
          shards[begin].unit->process_group()->all_reduce(steps.data(), steps.size(),
                                                          DType::Float32, comm::ReduceOp::Max);
        if (!keep) continue;
        for (std::size_t k = begin; k < end; ++k)
          if (present[k - begin] > 0) out[shards[k].fqn][name] = full({}, steps[k - begin], host);
        continue;
      }
      Tensor shard = zeros({layout.shard_numel}, TensorOptions(h.dtype()));
      for (std::size_t k = begin; k < end; ++k) {
        const ParamShard& p = shards[k];
        const std::string key = optim_state_key(p.fqn, name);
        if (p.info.in_shard && local.contains(key))
          local.read(key, p.info.intra_param_start,
                     shard.narrow(0, p.info.offset_in_shard, p.info.numel_in_shard));
      }
      Tensor gathered = shard;
      if (h.sharded()) {
        gathered = empty({layout.padded_numel}, TensorOptions(h.dtype(), shard.device()));
        shards[begin].unit->process_group()->all_gather(
            shard.data_ptr(), gathered.data_ptr(), layout.shard_numel, h.dtype(), shard.device());
      }
      if (!keep) continue;
      for (std::size_t k = begin; k < end; ++k) {
        const ParamShard& p = shards[k];
        if (present[k - begin] == 0) continue;
        out[p.fqn][name] = gathered.narrow(0, layout.offsets[p.index], layout.numels[p.index])
                               .reshape(p.shape)
                               .clone();
      }
    }
    begin = end;
  }
  // Parameters no unit manages: each rank's own state, whole.
  if (!keep) return out;
  for (const auto& [fqn, t] : unmanaged_params(root)) {
    for (const auto& name : sharded.state_names) {
      const std::string key = optim_state_key(fqn, name);
      if (!local.contains(key)) continue;
      const bool step = name == "step";
      const TensorOptions host(DType::Float32, kCPU);  // host by design: torch's step
      Tensor value =
          step ? empty({1}, host) : empty({t.numel()}, TensorOptions(t.dtype(), t.device()));
      local.read(key, 0, value);
      out[fqn][name] = step ? value.reshape({}) : value.reshape(t.shape());
    }
  }
  return out;
}

}  // namespace fsdp
