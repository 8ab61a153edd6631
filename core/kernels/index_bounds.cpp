#include "core/kernels/index_bounds.h"

#include <fmt/format.h>

#include "core/error.h"

namespace fsdp {

IndexBounds index_select_bounds(std::int64_t size, std::int64_t dim) {
  return {.op = IndexOp::IndexSelect, .size = size, .detail = dim};
}

IndexBounds embedding_bounds(std::int64_t rows, std::int64_t row_length) {
  return {.op = IndexOp::Embedding, .size = rows, .detail = row_length};
}

namespace {

std::string value_message(const IndexBounds& b, std::int64_t v) {
  switch (b.op) {
    case IndexOp::IndexSelect:
      return fmt::format(
          "index_select(): index {} is out of bounds for dimension {} with size {} (valid indices "
          "are [0, {}))",
          v, b.detail, b.size, b.size);
    case IndexOp::Embedding:
      return fmt::format(
          "embedding: index {} is out of range for a table of {} rows (weight shape [{}, {}])", v,
          b.size, b.size, b.detail);
    case IndexOp::CrossEntropy:
    case IndexOp::NllLoss:
      return fmt::format(
          "{}: target {} is out of bounds (expected a class index in [0, {}) or ignore_index {})",
          b.op == IndexOp::NllLoss ? "nll_loss" : "cross_entropy", v, b.size, b.ignore);
  }
  return fmt::format("index {} is out of bounds (size {})", v, b.size);
}

}  // namespace

std::string index_error_message(const IndexBounds& b, std::int64_t v, std::int64_t position) {
  std::string m = value_message(b, v);
  const bool target = b.op == IndexOp::CrossEntropy || b.op == IndexOp::NllLoss;
  if (position >= 0)
    m += fmt::format(", at position {} of the {}", position, target ? "targets" : "indices");
  return m;
}

void check_index(const IndexBounds& b, std::int64_t v, std::int64_t position) {
  if (!b.valid(v)) throw IndexError(index_error_message(b, v, position));
}

}  // namespace fsdp
