// fake_cuda's kernel table: the CPU table's kernels, each queued on the current stream of the
// device and run by that stream's worker on host views of the device memory (a non-owning CPU
// tensor over the pages behind the same device pointer, strides and offset kept). Results are
// the CPU's bit for bit; what differs is when they happen, as on a GPU: a kernel runs after the
// work queued before it on its stream, concurrently with other streams, and nothing it touches
// is kept alive by it (the storage's owner and the allocator's stream rules do that).
#include "core/fake_cuda/kernels.h"

#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/fake_cuda/fake_cuda.h"
#include "core/kernels/kernel_accesses.h"
#include "core/kernels/kernel_families.h"
#include "core/kernels/kernel_names.h"
#include "core/kernels/kernel_table.h"
#include "core/random.h"
#include "core/stream.h"
#include "core/stream_sanitizer.h"
#include "core/stream_sanitizer_mode.h"
#include "core/tensor.h"

namespace fsdp::fake_cuda {
namespace {

// A kernel's view of one tensor argument. A fake_cuda tensor becomes a CPU tensor over its
// pages; a CPU tensor (a 0-d scalar operand, PyTorch's rule) is copied now, so that the host may
// change it before the kernel runs.
Tensor kernel_view(const Tensor& t, const char* op) {
  if (!t.defined()) return t;
  if (t.device().is_cpu()) return t.clone();
  auto impl = std::make_shared<TensorImpl>();
  const auto& storage = t.impl()->storage;
  // An empty tensor's storage may hold no memory at all (a rank's empty piece of a parameter).
  void* host = storage->data() == nullptr ? nullptr : host_view(storage->data(), op);
  impl->storage = Storage::borrowed(host, storage->nbytes(), kCPU);
  impl->set_sizes(t.shape());
  impl->strides = t.strides();
  impl->offset = t.storage_offset();
  impl->dtype = t.dtype();
  impl->device = kCPU;
  return Tensor(std::move(impl));
}

// How an argument travels into the queued kernel: tensors as views, everything else by value.
template <typename A>
struct Carry {
  using type = std::decay_t<A>;
  static type take(A a, const char*) { return a; }
};
template <>
struct Carry<const Tensor&> {
  using type = Tensor;
  static Tensor take(const Tensor& t, const char* op) { return kernel_view(t, op); }
};
template <>
struct Carry<const std::vector<Tensor>&> {
  using type = std::vector<Tensor>;
  static std::vector<Tensor> take(const std::vector<Tensor>& ts, const char* op) {
    std::vector<Tensor> out;
    out.reserve(ts.size());
    for (const auto& t : ts) out.push_back(kernel_view(t, op));
    return out;
  }
};

// The device a kernel runs on: that of its first fake_cuda tensor.
void find_device(Device& d, const Tensor& t) {
  if (d.is_cpu() && t.defined() && t.device().is_fake_cuda()) d = t.device();
}
void find_device(Device& d, const std::vector<Tensor>& ts) {
  for (const auto& t : ts) find_device(d, t);
}
template <typename A>
void find_device(Device&, const A&) {}

template <typename Member>
struct Queued;

template <typename... A>
struct Queued<void (*KernelTable::*)(A...)> {
  template <auto Member>
  static void run(A... args) {
    Device device = kCPU;
    (find_device(device, args), ...);
    const Stream stream = current_stream(device);
    auto cpu = kernels(kCPU).*Member;
    auto carried = std::make_tuple(Carry<A>::take(args, "a fake_cuda kernel")...);
    launch(stream, [cpu, carried = std::move(carried)]() mutable {
      std::apply([cpu](auto&... a) { cpu(a...); }, carried);
    });
    if (stream_sanitizer::enabled())
      stream_sanitizer::on_accesses(stream, kernel_name<Member>(),
                                    kernel_accesses<Member>(args...));
  }
};

// A copy into host memory returns when the values are there, as cudaMemcpy to pageable memory
// does (item(), to_vector() and printing read them next); from the host, the source is staged.
template <auto Member>
void queued_copy(const Tensor& dst, const Tensor& src) {
  if (!dst.device().is_cpu()) return Queued<decltype(Member)>::template run<Member>(dst, src);
  const Stream stream = current_stream(src.device());
  auto cpu = kernels(kCPU).*Member;
  Tensor from = kernel_view(src, "a copy to the host");
  launch(stream, [cpu, dst, from] { cpu(dst, from); });
  if (stream_sanitizer::enabled())
    stream_sanitizer::on_accesses(stream, "copy to the host",
                                  {stream_sanitizer::access_of(src, false)});
  stream.synchronize();
}

// random draws from a host generator: drawn now, on the host and in the CPU's order (the
// numbers are the CPU's), into a host buffer that the stream copies into the tensor.
void queued_random(const RandomSpec& spec, const Tensor& t, Generator& g) {
  Tensor drawn = empty(t.shape(), TensorOptions(t.dtype(), kCPU));
  kernels(kCPU).random(spec, drawn, g);
  Queued<decltype(&KernelTable::copy)>::run<&KernelTable::copy>(t, drawn);
}

KernelTable make_table() {
  KernelTable t{};
#define FSDP_FAKE_CUDA_QUEUED(name) \
  t.name = &Queued<decltype(&KernelTable::name)>::run<&KernelTable::name>;
  FSDP_KERNEL_FAMILIES(FSDP_FAKE_CUDA_QUEUED)
#undef FSDP_FAKE_CUDA_QUEUED
  t.linear_backward16_max_weight = kernels(kCPU).linear_backward16_max_weight;  // the CPU's runs
  t.copy = &queued_copy<&KernelTable::copy>;
  t.copy_broadcast = &queued_copy<&KernelTable::copy_broadcast>;
  t.random = &queued_random;
  return t;
}

}  // namespace

const KernelTable& kernel_table() {
  static const KernelTable table = make_table();
  return table;
}

}  // namespace fsdp::fake_cuda
