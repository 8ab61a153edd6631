// Model FLOPs utilisation as llm.c reports it (issue 25): the model's FLOP per token (6N +
// 6*L*D*T for a GPT: the forward and backward products of N parameters, and attention's scores
// and mixing) times the tokens/s of one rank, over one GPU's peak. The peak is the bf16 dense
// one from NVIDIA's datasheets (the target's precision), or --peak-tflops.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/device.h"
#include "core/dtype.h"

namespace fsdp::examples {

struct PeakFlops {
  double tflops = 0;
  std::string source;  // where the number came from, in the MFU line
};

// The bf16 dense peak of a GPU by its name: H100 SXM ("H100" with "HBM3" or "SXM") 989.4, H100
// PCIe 756, H200 989.4 (NVL variants excluded: they are lower), A100 312; nullopt otherwise.
std::optional<PeakFlops> bf16_peak_by_name(std::string_view name);

// The job's summary line about MFU, or "" when none is due: with `peak_tflops` > 0 (the
// command line's) always; on a CUDA device from its name's bf16 peak (`name`), else a note
// that no peak is known. `compute` is the run's compute dtype (absent: float32). `flops_per_token`
// 0: the model gives none (a note).
std::string mfu_line(Device device, const std::string& name, double peak_tflops,
                     std::optional<DType> compute, double flops_per_token,
                     double tokens_per_s_per_rank);

}  // namespace fsdp::examples
