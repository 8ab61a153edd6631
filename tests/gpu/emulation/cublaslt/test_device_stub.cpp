#include "tests/gpu/emulation/cublaslt/test_device_stub.h"

#include <cuda_runtime_api.h>

#include <functional>
#include <utility>
#include <vector>

#include "tests/gpu/emulation/emu_runtime.h"

namespace fsdp::emu::testing {
namespace {

std::vector<std::pair<const char*, std::size_t>> ranges;
std::vector<std::pair<cudaHostFn_t, void*>> queued;
std::vector<std::string> faults;

}  // namespace

void add_device_range(const void* p, std::size_t bytes) {
  ranges.emplace_back(static_cast<const char*>(p), bytes);
}
void clear_device_ranges() {
  ranges.clear();
}

int run_queued() {
  auto work = std::move(queued);
  queued.clear();
  for (auto& [fn, data] : work) fn(data);
  return int(work.size());
}

std::vector<std::string> take_faults() {
  return std::exchange(faults, {});
}

}  // namespace fsdp::emu::testing

extern "C" void fsdp_emu_report_fault(cudaError_t error, const char* message) {
  fsdp::emu::testing::faults.push_back(error == cudaErrorIllegalAddress
                                           ? std::string(message)
                                           : "unexpected error " + std::to_string(int(error)));
}

extern "C" int fsdp_emu_device_accessible(const void* p) {
  const char* c = static_cast<const char*>(p);
  for (const auto& [first, bytes] : fsdp::emu::testing::ranges)
    if (c != nullptr && std::less_equal<>()(first, c) && std::less<>()(c, first + bytes)) return 1;
  return 0;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t, cudaHostFn_t fn, void* data) {
  fsdp::emu::testing::queued.emplace_back(fn, data);
  return cudaSuccess;
}
