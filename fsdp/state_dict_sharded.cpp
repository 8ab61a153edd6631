#include "fsdp/state_dict_sharded.h"

#include <algorithm>
#include <set>

#include "core/autograd.h"
#include "core/error.h"
#include "core/fqn.h"
#include "fsdp/attribute_forwarding.h"
#include "fsdp/full_state_dict.h"
#include "fsdp/param_shards.h"
#include "fsdp/runtime.h"

namespace fsdp {

ShardedStateDict sharded_state_dict(FullyShardedDataParallel& root, bool copy) {
  autograd::NoGradGuard no_grad;
  ShardedStateDict out;
  // Every parameter on every rank, as upstream's ShardedTensors: a rank without elements of
  // one holds an empty piece (its state dict still names every key and global shape).
  for (const auto& p : param_shards(root)) {
    Tensor piece = p.handle->shard_piece(p.index);
    out.push_back(
        {p.fqn, p.shape, p.info.intra_param_start, copy ? piece.clone() : piece, p.replica});
  }
  // Parameters no unit manages are whole on every rank, as buffers.
  for (const auto& [fqn, t] : unmanaged_params(root))
    out.push_back({fqn, t.shape(), 0, t.contiguous().reshape({-1}).clone(), root.rank() != 0});
  for (const auto& [name, b] : root.named_persistent_buffers())
    if (b.defined())
      out.push_back(
          {clean_tensor_name(name), b.shape(), 0,
           root.runtime().root_state().buffer_for_state_dict(b).contiguous().reshape({-1}).clone(),
           root.rank() != 0});
  return out;
}

PieceSet::PieceSet(const ShardedStateDict& pieces) {
  for (const auto& p : pieces) add(p);
}

void PieceSet::declare(const std::string& fqn, const Shape& shape) {
  auto [it, fresh] = by_fqn_.try_emplace(fqn);
  if (fresh) it->second.shape = shape;
  FSDP_CHECK(it->second.shape == shape, ValueError,
             "sharded state dict: pieces of '{}' disagree on its shape ({} vs {})", fqn,
             shape_str(it->second.shape), shape_str(shape));
}

void PieceSet::add(TensorPiece piece) {
  const std::int64_t total = shape_numel(piece.global_shape);
  FSDP_CHECK(piece.local.dim() == 1, ValueError,
             "sharded state dict: piece of '{}' is not 1-D ({})", piece.fqn,
             shape_str(piece.local.shape()));
  FSDP_CHECK(piece.offset >= 0 && piece.offset + piece.local.numel() <= total, ValueError,
             "sharded state dict: piece of '{}' [{}, {}) lies outside its {} elements (shape {})",
             piece.fqn, piece.offset, piece.offset + piece.local.numel(), total,
             shape_str(piece.global_shape));
  declare(piece.fqn, piece.global_shape);
  auto& list = by_fqn_[piece.fqn].pieces;
  auto at = std::upper_bound(list.begin(), list.end(), piece.offset,
                             [](std::int64_t o, const TensorPiece& p) { return o < p.offset; });
  list.insert(at, std::move(piece));
}

const Shape& PieceSet::global_shape(const std::string& fqn) const {
  auto it = by_fqn_.find(fqn);
  FSDP_CHECK(it != by_fqn_.end(), KeyError, "sharded state dict: no pieces of '{}'", fqn);
  return it->second.shape;
}

std::vector<std::string> PieceSet::keys() const {
  std::vector<std::string> k;
  for (const auto& [name, entry] : by_fqn_) k.push_back(name);
  return k;
}

void PieceSet::read(const std::string& fqn, std::int64_t begin, Tensor dst) const {
  auto it = by_fqn_.find(fqn);
  FSDP_CHECK(it != by_fqn_.end(), KeyError, "sharded state dict: no pieces of '{}'", fqn);
  autograd::NoGradGuard no_grad;
  const std::int64_t end = begin + dst.numel();
  std::int64_t pos = begin;
  const auto& list = it->second.pieces;
  while (pos < end) {
    // The piece reaching furthest among those that start at or before pos.
    const TensorPiece* best = nullptr;
    for (const auto& p : list) {
      if (p.offset > pos) break;
      if (p.offset + p.local.numel() > pos &&
          (best == nullptr || p.offset + p.local.numel() > best->offset + best->local.numel()))
        best = &p;
    }
    FSDP_CHECK(best != nullptr, ValueError,
               "sharded state dict: element {} of '{}' (shape {}) is in no saved piece", pos, fqn,
               shape_str(it->second.shape));
    const std::int64_t n = std::min(end, best->offset + best->local.numel()) - pos;
    dst.narrow(0, pos - begin, n).copy_(best->local.narrow(0, pos - best->offset, n));
    pos += n;
  }
}

namespace {

// The whole of `fqn` from the saved pieces into `dst` (a parameter or buffer of its shape).
void read_whole(const PieceSet& saved, const std::string& fqn, const Tensor& dst) {
  Tensor flat = empty({dst.numel()}, TensorOptions(dst.dtype()));
  saved.read(fqn, 0, flat);
  Tensor out = dst;
  out.copy_(flat.reshape(dst.shape()));
}

}  // namespace

void load_sharded_state_dict(FullyShardedDataParallel& root, const PieceSet& saved) {
  std::set<std::string> used;
  for (const auto& p : param_shards(root)) {
    FSDP_CHECK(saved.contains(p.fqn), KeyError,
               "load_sharded_state_dict: missing key '{}' (a parameter of FSDP unit '{}')", p.fqn,
               p.unit->runtime().fqn());
    FSDP_CHECK(saved.global_shape(p.fqn) == p.shape, ValueError,
               "load_sharded_state_dict: '{}' has shape {} in the state dict but {} in the model",
               p.fqn, shape_str(saved.global_shape(p.fqn)), shape_str(p.shape));
    used.insert(p.fqn);
    if (!p.info.in_shard) continue;
    Tensor values = empty({p.info.numel_in_shard}, TensorOptions(p.handle->dtype()));
    saved.read(p.fqn, p.info.intra_param_start, values);
    p.handle->load_shard_piece(p.index, values);
  }
  // A tied parameter saved under another of its names too (state_dict() writes each) loads once.
  for (const auto& [alias, first] : tied_aliases(root))
    if (saved.contains(alias)) used.insert(alias);
  autograd::NoGradGuard no_grad;
  std::unordered_set<const TensorImpl*> loaded;  // a tied parameter's later FQNs: optional
  for (const auto& [fqn, t] : unmanaged_params(root, /*each_fqn=*/true)) {
    if (!saved.contains(fqn) && loaded.count(t.impl())) continue;
    loaded.insert(t.impl());
    FSDP_CHECK(saved.contains(fqn), KeyError,
               "load_sharded_state_dict: missing key '{}' (a parameter no FSDP unit manages: an "
               "ignored module's)",
               fqn);
    FSDP_CHECK(saved.global_shape(fqn) == t.shape(), ValueError,
               "load_sharded_state_dict: '{}' has shape {} in the state dict but {} in the model",
               fqn, shape_str(saved.global_shape(fqn)), shape_str(t.shape()));
    used.insert(fqn);
    read_whole(saved, fqn, t);
  }
  for (const auto& [fqn, b] : persistent_buffers(root)) {
    if (!saved.contains(fqn)) continue;
    FSDP_CHECK(saved.global_shape(fqn) == b.shape(), ValueError,
               "load_sharded_state_dict: buffer '{}' has shape {} in the state dict but {} in "
               "the model",
               fqn, shape_str(saved.global_shape(fqn)), shape_str(b.shape()));
    used.insert(fqn);
    read_whole(saved, fqn, b);
  }
  for (const auto& key : saved.keys())
    FSDP_CHECK(used.count(key), KeyError,
               "load_sharded_state_dict: unexpected key '{}' (no parameter or buffer of the "
               "model has this FQN)",
               key);
}

}  // namespace fsdp
