// A kernel launch on the emulated device, what rewrite_kernels.py makes of `kernel<<<grid,
// block, shared, stream>>>(args...)`:
//   ::fsdp::emu::launch([](auto... emu_args) { kernel(emu_args...); }, "kernel",
//                       FSDP_EMU_KERNEL_ADDRESS(kernel), grid, block, shared, stream)(args...)
// The kernel's address identifies it to the runtime as cudaFuncSetAttribute's argument does
// (its dynamic shared memory opt-in); `shared` bytes of dynamic shared memory are each CTA's
// (emu_executor.h's dynamic_shared). The arguments are copied at the launch, as CUDA copies them
// into the kernel's parameter space, and each thread calls the kernel with its own copies
// (parameters are per thread). A pointer argument the device cannot access (not null and not device
// memory) refuses the launch with one line naming the kernel, the argument and its type; otherwise
// the launch is queued on its stream through fsdp_emu_launch (emu_runtime.h), which checks the
// configuration.
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

// The address of the kernel that `kernel` (the expression before <<<) names for a launch with
// arguments of types A... (decayed), as cudaFuncSetAttribute receives it: &kernel where that is
// one function (a plain kernel, a template's explicit specialisation); else the specialisation
// deduced from exactly those parameter types; else null, a launch that deduces through
// conversions, which no opt-in can name here (above 48 KiB it is refused as without one). The
// requires-expressions depend on A, so a form that does not apply is false, not an error.
#define FSDP_EMU_KERNEL_ADDRESS(...)                                                    \
  []<typename... A>() -> const void* {                                                  \
    if constexpr (requires {                                                            \
                    ::fsdp::emu::address_of(&__VA_ARGS__, static_cast<A*>(nullptr)...); \
                  })                                                                    \
      return ::fsdp::emu::address_of(&__VA_ARGS__, static_cast<A*>(nullptr)...);        \
    else if constexpr (requires { static_cast<void (*)(A...)>(&__VA_ARGS__); })         \
      return reinterpret_cast<const void*>(static_cast<void (*)(A...)>(&__VA_ARGS__));  \
    else                                                                                \
      return nullptr;                                                                   \
  }

namespace fsdp::emu {

// A function's address as cudaFuncSetAttribute's `const void*` (the pointers only make the call
// depend on FSDP_EMU_KERNEL_ADDRESS's argument types).
template <typename F, typename... Unused>
requires std::is_function_v<F>
const void* address_of(F* function, Unused*...) {
  return reinterpret_cast<const void*>(function);
}

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
  std::size_t shared;

  static void thread(void* self) {
    auto* c = static_cast<LaunchClosure*>(self);
    std::apply(c->kernel, c->args);
  }
  static void run(void* self) {
    auto* c = static_cast<LaunchClosure*>(self);
    run_grid(c->name, c->grid, c->block, c->shared, &thread, c);
  }
  static void destroy(void* self) { delete static_cast<LaunchClosure*>(self); }
};

template <typename Kernel, typename Address>
class Launch {
 public:
  Launch(Kernel kernel, const char* name, Address address, dim3 grid, dim3 block,
         std::size_t shared = 0, cudaStream_t stream = nullptr)
      : kernel_(kernel),
        name_(name),
        address_(address),
        grid_(grid),
        block_(block),
        shared_(shared),
        stream_(stream) {}

  template <typename... Args>
  void operator()(Args&&... args) const {
    int position = 0;
    if (!(accessible(++position, args) && ...)) return;
    using Closure = LaunchClosure<Kernel, std::decay_t<Args>...>;
    auto* c = new Closure{kernel_, {std::forward<Args>(args)...}, name_, grid_, block_, shared_};
    const void* function = address_.template operator()<std::decay_t<Args>...>();
    fsdp_emu_launch(stream_, grid_, block_, shared_, name_, function, &Closure::run, c,
                    &Closure::destroy);
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
  Address address_;
  dim3 grid_, block_;
  std::size_t shared_;
  cudaStream_t stream_;
};

// `address` is FSDP_EMU_KERNEL_ADDRESS(kernel).
template <typename Kernel, typename Address>
Launch<Kernel, Address> launch(Kernel kernel, const char* name, Address address, dim3 grid,
                               dim3 block, std::size_t shared = 0, cudaStream_t stream = nullptr) {
  return Launch<Kernel, Address>(kernel, name, address, grid, block, shared, stream);
}

}  // namespace fsdp::emu
