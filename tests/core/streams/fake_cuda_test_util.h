// Helpers of the fake_cuda tests: ints in device memory (and the gate, tests/support/gate.h).
#pragma once

#include <memory>

#include "core/device_copy.h"
#include "core/fake_cuda/fake_cuda.h"
#include "core/memory.h"
#include "tests/support/gate.h"

namespace fsdp::testing {

inline const Device kFake0(DeviceType::FakeCUDA, 0);

// One int in device memory of `device`, on the current stream.
inline std::unique_ptr<Storage> device_int(int value, Device device = kFake0) {
  auto s = std::make_unique<Storage>(sizeof(int), device);
  copy_bytes(s->data(), device, &value, kCPU, sizeof(int));
  return s;
}

// Reads it back (the copy to the host synchronises the current stream first).
inline int read_int(const Storage& s) {
  int v = -1;
  copy_bytes(&v, kCPU, s.data(), s.device(), sizeof(int));
  return v;
}

inline int* view(const Storage& s) {
  return static_cast<int*>(fake_cuda::host_view(s.data()));
}

}  // namespace fsdp::testing
