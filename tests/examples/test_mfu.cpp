// examples/mfu.h: the bf16 peaks by GPU name (NVIDIA's datasheets, as the names CUDA reports
// them) and the MFU line's cases on a CUDA device, which the CPU-only tests cannot reach through
// train_gpt (test_train_gpt_tokens.py checks the arithmetic with --peak-tflops).
#define BOOST_TEST_MODULE examples_mfu
#include <boost/test/unit_test.hpp>
#include <string>

#include "examples/mfu.h"

using namespace fsdp;
using examples::bf16_peak_by_name;
using examples::mfu_line;

namespace {
const Device kCuda(DeviceType::CUDA, 0);
}

BOOST_AUTO_TEST_CASE(peaks_by_the_names_cuda_reports) {
  BOOST_TEST(bf16_peak_by_name("NVIDIA H100 80GB HBM3")->tflops == 989.4);  // SXM
  BOOST_TEST(bf16_peak_by_name("NVIDIA H100 SXM5 80GB")->tflops == 989.4);
  BOOST_TEST(bf16_peak_by_name("NVIDIA H100 PCIe")->tflops == 756);
  BOOST_TEST(bf16_peak_by_name("NVIDIA H200")->tflops == 989.4);
  BOOST_TEST(bf16_peak_by_name("NVIDIA A100-SXM4-80GB")->tflops == 312);
  BOOST_TEST(bf16_peak_by_name("NVIDIA A100 80GB PCIe")->tflops == 312);
  BOOST_TEST(bf16_peak_by_name("NVIDIA H100 PCIe")->source ==
             "H100 PCIe bf16 dense, NVIDIA datasheet");
  // Not known: NVL variants (lower peaks), other GPUs, the emulated device.
  BOOST_TEST(!bf16_peak_by_name("NVIDIA H100 NVL"));
  BOOST_TEST(!bf16_peak_by_name("NVIDIA H200 NVL"));
  BOOST_TEST(!bf16_peak_by_name("NVIDIA GeForce RTX 4090"));
  BOOST_TEST(!bf16_peak_by_name("Emulated CUDA device (tests/gpu/emulation)"));
}

BOOST_AUTO_TEST_CASE(the_line_on_a_cuda_device) {
  // 1e6 FLOP per token at 494.7e6 tokens/s is 494.7 TFLOPS: 50% of an H100 SXM's 989.4.
  BOOST_TEST(mfu_line(kCuda, "NVIDIA H100 80GB HBM3", 0, DType::BFloat16, 1e6, 494.7e6) ==
             "MFU 50.00% of 989.4 TFLOPS (NVIDIA H100 80GB HBM3: H100 SXM bf16 dense, NVIDIA "
             "datasheet)");
  // float32 compute: still the bf16 peak, and said.
  BOOST_TEST(mfu_line(kCuda, "NVIDIA A100-SXM4-80GB", 0, std::nullopt, 1e6, 31.2e6) ==
             "MFU 10.00% of 312 TFLOPS (NVIDIA A100-SXM4-80GB: A100 bf16 dense, NVIDIA "
             "datasheet; this run computes in float32)");
  // --peak-tflops wins over the name.
  BOOST_TEST(mfu_line(kCuda, "NVIDIA H100 80GB HBM3", 100, DType::BFloat16, 1e6, 25e6) ==
             "MFU 25.00% of 100 TFLOPS (--peak-tflops)");
  BOOST_TEST(mfu_line(kCuda, "NVIDIA GeForce RTX 4090", 0, DType::BFloat16, 1e6, 1e6) ==
             "MFU: no bf16 peak known for 'NVIDIA GeForce RTX 4090' (known: H100 SXM/PCIe, H200, "
             "A100); give --peak-tflops");
  BOOST_TEST(mfu_line(kCuda, "NVIDIA H200", 0, DType::BFloat16, 0, 1e6) ==
             "MFU: this model gives no FLOP count per token");
}

BOOST_AUTO_TEST_CASE(no_line_on_the_cpu_without_a_peak) {
  BOOST_TEST(mfu_line(kCPU, "", 0, std::nullopt, 1e6, 1e6) == "");
  BOOST_TEST(mfu_line(kCPU, "", 2, std::nullopt, 1e6, 1e6) ==
             "MFU 50.00% of 2 TFLOPS (--peak-tflops)");
}
