// The emulated device's execution engine: a launch runs its CTAs one after another on the
// calling OS thread (a stream's worker), each CTA's threads as user-mode fibers (Boost.Context)
// that switch only at barriers. __syncthreads is the block's barrier; __syncwarp, the shuffles
// and the warp-level matrix instructions (emu_mma.h) are the warp's (its 32 lanes, or the lanes of
// a partial last warp). A barrier that cannot complete (some threads exited or wait elsewhere) is a
// fault reported through emu_runtime.h and ends the launch. Lanes are not in lockstep (Volta's
// independent thread scheduling): a lane runs until it waits, so code that needs __syncwarp must
// have it.
#pragma once

#include <vector_types.h>

#include <cstddef>
#include <cstdint>

// CUDA's built-in variables, per OS thread since several stream workers launch at once: the
// executor sets threadIdx before it resumes a thread's fiber, blockIdx per CTA, blockDim and
// gridDim per launch. __thread (no C++ dynamic initialisation, so no TLS wrapper calls) and
// initial-exec: the kernels read them in their inner loops.
#define FSDP_EMU_BUILTIN extern __thread __attribute__((tls_model("initial-exec")))
FSDP_EMU_BUILTIN uint3 threadIdx;
FSDP_EMU_BUILTIN uint3 blockIdx;
FSDP_EMU_BUILTIN uint3 blockDim;
FSDP_EMU_BUILTIN uint3 gridDim;
#undef FSDP_EMU_BUILTIN

namespace fsdp::emu {

// Runs thread(closure) once for every thread of the grid, threadIdx and blockIdx set, CTAs in
// order (x fastest) on the calling OS thread, each CTA with `dynamic_shared_bytes` of dynamic
// shared memory (dynamic_shared). A fault (a barrier no thread can pass, a warp
// operation the lanes do not agree on) is reported with fsdp_emu_report_fault, naming `kernel`
// and the block, and the rest of the launch is skipped.
void run_grid(const char* kernel, dim3 grid, dim3 block, std::size_t dynamic_shared_bytes,
              void (*thread)(void*), void* closure);

// __syncthreads: waits until every thread of the block arrives.
void sync_block();
// A warp-wide operation `op` (its name, for messages): waits until every lane of the calling
// thread's warp arrives at the same operation. `mask` must name every lane the warp has.
void sync_warp(unsigned mask, const char* op);
// A shuffle: deposits `value`, waits as sync_warp, and returns the value that lane `source`
// deposited. `source` must be a lane of the warp.
std::uint64_t warp_exchange(unsigned mask, std::uint64_t value, int source, const char* op);
// The most 32-bit words a lane deposits in one warp_stage.
constexpr int kStageWords = 8;
// A warp-wide gather (the mma and ldmatrix emulations): deposits `words` (at most kStageWords)
// words from `value`, waits as sync_warp, and returns every lane's deposit, lane l's at
// [l * kStageWords]; valid until the calling lane's next warp operation.
const std::uint32_t* warp_stage(unsigned mask, const std::uint32_t* value, int words,
                                const char* op);

// Fills a __shared__ variable with 0xff bytes (NaN in every float type, -1 in integers) when the
// first thread of the running CTA reaches its declaration (rewrite_kernels.py adds the call):
// shared memory starts undefined in each CTA on the device, and what an earlier CTA left in
// the emulation's static must not read as valid.
void poison_shared(void* p, std::size_t bytes);

// The running CTA's dynamic shared memory (`extern __shared__ T name[];`, which
// rewrite_kernels.py turns into a call with the declaration's alignment): a heap block of exactly
// the launch's dynamic shared bytes, so AddressSanitizer sees a read past its end, aligned to
// kDynamicSharedAlignment, the same for every thread of the CTA and filled with 0xff bytes at
// the CTA's start (as __shared__ variables are). A launch with no dynamic shared bytes, or an
// alignment above kDynamicSharedAlignment, is a fault naming the kernel.
constexpr std::size_t kDynamicSharedAlignment = 128;
void* dynamic_shared(std::size_t alignment);

// The running CTA's serial number on this OS thread (it changes with every CTA started): for
// per-CTA state kept outside the executor (emu_mma.h's cp.async groups).
std::uint64_t running_cta_serial();

// The calling thread's lane: its linear index in the block (x fastest) modulo 32.
inline int lane() {
  return static_cast<int>((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) &
                          31u);
}

}  // namespace fsdp::emu
