// Dynamic shared memory on the emulated device, written as CUDA and rewritten by
// rewrite_kernels.py as core/cuda's .cu files are (its `extern __shared__` declarations, its
// <<<>>> launches, cudaFuncSetAttribute on the kernel itself): 64 KiB shared by a CTA's
// threads across a barrier, the launch refused above 48 KiB until the kernel opts in, an opt-in
// above the device's 227 KiB refused, the buffer poisoned at each CTA's start, and a kernel
// launched without dynamic shared memory faulting by name. cuda_emulated_kernels' (never nvcc's).
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/gpu/emulation/emu_test_runtime.h"

namespace {

constexpr int kThreads = 256;
constexpr std::size_t kBytes = 64 * 1024;

// The first half of the block writes every word of the dynamic shared memory (word w by thread
// w % 128) with what `in` holds for this block; after the barrier the second half reads them
// back in reverse order (word w by thread 128 + (w / 128) % 128) into `out`.
template <typename Word>
__global__ void exchange_words(const Word* in, Word* out) {
  extern __shared__ __align__(16) unsigned char exchange_smem[];
  Word* const words = reinterpret_cast<Word*>(exchange_smem);
  const unsigned count = kBytes / sizeof(Word), half = blockDim.x / 2;
  const Word* block_in = in + blockIdx.x * count;
  if (threadIdx.x < half)
    for (unsigned w = threadIdx.x; w < count; w += half) words[w] = block_in[w];
  __syncthreads();
  if (threadIdx.x >= half)
    for (unsigned w = 0; w < count; ++w)
      if ((count - 1 - w) / half % half == threadIdx.x - half)
        out[blockIdx.x * count + count - 1 - w] = words[count - 1 - w];
}

// Thread 0 of each CTA reports the buffer's bytes before any thread writes (all 0xff: poisoned
// at the CTA's start, not what the CTA before left), then every thread writes its words.
__global__ void read_before_writing(unsigned* poisoned_words) {
  extern __shared__ unsigned dynamic_words[];
  if (threadIdx.x == 0) {
    unsigned poisoned = 0;
    for (unsigned w = 0; w < kBytes / 4; ++w) poisoned += dynamic_words[w] == 0xffffffffu;
    poisoned_words[blockIdx.x] = poisoned;
  }
  __syncthreads();
  for (unsigned w = threadIdx.x; w < kBytes / 4; w += blockDim.x) dynamic_words[w] = w;
}

using fsdp::emu::test::launches;
using fsdp::emu::test::take_fault;
using fsdp::emu::test::take_launch_error;

// Every word distinct across blocks.
std::vector<std::int32_t> words_for(unsigned blocks) {
  std::vector<std::int32_t> in(blocks * kBytes / 4);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::int32_t>(i * 7 + 3);
  return in;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(emulated_dynamic_shared_memory)

BOOST_AUTO_TEST_CASE(above_48_kib_needs_the_kernels_opt_in_then_its_threads_share_the_memory) {
  const std::vector<std::int32_t> in = words_for(2);
  std::vector<std::int32_t> out(in.size(), -1);
  const int before = launches();
  exchange_words<std::int32_t><<<2, kThreads, kBytes, nullptr>>>(in.data(), out.data());
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidValue);
  BOOST_TEST(take_launch_error() ==
             "kernel launch exchange_words: 65536 bytes of dynamic shared memory, above 48 KiB "
             "without an opt-in (cudaFuncSetAttribute with "
             "cudaFuncAttributeMaxDynamicSharedMemorySize)");
  BOOST_TEST(launches() == before);
  BOOST_TEST(out[0] == -1);

  BOOST_TEST(cudaFuncSetAttribute(exchange_words<std::int32_t>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(kBytes)) == cudaSuccess);
  exchange_words<std::int32_t><<<2, kThreads, kBytes, nullptr>>>(in.data(), out.data());
  BOOST_TEST(cudaGetLastError() == cudaSuccess);
  BOOST_TEST(take_fault() == "");
  for (std::size_t i = 0; i < in.size(); ++i) BOOST_TEST(out[i] == in[i], "word " << i);

  // The opt-in is the kernel's own limit: one byte more is refused, naming it.
  exchange_words<std::int32_t><<<2, kThreads, kBytes + 1, nullptr>>>(in.data(), out.data());
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidValue);
  BOOST_TEST(take_launch_error() ==
             "kernel launch exchange_words: 65537 bytes of dynamic shared memory, above the "
             "kernel's cudaFuncAttributeMaxDynamicSharedMemorySize of 65536 bytes");
  // Another instantiation is another kernel, with no opt-in of its own.
  std::vector<std::int64_t> in64(kBytes / 8), out64(kBytes / 8);
  exchange_words<std::int64_t><<<1, kThreads, kBytes, nullptr>>>(in64.data(), out64.data());
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidValue);
  BOOST_TEST(take_launch_error().find("above 48 KiB without an opt-in") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(an_opt_in_beyond_the_devices_227_kib_or_negative_is_refused) {
  const auto attr = cudaFuncAttributeMaxDynamicSharedMemorySize;
  const auto kernel = exchange_words<std::int16_t>;  // no other test case opts it in
  BOOST_TEST(cudaFuncSetAttribute(kernel, attr, 227 * 1024 + 1) == cudaErrorInvalidValue);
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidValue);
  BOOST_TEST(take_launch_error() ==
             "cudaFuncSetAttribute(attribute 8, value 232449): "
             "cudaFuncAttributeMaxDynamicSharedMemorySize outside 0 to 232448 bytes (the "
             "device's sharedMemPerBlockOptin)");
  BOOST_TEST(cudaFuncSetAttribute(kernel, attr, -1) == cudaErrorInvalidValue);
  BOOST_TEST(take_launch_error().find("value -1") != std::string::npos);
  BOOST_TEST(cudaFuncSetAttribute(kernel, cudaFuncAttributeRequiredClusterWidth, 2) ==
             cudaErrorNotSupported);
  BOOST_TEST(take_launch_error().find("not emulated") != std::string::npos);
  BOOST_TEST(cudaGetLastError() == cudaErrorNotSupported);
  // A refused opt-in leaves none: the kernel still may not launch above 48 KiB.
  std::vector<std::int16_t> in(kBytes / 2), out(kBytes / 2);
  exchange_words<std::int16_t><<<1, kThreads, kBytes>>>(in.data(), out.data());
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidValue);
  BOOST_TEST(take_launch_error().find("without an opt-in") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(dynamic_shared_memory_is_poisoned_at_each_ctas_start) {
  // 3 CTAs run one after another through one buffer: each must find it poisoned.
  BOOST_TEST(cudaFuncSetAttribute(read_before_writing, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(kBytes)) == cudaSuccess);
  std::vector<unsigned> poisoned(3, 0);
  read_before_writing<<<3, 128, kBytes>>>(poisoned.data());
  BOOST_TEST(take_fault() == "");
  for (unsigned b = 0; b < 3; ++b) BOOST_TEST(poisoned[b] == kBytes / 4, "block " << b);
}

BOOST_AUTO_TEST_CASE(a_kernel_launched_without_dynamic_shared_memory_faults_by_name) {
  std::vector<unsigned> poisoned(1, 7);
  read_before_writing<<<1, 64>>>(poisoned.data());
  BOOST_TEST(take_fault() ==
             "read_before_writing: block (0,0,0): extern __shared__ memory in a kernel launched "
             "with 0 bytes of dynamic shared memory (the launch's third <<<>>> argument)");
  BOOST_TEST(poisoned[0] == 7u);
}

BOOST_AUTO_TEST_SUITE_END()
