#include "core/fake_cuda/device_memory.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace fsdp::fake_cuda {

namespace {
// PROT_NONE, no swap reserved: a range of addresses only.
void* reserve(void* at, std::size_t bytes) {
  const int fixed = at ? MAP_FIXED : 0;
  return mmap(at, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | fixed, -1, 0);
}
}  // namespace

DeviceMemory::DeviceMemory(int index) : index_(index) {
  void* p = reserve(nullptr, 2 * kCapacity);
  if (p == MAP_FAILED)
    throw RuntimeError(fmt::format("fake_cuda:{}: cannot reserve {} GiB of address space: {}",
                                   index, 2 * kCapacity >> 30, std::strerror(errno)));
  base_ = static_cast<char*>(p);
  free_[0] = kCapacity;
}

void* DeviceMemory::allocate(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  auto it = free_.begin();
  while (it != free_.end() && it->second < bytes) ++it;
  if (it == free_.end()) return nullptr;
  const std::size_t offset = it->first, size = it->second;
  free_.erase(it);
  if (size > bytes) free_[offset + bytes] = size - bytes;
  char* host = base_ + kCapacity + offset;
  if (mprotect(host, bytes, PROT_READ | PROT_WRITE) != 0) {  // the system's memory is out
    if (size > bytes) free_.erase(offset + bytes);
    free_[offset] = size;
    return nullptr;
  }
  used_[offset] = bytes;
  return base_ + offset;
}

void DeviceMemory::release(void* ptr) {
  std::lock_guard lock(mutex_);
  const std::size_t offset = static_cast<char*>(ptr) - base_;
  auto it = used_.find(offset);
  FSDP_CHECK(contains(ptr) && it != used_.end(), ValueError,
             "fake_cuda:{}: release of {} which is not a segment of this device", index_, ptr);
  std::size_t start = offset, size = it->second;
  used_.erase(it);
  // A fresh PROT_NONE mapping over the host pages drops them (the next use gets zero pages).
  if (reserve(base_ + kCapacity + offset, size) == MAP_FAILED)
    throw RuntimeError(fmt::format("fake_cuda:{}: cannot unmap a {} byte segment: {}", index_, size,
                                   std::strerror(errno)));
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && next->first == start + size) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_[start] = size;
}

}  // namespace fsdp::fake_cuda
