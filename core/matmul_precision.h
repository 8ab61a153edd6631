// torch.set_float32_matmul_precision: how float32 matrix products may compute on a device with
// faster reduced-precision maths. "highest" (the default): float32 throughout; "high" and
// "medium": TensorFloat-32 (inputs rounded to a 10-bit mantissa, float32 sums) on CUDA, as torch
// takes TF32 for both. The CPU's products are float32 whatever the setting. Process-wide.
#pragma once

#include <string>
#include <string_view>

namespace fsdp {

enum class Float32MatmulPrecision { Highest, High, Medium };

// "highest", "high" or "medium"; anything else a ValueError naming the value (torch's choices).
void set_float32_matmul_precision(std::string_view precision);
std::string get_float32_matmul_precision();
Float32MatmulPrecision float32_matmul_precision();

}  // namespace fsdp
