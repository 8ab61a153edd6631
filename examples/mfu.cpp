#include "examples/mfu.h"

#include <fmt/format.h>

namespace fsdp::examples {

std::optional<PeakFlops> bf16_peak_by_name(std::string_view name) {
  auto has = [&](std::string_view part) { return name.find(part) != std::string_view::npos; };
  if (has("NVL")) return std::nullopt;  // H100 NVL, H200 NVL: their own, lower peaks
  if (has("H100") && (has("HBM3") || has("SXM")))
    return PeakFlops{989.4, "H100 SXM bf16 dense, NVIDIA datasheet"};
  if (has("H100") && has("PCIe")) return PeakFlops{756, "H100 PCIe bf16 dense, NVIDIA datasheet"};
  if (has("H200")) return PeakFlops{989.4, "H200 bf16 dense, NVIDIA datasheet"};
  if (has("A100")) return PeakFlops{312, "A100 bf16 dense, NVIDIA datasheet"};
  return std::nullopt;
}

std::string mfu_line(Device device, const std::string& name, double peak_tflops,
                     std::optional<DType> compute, double flops_per_token,
                     double tokens_per_s_per_rank) {
  std::optional<PeakFlops> peak;
  if (peak_tflops > 0) {
    peak = PeakFlops{peak_tflops, "--peak-tflops"};
  } else if (device.is_cuda()) {
    peak = bf16_peak_by_name(name);
    if (!peak)
      return fmt::format(
          "MFU: no bf16 peak known for '{}' (known: H100 SXM/PCIe, H200, A100); give "
          "--peak-tflops",
          name);
    peak->source = fmt::format("{}: {}", name, peak->source);
    // The target is about bf16 (issue 25); a float32 run is measured against the same peak.
    if (!compute) peak->source += "; this run computes in float32";
  } else {
    return "";
  }
  if (flops_per_token <= 0) return "MFU: this model gives no FLOP count per token";
  const double achieved = flops_per_token * tokens_per_s_per_rank;
  return fmt::format("MFU {:.2f}% of {:g} TFLOPS ({})", 100.0 * achieved / (peak->tflops * 1e12),
                     peak->tflops, peak->source);
}

}  // namespace fsdp::examples
