// What an index or class-target kernel accepts, checked by the kernel that reads the indices
// (index_select, embedding, cross_entropy, nll_loss) so that no op reads a device's indices on
// the host: the CPU's kernels throw at once; fake_cuda's run the CPU's on a stream's worker, so
// the error comes at the next synchronising call; CUDA's record the first bad value on the
// device and the runtime raises it at the next synchronisation (core/cuda/index_fault.h), as
// torch's device-side asserts are reported. Plain values: the .cu kernels take them too.
#pragma once

#include <cstdint>
#include <string>

#if defined(__CUDACC__)
#define FSDP_HOST_DEVICE __host__ __device__
#else
#define FSDP_HOST_DEVICE
#endif

namespace fsdp {

// Whose message a bad value gets (0 is "no fault" in a device's record).
enum class IndexOp : std::int32_t { IndexSelect = 1, Embedding, CrossEntropy, NllLoss };

struct IndexBounds {
  IndexOp op = IndexOp::IndexSelect;
  std::int64_t size = 0;    // valid: [0, size)
  std::int64_t detail = 0;  // for the message: index_select's dim, embedding's row length
  std::int64_t ignore = 0;  // losses: ignore_index, which passes (its position has no loss)
  bool ignores = false;     // losses: `ignore` passes

  FSDP_HOST_DEVICE bool valid(std::int64_t v) const {
    return (ignores && v == ignore) || (v >= 0 && v < size);
  }
  // The row a valid index reads (none counts from the end: torch refuses a negative index).
  FSDP_HOST_DEVICE std::int64_t row(std::int64_t v) const { return v; }
};

// The bounds of each op (the message's context included).
IndexBounds index_select_bounds(std::int64_t size, std::int64_t dim);
IndexBounds embedding_bounds(std::int64_t rows, std::int64_t row_length);
// (Inline: the GPU benchmarks, which do not link the core library, build it too.)
inline IndexBounds class_target_bounds(IndexOp op, std::int64_t classes,
                                       std::int64_t ignore_index) {
  return {.op = op, .size = classes, .ignore = ignore_index, .ignores = true};
}

// The op's message for a bad value `v` (the CPU's, on every device), with its position in the
// indices where the kernel knows it (the CPU's; a device records the value only).
std::string index_error_message(const IndexBounds& b, std::int64_t v, std::int64_t position = -1);
// IndexError(index_error_message) when `v`, at `position` of the indices, is not valid.
void check_index(const IndexBounds& b, std::int64_t v, std::int64_t position);

}  // namespace fsdp
