// Reduction operators and their exact meaning, identical on every backend.
//
//   float32/float64: accumulate in the same type, ranks combined in rank order 0..n-1
//   float16/bfloat16: accumulate in float32 over all ranks, rounded to 16 bits once at the end
//   integers: two's-complement wrap-around on overflow (as NCCL and torch); AVG = SUM / size
//             truncated toward zero
//   bool:  SUM and MAX = logical or, MIN = logical and; AVG is rejected (as torch's NCCL group)
//   uint8: an integer (SUM wraps modulo 256), not a bool
//   AVG:   SUM / size computed in the accumulation type (every backend, native AVG or not)
//   MAX/MIN of floats propagate NaN (torch.maximum semantics).
#pragma once

#include <string_view>

namespace fsdp::comm {

enum class ReduceOp { Sum, Avg, Max, Min };

constexpr std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Avg:
      return "avg";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Min:
      return "min";
  }
  return "?";
}

}  // namespace fsdp::comm
