// A kernel launch on the emulated device, what rewrite_kernels.py makes of `kernel<<<grid,
// block, shared, stream>>>(args...)`:
//   ::fsdp::emu::launch([](auto... emu_args) { kernel(emu_args...); }, "kernel", grid, block,
//                       shared, stream)(args...)
// The arguments are copied at the launch, as CUDA copies them into the kernel's parameter
// space, and each thread calls the kernel with its own copies (parameters are per thread). A
// pointer argument the device cannot access (not null and not device memory) refuses the launch
// with one line naming the kernel, the argument and its type; otherwise the launch is queued on
// its stream through fsdp_emu_launch (emu_runtime.h), which checks the configuration.
#pragma once

#include <cuda_runtime_api.h>
#include <vector_types.h>

#include <cstddef>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "tests/gpu/emulation/emu_executor.h"
#include "tests/gpu/emulation/emu_runtime.h"

namespace fsdp::emu {

// T's name as the compiler spells it ("const float*").
template <typename T>
constexpr std::string_view type_name() {
  constexpr std::string_view f = __PRETTY_FUNCTION__;  // "... type_name() [with T = X; ...]"
  constexpr std::size_t start = f.find("T = ") + 4;
  constexpr std::size_t end = f.find_first_of(";]", start);
  return f.substr(start, end - start);
}

// Reports argument `position` (from 1) of `kernel` as not device memory: fsdp_emu_launch_error.
void refuse_argument(const char* kernel, int position, std::string_view type, const void* p);

template <typename Kernel, typename... Args>
struct LaunchClosure {
  Kernel kernel;
  std::tuple<Args...> args;
  const char* name;
  dim3 grid, block;

  static void thread(void* self) {
    auto* c = static_cast<LaunchClosure*>(self);
    std::apply(c->kernel, c->args);
  }
  static void run(void* self) {
    auto* c = static_cast<LaunchClosure*>(self);
    run_grid(c->name, c->grid, c->block, &thread, c);
  }
  static void destroy(void* self) { delete static_cast<LaunchClosure*>(self); }
};

template <typename Kernel>
class Launch {
 public:
  Launch(Kernel kernel, const char* name, dim3 grid, dim3 block, std::size_t shared = 0,
         cudaStream_t stream = nullptr)
      : kernel_(kernel),
        name_(name),
        grid_(grid),
        block_(block),
        shared_(shared),
        stream_(stream) {}

  template <typename... Args>
  void operator()(Args&&... args) const {
    int position = 0;
    if (!(accessible(++position, args) && ...)) return;
    using Closure = LaunchClosure<Kernel, std::decay_t<Args>...>;
    auto* c = new Closure{kernel_, {std::forward<Args>(args)...}, name_, grid_, block_};
    fsdp_emu_launch(stream_, grid_, block_, shared_, name_, &Closure::run, c, &Closure::destroy);
  }

 private:
  template <typename A>
  bool accessible(int position, const A& arg) const {
    if constexpr (std::is_pointer_v<std::decay_t<A>>) {
      const void* p = static_cast<const void*>(arg);
      if (p != nullptr && !fsdp_emu_device_accessible(p)) {
        refuse_argument(name_, position, type_name<std::decay_t<A>>(), p);
        return false;
      }
    }
    return true;
  }

  Kernel kernel_;
  const char* name_;
  dim3 grid_, block_;
  std::size_t shared_;
  cudaStream_t stream_;
};

template <typename Kernel>
Launch<Kernel> launch(Kernel kernel, const char* name, dim3 grid, dim3 block,
                      std::size_t shared = 0, cudaStream_t stream = nullptr) {
  return Launch<Kernel>(kernel, name, grid, block, shared, stream);
}

}  // namespace fsdp::emu
