#include "core/matmul_precision.h"

#include <fmt/format.h>

#include <atomic>

#include "core/error.h"

namespace fsdp {
namespace {

std::atomic<Float32MatmulPrecision> g_precision{Float32MatmulPrecision::Highest};

}  // namespace

void set_float32_matmul_precision(std::string_view precision) {
  if (precision == "highest")
    g_precision = Float32MatmulPrecision::Highest;
  else if (precision == "high")
    g_precision = Float32MatmulPrecision::High;
  else if (precision == "medium")
    g_precision = Float32MatmulPrecision::Medium;
  else
    throw ValueError(fmt::format(
        "set_float32_matmul_precision: '{}' is not one of highest, high, medium", precision));
}

std::string get_float32_matmul_precision() {
  switch (g_precision.load()) {
    case Float32MatmulPrecision::High:
      return "high";
    case Float32MatmulPrecision::Medium:
      return "medium";
    default:
      return "highest";
  }
}

Float32MatmulPrecision float32_matmul_precision() {
  return g_precision.load();
}

}  // namespace fsdp
