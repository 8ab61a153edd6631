// One collective call described as a value: what every backend receives, what errors describe,
// and what ranks compare to detect mismatched calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "comm/reduce_op.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/stream.h"

namespace fsdp::comm {

enum class CollectiveKind : std::uint8_t {
  AllGather,
  ReduceScatter,
  AllReduce,
  Broadcast,
  Barrier
};

constexpr std::string_view collective_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::AllGather:
      return "all_gather";
    case CollectiveKind::ReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::AllReduce:
      return "all_reduce";
    case CollectiveKind::Broadcast:
      return "broadcast";
    case CollectiveKind::Barrier:
      return "barrier";
  }
  return "?";
}

struct Collective {
  CollectiveKind kind = CollectiveKind::Barrier;
  const void* input = nullptr;  // all_gather, reduce_scatter
  void* output = nullptr;       // every collective but barrier (all_reduce, broadcast: in place)
  std::size_t count = 0;        // per-rank element count (all_gather input, reduce_scatter output)
  DType dtype = DType::Float32;
  ReduceOp op = ReduceOp::Sum;  // reduce_scatter, all_reduce
  int root = 0;                 // broadcast
  Device device = kCPU;
  // Accelerator buffers: the stream the collective is queued on, in order with the work there
  // (as NCCL's). The typed calls of ProcessGroup take the current stream of `device`.
  Stream stream;

  std::size_t bytes() const { return count * dtype_size(dtype); }
  bool has_op() const {
    return kind == CollectiveKind::ReduceScatter || kind == CollectiveKind::AllReduce;
  }
};

// A collective on a group of one rank, on cpu buffers: all_gather and reduce_scatter copy input to
// output (any reduction over one rank is the identity), the others leave the data as it is.
void run_single_rank(const Collective& c);

// Elements [begin, end) of `count` that rank r of `parts` owns: near-equal shares, the first
// count % parts ranks one element more (all_reduce's reduce-scatter phase on every backend).
std::pair<std::size_t, std::size_t> share_of(std::size_t count, int parts, int r);

// "reduce_scatter(count=10, dtype=float32, op=sum)": used in every error message.
std::string describe(const Collective& c);

// The fields that must agree between ranks (pointers excluded), packed for cheap comparison.
struct CollectiveSignature {
  std::uint64_t count = 0;
  std::uint8_t kind = 0;
  std::uint8_t dtype = 0;
  std::uint8_t op = 0;
  std::int32_t root = 0;

  static CollectiveSignature of(const Collective& c);
  friend bool operator==(const CollectiveSignature&, const CollectiveSignature&) = default;
  std::string str() const;
};

}  // namespace fsdp::comm
