// The layout of one FlatParameter: where each original parameter lies in the flat buffer, the
// alignment padding (use_orig_params), the right padding to a multiple of the shard group size,
// and which part of each parameter each rank's shard holds. One function computes it; the runtime
// allocates by it and fsdp-plan predicts by it, so a plan's per-rank numbers are what runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fsdp {

// Upstream's _FLAT_PARAM_PADDING_VALUE: what alignment padding holds in the unsharded buffer.
inline constexpr double kFlatParamPaddingValue = 42.0;

// The part of one original parameter inside one rank's shard (upstream's _ShardParamInfo).
struct ShardParamInfo {
  bool in_shard = false;
  std::int64_t offset_in_shard = 0;  // where the piece starts in the shard
  std::int64_t numel_in_shard = 0;
  std::int64_t intra_param_start = 0;  // first element of the parameter in this shard
  std::int64_t intra_param_end = -1;   // last element (inclusive), -1 when not in the shard
};

struct FlatParamLayout {
  std::vector<std::int64_t> offsets;  // per parameter, into the unsharded flat buffer
  std::vector<std::int64_t> numels;   // per parameter
  // Alignment padding segments [start, start + numel) before parameters and at the end.
  struct Padding {
    std::int64_t start = 0;
    std::int64_t numel = 0;
  };
  std::vector<Padding> paddings;
  std::int64_t unpadded_numel = 0;  // parameters + alignment padding (_unpadded_unsharded_size)
  std::int64_t padded_numel = 0;    // group_size * shard_numel (sharded), else unpadded_numel
  std::int64_t shard_numel = 0;     // ceil(unpadded / group_size) (sharded), else unpadded_numel
  int group_size = 1;
  bool sharded = false;

  std::int64_t params_numel() const;  // the parameters' own elements
  // Which part of parameter `param` rank `rank`'s shard holds.
  ShardParamInfo shard_info(std::size_t param, int rank) const;
  // The range [begin, end) of the unsharded flat buffer that rank `rank`'s shard covers
  // (end - begin < shard_numel for the last ranks: zero right padding fills the rest).
  std::int64_t shard_begin(int rank) const;
  std::int64_t shard_end(int rank) const;
};

// Lays out parameters of `numels` elements of `itemsize` bytes, in order. `align` (upstream:
// use_orig_params) starts every parameter at a multiple of 16 bytes and pads the total to a
// multiple of `group_size`; `sharded` cuts the buffer into group_size equal chunks as
// torch.chunk does, padding the last ones with zeros. Throws fsdp::ValueError on overflow.
FlatParamLayout flat_param_layout(const std::vector<std::int64_t>& numels, std::size_t itemsize,
                                  bool align, int group_size, bool sharded);

}  // namespace fsdp
