// Shared by every backend's tests: deterministic inputs, a scalar reference for each collective
// computed locally, and a matrix runner that returns failures as text (Boost.Test assertions are
// not thread-safe, so rank threads collect messages and the main thread reports them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/process_group.h"

namespace fsdp::comm::testing {

using Bytes = std::vector<std::uint8_t>;

// Element i of rank `rank`'s input: small integers (exact in every dtype, no overflow in sums over
// 8 ranks), with a rank- and salt-dependent pattern; bools are 0/1 with every combination.
double input_value(DType dtype, int rank, std::size_t i, int salt);
Bytes make_input(DType dtype, std::size_t count, int rank, int salt);
// Reference: op over ranks 0..world-1 of make_input(dtype, count, rank, salt).
Bytes expected_reduction(DType dtype, ReduceOp op, std::size_t count, int world, int salt);
// "" when equal, else a description of the first differing element.
std::string compare(const Bytes& actual, const Bytes& expected, DType dtype,
                    std::size_t offset_elems = 0);

struct MatrixOptions {
  std::vector<std::size_t> counts;  // per-rank counts for all_gather/reduce_scatter
  std::vector<DType> dtypes;
  std::size_t large_count = 0;  // 0: no large case; else float32+bfloat16, sum+avg only
  bool async = true;            // also check the async forms
};
// Counts 0, 1, odd, not divisible by the world size; every dtype.
MatrixOptions default_matrix(int world_size);

// Runs every collective × op × dtype × count of `m` on pg and checks each rank's result against
// the reference. Returns the failures ("" entries never).
std::vector<std::string> run_collective_matrix(ProcessGroup& pg, const MatrixOptions& m);

// What the mismatch check (comm/algorithms/signature_check.h) tells rank pg.rank() when rank 0
// calls all_reduce(count) with float32 and every other rank with int32: each rank names the first
// rank whose call differs from its own.
std::string expected_dtype_mismatch(const ProcessGroup& pg, std::size_t count);

}  // namespace fsdp::comm::testing
