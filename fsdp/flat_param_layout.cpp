#include "fsdp/flat_param_layout.h"

#include <algorithm>

#include "core/error.h"

namespace fsdp {

namespace {

std::int64_t checked_add(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t r = 0;
  FSDP_CHECK(!__builtin_add_overflow(a, b, &r), ValueError,
             "flat parameter layout: {} overflows int64 ({} + {})", what, a, b);
  return r;
}

std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t r = 0;
  FSDP_CHECK(!__builtin_mul_overflow(a, b, &r), ValueError,
             "flat parameter layout: {} overflows int64 ({} * {})", what, a, b);
  return r;
}

}  // namespace

FlatParamLayout flat_param_layout(const std::vector<std::int64_t>& numels, std::size_t itemsize,
                                  bool align, int group_size, bool sharded) {
  FSDP_CHECK(group_size >= 1, ValueError, "flat parameter layout: group size {} must be >= 1",
             group_size);
  FSDP_CHECK(itemsize >= 1, ValueError, "flat parameter layout: item size must be >= 1");
  FlatParamLayout l;
  l.group_size = group_size;
  l.sharded = sharded;
  // Upstream's _get_aligned_numel: 16 bytes, "from TorchInductor".
  const std::int64_t aligned_numel = align ? static_cast<std::int64_t>(16 / itemsize) : 0;
  std::int64_t total = 0;
  for (auto n : numels) {
    FSDP_CHECK(n >= 0, ValueError, "flat parameter layout: negative numel {}", n);
    if (aligned_numel > 1 && total % aligned_numel != 0) {
      const std::int64_t pad = aligned_numel - total % aligned_numel;
      l.paddings.push_back({total, pad});
      total += pad;
    }
    l.offsets.push_back(total);
    l.numels.push_back(n);
    total = checked_add(total, n, "the flat parameter's numel");
  }
  if (aligned_numel > 0 && total % group_size != 0) {
    const std::int64_t pad = group_size - total % group_size;
    l.paddings.push_back({total, pad});
    total = checked_add(total, pad, "the flat parameter's numel");
  }
  l.unpadded_numel = total;
  if (sharded) {
    l.shard_numel = total / group_size + (total % group_size != 0 ? 1 : 0);
    l.padded_numel = checked_mul(l.shard_numel, group_size, "the padded unsharded numel");
  } else {
    l.shard_numel = total;
    l.padded_numel = total;
  }
  return l;
}

std::int64_t FlatParamLayout::params_numel() const {
  std::int64_t s = 0;
  for (auto n : numels) s += n;
  return s;
}

std::int64_t FlatParamLayout::shard_begin(int rank) const {
  if (!sharded) return 0;
  return std::min(unpadded_numel, shard_numel * rank);
}

std::int64_t FlatParamLayout::shard_end(int rank) const {
  if (!sharded) return unpadded_numel;
  return std::min(unpadded_numel, shard_numel * (rank + 1));
}

ShardParamInfo FlatParamLayout::shard_info(std::size_t param, int rank) const {
  ShardParamInfo info;
  const std::int64_t begin = shard_begin(rank), end = shard_end(rank);
  const std::int64_t p0 = offsets.at(param), p1 = p0 + numels.at(param);
  const std::int64_t lo = std::max(begin, p0), hi = std::min(end, p1);
  if (lo >= hi) return info;
  info.in_shard = true;
  info.offset_in_shard = lo - begin;
  info.numel_in_shard = hi - lo;
  info.intra_param_start = lo - p0;
  info.intra_param_end = hi - p0 - 1;
  return info;
}

}  // namespace fsdp
