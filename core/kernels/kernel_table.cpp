// The kernel table registry and the device of an op (kernel_table.h).
#include "core/kernels/kernel_table.h"

#include <array>
#include <atomic>

#include "core/kernels/cpu/cpu_kernels.h"
#if FSDP_HAVE_FAKE_CUDA
#include "core/fake_cuda/kernels.h"
#endif
#if FSDP_HAVE_CUDA
#include "core/cuda/kernel_table.h"
#endif

namespace fsdp {

namespace {

// Indexed by DeviceType; constant-initialised, so the CPU table is there before any static
// constructor runs an op.
std::array<std::atomic<const KernelTable*>, kNumDeviceTypes> g_tables{&kCpuKernels};
static_assert(static_cast<int>(DeviceType::CPU) == 0, "the CPU table is the first row");

std::atomic<const KernelTable*>& slot(DeviceType type) {
  return g_tables[static_cast<std::size_t>(type)];
}

}  // namespace

void register_kernels(DeviceType type, const KernelTable* table) {
  FSDP_CHECK(type != DeviceType::Meta, ValueError,
             "register_kernels: the meta device has no kernels (its ops compute shapes only)");
  slot(type).store(table, std::memory_order_release);
}

// The tables of the devices a build has beyond the CPU, installed at their first lookup (as
// core/builtin_devices.h registers their allocators): no static initialiser to lose in linking.
const KernelTable* install_once(DeviceType type, const KernelTable* table) {
  const KernelTable* expected = nullptr;
  slot(type).compare_exchange_strong(expected, table, std::memory_order_acq_rel);
  return slot(type).load(std::memory_order_acquire);
}

const KernelTable* builtin_table(DeviceType type) {
#if FSDP_HAVE_FAKE_CUDA
  if (type == DeviceType::FakeCUDA) return install_once(type, &fake_cuda::kernel_table());
#endif
#if FSDP_HAVE_CUDA
  if (type == DeviceType::CUDA) return install_once(type, &cuda::kernel_table());
#endif
  (void)type;
  return nullptr;
}

const KernelTable& kernels(Device device) {
  const KernelTable* t = slot(device.type).load(std::memory_order_acquire);
  if (t == nullptr) t = builtin_table(device.type);
  FSDP_CHECK(t != nullptr, RuntimeError,
             "no kernels for device {}: this build has no support for it (the CUDA kernels need "
             "a build with -Dcuda=enabled)",
             device.str());
  return *t;
}

bool has_kernels(Device device) {
  if (device.is_meta()) return false;
  return slot(device.type).load(std::memory_order_acquire) != nullptr ||
         builtin_table(device.type) != nullptr;
}

namespace {

// Folds one tensor into the running common device (see common_device).
inline void fold_device(const char* op, const Tensor& t, Device& common, bool& have, bool& meta) {
  if (!t.defined()) return;
  const Device d = t.device();
  if (d.is_meta()) {
    meta = true;
    return;
  }
  if (d.is_cpu()) {
    check_storage_alive(t, op);
    if (t.dim() == 0) return;  // a cpu scalar goes with any device
  } else {
    // Before the storage: a device this build cannot run has no storage either.
    FSDP_CHECK(has_kernels(d), NotImplementedError,
               "{}: not implemented for device {} (tensor of shape {}): this build has no kernels "
               "for it",
               op, d.str(), shape_str(t.shape()));
    check_storage_alive(t, op);
  }
  if (!have) {
    common = d;
    have = true;
    return;
  }
  FSDP_CHECK(d == common, RuntimeError,
             "{}: Expected all tensors to be on the same device, but found at least two devices, "
             "{} and {}!",
             op, common.str(), d.str());
}

}  // namespace

Device common_device(const char* op, std::initializer_list<const Tensor*> tensors) {
  Device common = kCPU;
  bool have = false, meta = false;
  for (const Tensor* t : tensors) fold_device(op, *t, common, have, meta);
  return meta ? kMeta : common;
}

Device common_device(const char* op, const std::vector<Tensor>& tensors) {
  Device common = kCPU;
  bool have = false, meta = false;
  for (const Tensor& t : tensors) fold_device(op, t, common, have, meta);
  return meta ? kMeta : common;
}

Tensor new_tensor(const Shape& shape, DType dtype, Device device) {
  return empty(shape, TensorOptions(dtype, device));
}

Tensor kernel_index(const Tensor& index, Device device) {
  Tensor t = index.detach();
  if (t.device() != device) t = t.to(device);
  return t.is_contiguous() ? t : t.contiguous();
}

}  // namespace fsdp
