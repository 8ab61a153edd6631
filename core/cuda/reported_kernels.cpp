// The CUDA kernel table as installed: each family reports what it does to device memory to the
// stream sanitizer (core/stream_sanitizer.h) as one item of work on the current stream of its
// device, then launches through launching_kernel_table() (the copies it queues are part of that
// item: they do not report themselves). With the sanitizer off, one relaxed atomic load per call.
// The report comes first, so that a family which waits for its stream (a copy to pageable host
// memory) has its read ordered by that wait.
#include <vector>

#include "core/cuda/kernel_table.h"
#include "core/kernels/kernel_accesses.h"
#include "core/kernels/kernel_families.h"
#include "core/kernels/kernel_names.h"
#include "core/stream.h"
#include "core/stream_sanitizer.h"
#include "core/tensor.h"

namespace fsdp::cuda {
namespace {

// The device a family runs on: that of its first CUDA tensor ("cuda" is cuda:0).
void cuda_device_of(Device& d, const Tensor& t) {
  if (d.is_cpu() && t.defined() && t.device().is_cuda()) d = t.device();
}
void cuda_device_of(Device& d, const std::vector<Tensor>& ts) {
  for (const auto& t : ts) cuda_device_of(d, t);
}
template <typename A>
void cuda_device_of(Device&, const A&) {}

template <typename Member>
struct Reported;
template <typename... A>
struct Reported<void (*KernelTable::*)(A...)> {
  template <auto Member>
  static void run(A... args) {
    if (stream_sanitizer::enabled()) {
      Device device = kCPU;
      (cuda_device_of(device, args), ...);
      if (device.is_cuda())
        stream_sanitizer::on_work(current_stream(device), kernel_name<Member>(),
                                  kernel_accesses<Member>(args...));
      const stream_sanitizer::WithinWork whole;  // its copies are this item
      (launching_kernel_table().*Member)(args...);
      return;
    }
    (launching_kernel_table().*Member)(args...);
  }
};

KernelTable make_reported_table() {
  KernelTable t = launching_kernel_table();
#define FSDP_CUDA_REPORTED(name) \
  t.name = &Reported<decltype(&KernelTable::name)>::run<&KernelTable::name>;
  FSDP_KERNEL_FAMILIES(FSDP_CUDA_REPORTED)
#undef FSDP_CUDA_REPORTED
  return t;
}

}  // namespace

const KernelTable& kernel_table() {
  static const KernelTable table = make_reported_table();
  return table;
}

}  // namespace fsdp::cuda
