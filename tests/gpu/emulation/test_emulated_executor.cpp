// The executor's semantics on test-only kernels written as CUDA (launched in the form
// rewrite_kernels.py produces): barriers not every thread reaches are one-line faults that end
// the launch and do not hang, warp operations the lanes do not agree on likewise, shuffles and
// warp reductions give the sums (2-D blocks, 8-byte values, a partial warp), and a pointer the
// device cannot access refuses the launch, naming the kernel and the argument.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/cuda/kernels.h"
#include "tests/gpu/emulation/emu_cuda.h"
#include "tests/gpu/emulation/emu_test_runtime.h"

namespace {

// Threads below 16 wait at a barrier the others skip.
__global__ void barrier_in_branch(float* out) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (threadIdx.x < 16) __syncthreads();
  out[i] = 1.0f;
}

// Lanes 8 and up exit before the shuffle their partners wait in.
__global__ void shuffle_after_exit(float* out) {
  if (threadIdx.x >= 8) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

// Warp 0 at __syncthreads; warp 1 half at a shuffle, half exited.
__global__ void stuck_everywhere(float* out) {
  if (threadIdx.x < 32)
    __syncthreads();
  else if (threadIdx.x < 48)
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

// Half the warp at __syncwarp, half at a shuffle.
__global__ void mixed_warp_ops(float* out) {
  if (threadIdx.x < 16)
    __syncwarp();
  else
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

// Each warp's sum over segments of `width` lanes of its threads' linear indices plus 1000 times
// the block's: by xor butterfly (float) and by shuffling down (double), lane 0 writing both.
__global__ void warp_sums(float* xor_sums, double* down_sums, int width) {
  const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned warps = (blockDim.x * blockDim.y * blockDim.z + 31) / 32;
  const float v = static_cast<float>(tid + 1000 * blockIdx.x);
  float s = v;
  for (int o = width / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o, width);
  double d = v;
  for (int o = width / 2; o > 0; o >>= 1) d += __shfl_down_sync(0xffffffffu, d, o, width);
  if ((tid & 31) == 0) {
    xor_sums[blockIdx.x * warps + tid / 32] = s;
    down_sums[blockIdx.x * warps + tid / 32] = d;
  }
}

// Every thread adds its index with float, int and unsigned long long atomics; a shared-memory
// tree (the kernels' block reductions) sums the same values.
__global__ void atomics_and_tree(float* fsum, int* isum, unsigned long long* usum, float* tree) {
  __shared__ float partial[256];
  atomicAdd(fsum, static_cast<float>(threadIdx.x));
  atomicAdd(isum, static_cast<int>(threadIdx.x));
  atomicAdd(usum, 1ull);
  partial[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *tree = partial[0];
}

// The last thread writes its block's slot (it starts first: the others reach the declaration
// after the write), all read it and the other block's slot, which this block never wrote. The
// poison_shared call is the one rewrite_kernels.py adds after a declaration.
__global__ void reads_shared_slots(float* own, float* other) {
  __shared__ float slots[2];
  ::fsdp::emu::poison_shared(&slots, sizeof(slots));
  if (threadIdx.x == blockDim.x - 1) slots[blockIdx.x] = 1.0f + blockIdx.x;
  __syncthreads();
  own[blockIdx.x * blockDim.x + threadIdx.x] = slots[blockIdx.x];
  other[blockIdx.x * blockDim.x + threadIdx.x] = slots[1 - blockIdx.x];
}

using fsdp::emu::launch;
using fsdp::emu::test::take_fault;
using fsdp::emu::test::take_launch_error;

std::string address(const void* p) {
  std::ostringstream s;
  s << p;
  return s.str();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(emulated_executor)

BOOST_AUTO_TEST_CASE(a_barrier_some_threads_skip_is_a_fault_that_ends_the_launch) {
  std::vector<float> out(64, NAN);
  launch([](auto... a) { barrier_in_branch(a...); }, "barrier_in_branch",
         FSDP_EMU_KERNEL_ADDRESS(barrier_in_branch), 2, 32)(out.data());
  BOOST_TEST(take_fault() ==
             "barrier_in_branch: block (0,0,0): 16 of 32 threads wait at __syncthreads, the rest "
             "exited without reaching it");
  for (int i = 0; i < 64; ++i) {
    const bool wrote = i >= 16 && i < 32;  // block 0's threads that skipped; block 1 never ran
    BOOST_TEST((out[i] == 1.0f) == wrote, "element " << i << " = " << out[i]);
  }
  // The executor is clean afterwards: the next launch on this thread runs whole.
  std::vector<float> xs(2, NAN);
  std::vector<double> ds(2, NAN);
  launch([](auto... a) { warp_sums(a...); }, "warp_sums", FSDP_EMU_KERNEL_ADDRESS(warp_sums), 1,
         64)(xs.data(), ds.data(), 32);
  BOOST_TEST(xs[1] == 1520.0f);  // 32 + ... + 63
  BOOST_TEST(take_fault() == "");
}

BOOST_AUTO_TEST_CASE(lanes_that_exit_before_a_shuffle_are_a_fault) {
  std::vector<float> out(32, NAN);
  launch([](auto... a) { shuffle_after_exit(a...); }, "shuffle_after_exit",
         FSDP_EMU_KERNEL_ADDRESS(shuffle_after_exit), 1, 32)(out.data());
  BOOST_TEST(take_fault() ==
             "shuffle_after_exit: block (0,0,0), warp 0: 8 of 32 lanes wait at __shfl_xor_sync, "
             "the rest exited without reaching it");
}

BOOST_AUTO_TEST_CASE(a_fault_names_every_place_threads_wait) {
  std::vector<float> out(64, NAN);
  launch([](auto... a) { stuck_everywhere(a...); }, "stuck_everywhere",
         FSDP_EMU_KERNEL_ADDRESS(stuck_everywhere), 1, 64)(out.data());
  BOOST_TEST(take_fault() ==
             "stuck_everywhere: block (0,0,0): 32 of 64 threads wait at __syncthreads, the rest: "
             "16 exited, 16 wait at __shfl_xor_sync (warp 1)");
}

BOOST_AUTO_TEST_CASE(lanes_at_different_warp_operations_are_a_fault) {
  std::vector<float> out(32, NAN);
  launch([](auto... a) { mixed_warp_ops(a...); }, "mixed_warp_ops",
         FSDP_EMU_KERNEL_ADDRESS(mixed_warp_ops), 1, 32)(out.data());
  // Threads start from the highest index: lanes 31..16 wait at the shuffle when lane 15 comes.
  BOOST_TEST(take_fault() ==
             "mixed_warp_ops: block (0,0,0), warp 0: lane 15 reaches __syncwarp while 16 lanes "
             "wait at __shfl_xor_sync: the lanes of a warp must meet at the same warp operation");
}

BOOST_AUTO_TEST_CASE(shuffles_sum_each_warp_in_2d_blocks_and_partial_warps) {
  // Block (16, 4, 2): 128 threads, 4 warps, each spanning two y rows. Three blocks.
  std::vector<float> xs(12, NAN);
  std::vector<double> ds(12, NAN);
  launch([](auto... a) { warp_sums(a...); }, "warp_sums", FSDP_EMU_KERNEL_ADDRESS(warp_sums), 3,
         dim3(16, 4, 2))(xs.data(), ds.data(), 32);
  for (int b = 0; b < 3; ++b)
    for (int w = 0; w < 4; ++w) {
      double want = 0;
      for (int t = w * 32; t < w * 32 + 32; ++t) want += t + 1000 * b;
      BOOST_TEST(xs[b * 4 + w] == want);
      BOOST_TEST(ds[b * 4 + w] == want);
    }
  // 40 threads: warp 1 has 8 lanes; reduced over segments of 8, lane 0 of each warp holds its
  // first 8 lanes' sum.
  std::vector<float> px(2, NAN);
  std::vector<double> pd(2, NAN);
  launch([](auto... a) { warp_sums(a...); }, "warp_sums", FSDP_EMU_KERNEL_ADDRESS(warp_sums), 1,
         40)(px.data(), pd.data(), 8);
  BOOST_TEST(px[0] == 28.0f);   // 0 + ... + 7
  BOOST_TEST(px[1] == 284.0f);  // 32 + ... + 39
  BOOST_TEST(pd[1] == 284.0);
  BOOST_TEST(take_fault() == "");
}

BOOST_AUTO_TEST_CASE(a_shuffle_from_a_lane_the_partial_warp_lacks_is_a_fault) {
  std::vector<float> px(2, NAN);
  std::vector<double> pd(2, NAN);
  // Width 32 over 40 threads: warp 1's lane 0 reads lane 16, which the block does not have.
  launch([](auto... a) { warp_sums(a...); }, "warp_sums", FSDP_EMU_KERNEL_ADDRESS(warp_sums), 1,
         40)(px.data(), pd.data(), 32);
  BOOST_TEST(take_fault() ==
             "warp_sums: block (0,0,0), warp 1: lane 7 reads lane 23 with __shfl_xor_sync, which "
             "the warp does not have (8 lanes): undefined on the device");
}

BOOST_AUTO_TEST_CASE(atomics_and_a_shared_memory_tree_sum_the_block) {
  float fsum = 0, tree = NAN;
  int isum = 0;
  unsigned long long usum = 0;
  launch([](auto... a) { atomics_and_tree(a...); }, "atomics_and_tree",
         FSDP_EMU_KERNEL_ADDRESS(atomics_and_tree), 1, 256)(&fsum, &isum, &usum, &tree);
  BOOST_TEST(fsum == 32640.0f);
  BOOST_TEST(isum == 32640);
  BOOST_TEST(usum == 256u);
  BOOST_TEST(tree == 32640.0f);
  BOOST_TEST(take_fault() == "");
}

BOOST_AUTO_TEST_CASE(shared_memory_starts_undefined_in_each_cta) {
  std::vector<float> own(128, 0.0f), other(128, 0.0f);
  launch([](auto... a) { reads_shared_slots(a...); }, "reads_shared_slots",
         FSDP_EMU_KERNEL_ADDRESS(reads_shared_slots), 2, 64)(own.data(), other.data());
  for (int i = 0; i < 128; ++i) {
    BOOST_TEST(own[i] == 1.0f + i / 64, "thread " << i);  // written once per CTA, kept
    // Block 1's other slot is what block 0 left in the static: poisoned, as on the device.
    BOOST_TEST(std::isnan(other[i]), "thread " << i << " read " << other[i]);
  }
  BOOST_TEST(take_fault() == "");
}

BOOST_AUTO_TEST_CASE(launches_on_several_os_threads_at_once_keep_their_own_blocks) {
  // As the runtime's stream workers will: four OS threads launch at once, each its own warp
  // sums (per-thread built-in variables, fibers and shared memory) and all into one set of
  // atomic counters (atomic across threads).
  constexpr int kThreads = 4, kRepeats = 25;
  float fsum = 0;
  int isum = 0;
  unsigned long long usum = 0;
  std::vector<int> wrong(kThreads, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < kThreads; ++k)
    threads.emplace_back([&, k] {
      std::vector<float> xs(12);
      std::vector<double> ds(12);
      std::vector<float> trees(kRepeats);
      for (int r = 0; r < kRepeats; ++r) {
        launch([](auto... a) { warp_sums(a...); }, "warp_sums", FSDP_EMU_KERNEL_ADDRESS(warp_sums),
               3, dim3(16, 4, 2))(xs.data(), ds.data(), 32);
        for (int b = 0; b < 3; ++b)
          for (int w = 0; w < 4; ++w)
            if (xs[b * 4 + w] != 32 * (32 * w + 15.5f) + 32000 * b) ++wrong[k];
        launch([](auto... a) { atomics_and_tree(a...); }, "atomics_and_tree",
               FSDP_EMU_KERNEL_ADDRESS(atomics_and_tree), 1, 256)(&fsum, &isum, &usum, &trees[r]);
        if (trees[r] != 32640.0f) ++wrong[k];
      }
    });
  for (std::thread& t : threads) t.join();
  for (int k = 0; k < kThreads; ++k) BOOST_TEST(wrong[k] == 0, "thread " << k);
  BOOST_TEST(isum == kThreads * kRepeats * 32640);
  BOOST_TEST(usum == kThreads * kRepeats * 256ull);
  BOOST_TEST(take_fault() == "");
}

BOOST_AUTO_TEST_CASE(a_host_pointer_argument_refuses_the_launch) {
  const std::int64_t rows = 3, cols = 40;
  std::vector<float> x(rows * cols, 1.0f), y(rows * cols, NAN), mean(rows, NAN), rstd(rows, NAN);
  fsdp::emu::test::register_host(y.data(), y.size() * sizeof(float));
  const int before = fsdp::emu::test::launches();
  std::string thrown;
  try {
    fsdp::cuda::layer_norm_forward<float, float>(x.data(), nullptr, nullptr, y.data(), mean.data(),
                                                 rstd.data(), rows, cols, 1e-5f, nullptr);
  } catch (const std::runtime_error& e) {
    thrown = e.what();
  }
  fsdp::emu::test::clear_host();
  BOOST_TEST(take_launch_error() ==
             "layer_norm_forward_kernel: argument 4 (float*) is not device "
             "memory (" +
                 address(y.data()) + ")");
  // FSDP_CUDA_CHECK_LAUNCH after the launch in layer_norm.cu (#line keeps its file and line).
  BOOST_TEST(thrown.find("CUDA error cudaErrorInvalidValue") == 0, thrown);
  BOOST_TEST(thrown.find("from `kernel launch` at ") != std::string::npos, thrown);
  BOOST_TEST(thrown.find("core/cuda/layer_norm.cu:") != std::string::npos, thrown);
  BOOST_TEST(fsdp::emu::test::launches() == before);
  BOOST_TEST(std::isnan(mean[0]));
}

BOOST_AUTO_TEST_SUITE_END()
