#include "fsdp/load_sharded.h"

#include <fmt/format.h>

#include <algorithm>
#include <regex>
#include <tuple>
#include <unordered_set>

#include "core/autograd.h"
#include "core/error.h"
#include "core/fqn.h"
#include "fsdp/attribute_forwarding.h"
#include "fsdp/flat_param.h"
#include "fsdp/runtime.h"

namespace fsdp {

namespace {

// What one rank loads from one source, with the context every message names.
class ShardLoader {
 public:
  ShardLoader(FullyShardedDataParallel& root, const io::SafetensorsDir& src,
              const LoadShardedOptions& options)
      : root_(root), src_(src), options_(options) {
    const auto& pg = root.process_group();
    rank_ = pg ? pg->world_rank(root.rank()) : 0;
  }

  void load_flat_params() {
    root_.runtime().root_state();  // the units' FQNs are known once the root is initialised
    std::vector<ShardRead> reads;
    std::vector<FlatParamHandle*> handles;
    for (FullyShardedDataParallel* unit : root_.fsdp_units()) {
      FlatParamHandle* h = unit->handle();
      if (h == nullptr) continue;
      handles.push_back(h);
      const std::string prefix = unit->runtime().fqn();
      for (std::size_t i = 0; i < h->params().size(); ++i) load_param(*h, prefix, i, reads);
    }
    // In the files' order, announced to the kernel first: the units' order (module order) jumps
    // about the files (their tensors are sorted by name: layers.0, layers.1, layers.10, ...).
    std::sort(reads.begin(), reads.end(), [](const ShardRead& a, const ShardRead& b) {
      return std::tie(a.file, a.offset) < std::tie(b.file, b.offset);
    });
    for (const ShardRead& r : reads) src_.will_read(r.name, r.first, r.count);
    for (const ShardRead& r : reads) src_.read_range(r.name, r.first, r.count, r.dtype, r.dst);
    for (FlatParamHandle* h : handles) h->local_shard().storage()->bump_version();
  }

  // Ignored modules' parameters and persistent buffers: whole, on every rank.
  void load_unmanaged() {
    std::unordered_set<const TensorImpl*> managed;
    for (FullyShardedDataParallel* unit : root_.fsdp_units())
      if (FlatParamHandle* h = unit->handle()) {
        managed.insert(h->flat_param().impl());
        for (const auto& p : h->params()) managed.insert(p.orig.impl());
      }
    for (const auto& [name, p] : root_.named_parameters())
      if (!managed.count(p.impl())) load_whole(clean_tensor_name(name), p, "parameter");
    for (const auto& [name, b] : root_.named_persistent_buffers())
      load_whole(clean_tensor_name(name), b, "buffer");
  }

  std::vector<std::string> unexpected() const {
    std::vector<std::regex> ignore;
    for (const auto& pattern : options_.ignore_unexpected) ignore.emplace_back(pattern);
    std::vector<std::string> out;
    for (const std::string& name : src_.names()) {
      if (used_.count(name)) continue;
      bool ignored = false;
      for (const auto& re : ignore) ignored = ignored || std::regex_search(name, re);
      if (!ignored) out.push_back(name);
    }
    return out;
  }

 private:
  std::string name_in_file(const std::string& fqn) const {
    return options_.name_in_file ? options_.name_in_file(fqn) : fqn;
  }

  // The file's tensor for a model tensor known under `fqns` (a tied parameter has several),
  // checked against `shape`.
  std::string find(const std::vector<std::string>& fqns, const Shape& shape, const char* what) {
    for (const std::string& fqn : fqns) {
      const std::string name = name_in_file(fqn);
      if (!src_.contains(name)) continue;
      const auto& info = src_.info(name);
      FSDP_CHECK(info.shape == shape, ValueError,
                 "load_sharded_from: rank {}: {} '{}' has shape {} in the model, but tensor '{}' "
                 "in {} has shape {}",
                 rank_, what, fqns.front(), shape_str(shape), name, info.file,
                 shape_str(info.shape));
      for (const std::string& alias : fqns) used_.insert(name_in_file(alias));
      return name;
    }
    std::string tied;
    for (std::size_t k = 1; k < fqns.size(); ++k)
      tied += (k == 1 ? " nor under its tied names '" : "', '") + name_in_file(fqns[k]);
    if (!tied.empty()) tied += "'";
    throw ValueError(
        fmt::format("load_sharded_from: rank {}: {} '{}' is missing from {} (no "
                    "tensor '{}'{})",
                    rank_, what, fqns.front(), src_.path(), name_in_file(fqns.front()), tied));
  }

  // One read of a parameter's elements straight into a CPU shard, done after all are known.
  struct ShardRead {
    std::string name;
    std::int64_t first = 0, count = 0;
    DType dtype;
    void* dst = nullptr;
    std::string file;
    std::uint64_t offset = 0;  // of the first byte in the file
  };

  // Parameter i of `h`: its tensor found and checked; a CPU shard's read added to `reads`, any
  // other device's done now (through a staging tensor).
  void load_param(FlatParamHandle& h, const std::string& prefix, std::size_t i,
                  std::vector<ShardRead>& reads) {
    const FlatParamInfo& p = h.params()[i];
    std::vector<std::string> fqns{state_dict_key(prefix, p.fqn)};
    for (const auto& s : h.shared_params())
      if (s.primary == i) fqns.push_back(state_dict_key(prefix, s.fqn));
    const std::string name = find(fqns, p.shape, "parameter");
    const ShardParamInfo info = h.shard_info(i);
    if (info.numel_in_shard == 0) return;
    Tensor piece = h.shard_piece(i);
    if (piece.device().is_cpu()) {  // straight into the shard
      const io::SafetensorsTensorInfo& t = src_.info(name);
      reads.push_back({name, info.intra_param_start, info.numel_in_shard, h.dtype(),
                       piece.data_ptr(), t.file,
                       t.offset + std::uint64_t(info.intra_param_start) * dtype_size(t.dtype)});
      return;
    }
    Tensor staged = empty({info.numel_in_shard}, h.dtype());
    src_.read_range(name, info.intra_param_start, info.numel_in_shard, h.dtype(),
                    staged.data_ptr());
    h.load_shard_piece(i, staged);
  }

  void load_whole(const std::string& fqn, const Tensor& target, const char* what) {
    const std::string name = find({fqn}, target.shape(), what);
    Tensor value = empty(target.shape(), target.dtype());
    src_.read_range(name, 0, value.numel(), target.dtype(),
                    value.numel() ? value.data_ptr() : nullptr);
    autograd::NoGradGuard no_grad;
    Tensor dst = target;
    if (dst.is_meta()) {  // not materialised by FSDP (an ignored module): give it storage
      dst.set_data(empty(dst.shape(), TensorOptions(dst.dtype(), root_.meta_target())));
    }
    dst.copy_(value);
  }

  FullyShardedDataParallel& root_;
  const io::SafetensorsDir& src_;
  const LoadShardedOptions& options_;
  int rank_ = 0;
  std::unordered_set<std::string> used_;  // the file's names that were loaded
};

}  // namespace

std::vector<std::string> load_sharded_from(FullyShardedDataParallel& root,
                                           const io::SafetensorsDir& src,
                                           const LoadShardedOptions& options) {
  ShardLoader loader(root, src, options);
  loader.load_flat_params();
  loader.load_unmanaged();
  return loader.unexpected();
}

}  // namespace fsdp
