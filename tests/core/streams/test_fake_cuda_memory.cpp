// fake_cuda's memory: device pointers fault on host access (a forked child gets SIGSEGV), copies
// round-trip bytes in every direction, storages keep their stream, record_stream defers a freed
// block's reuse until the recorded stream's work is done (and without it the block is reused at
// once on its stream), and the allocator's statistics carry torch.cuda's names.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <csignal>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/stream.h"
#include "tests/core/streams/fake_cuda_test_util.h"

using namespace fsdp;
using namespace fsdp::testing;

namespace {
constexpr std::size_t kMiB = 1 << 20;

std::vector<unsigned char> pattern(std::size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>(i * 131 + seed);
  return v;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(fake_cuda_memory)

BOOST_AUTO_TEST_CASE(host_code_that_dereferences_a_device_pointer_faults) {
  Storage st(4096, kFake0);
  BOOST_TEST(fake_cuda::is_device_pointer(st.data()));
  const pid_t child = fork();
  BOOST_REQUIRE(child >= 0);
  if (child == 0) {
    std::signal(SIGSEGV, SIG_DFL);
    volatile int v = *static_cast<volatile int*>(st.data());
    (void)v;
    _exit(0);  // not reached
  }
  int status = 0;
  BOOST_REQUIRE(waitpid(child, &status, 0) == child);
  BOOST_TEST(WIFSIGNALED(status));
  BOOST_TEST(WTERMSIG(status) == SIGSEGV);
}

BOOST_AUTO_TEST_CASE(copies_round_trip_bytes_in_every_direction) {
  const std::size_t n = 3 * kMiB + 17;
  const auto bytes = pattern(n, 7);
  Storage a(n, kFake0), b(n, kFake0), c(n, Device(DeviceType::FakeCUDA, 1));
  std::vector<unsigned char> src = bytes;
  copy_bytes(a.data(), kFake0, src.data(), kCPU, n);
  std::fill(src.begin(), src.end(), 0);  // taken when queued: reusing the source is safe
  copy_bytes(b.data(), kFake0, a.data(), kFake0, n);
  copy_bytes(c.data(), c.device(), b.data(), kFake0, n);  // fake_cuda:0 -> fake_cuda:1
  std::vector<unsigned char> back(n, 0);
  copy_bytes(back.data(), kCPU, c.data(), c.device(), n);
  BOOST_TEST((back == bytes));
  BOOST_TEST(std::memcmp(fake_cuda::host_view(a.data()), bytes.data(), n) == 0);
}

BOOST_AUTO_TEST_CASE(a_copy_to_the_host_waits_for_the_work_queued_before_it) {
  auto x = device_int(3);
  Gate gate;
  int* px = view(*x);
  launch(current_stream(kFake0), gate.waiter());
  launch(current_stream(kFake0), [px] { *px = 42; });
  gate.open();
  BOOST_TEST(read_int(*x) == 42);  // no explicit synchronize
}

BOOST_AUTO_TEST_CASE(bad_copies_name_the_device_and_the_pointer) {
  int host = 0;
  BOOST_CHECK_EXCEPTION(copy_bytes(&host, kFake0, &host, kCPU, 4), ValueError,
                        [](const ValueError& e) {
                          const std::string m = e.what();
                          return m.starts_with("fake_cuda: host_to_device: 0x") &&
                                 m.ends_with(" is not fake_cuda device memory");
                        });
  Storage st(512, kFake0);
  const std::size_t huge = std::size_t(64) << 30;
  BOOST_CHECK_EXCEPTION(copy_bytes(&host, kCPU, st.data(), kFake0, huge), ValueError,
                        [&](const ValueError& e) {
                          const std::string m = e.what();
                          return m.starts_with("fake_cuda:0: device_to_host of " +
                                               std::to_string(huge) + " bytes at 0x") &&
                                 m.ends_with(" runs past the end of device memory");
                        });
  BOOST_CHECK_EXCEPTION(
      copy_bytes(st.data(), Device(DeviceType::CUDA, 0), st.data(), kFake0, 4), ValueError,
      [](const ValueError& e) {
        return std::string(e.what()) ==
               "copy_bytes: cannot copy 4 bytes from fake_cuda:0 to cuda:0 directly (copy "
               "through the cpu)";
      });
  BOOST_CHECK_EXCEPTION(fake_cuda::host_view(&host, "add"), ValueError, [](const ValueError& e) {
    return std::string(e.what()).starts_with("fake_cuda: add: 0x");
  });
}

BOOST_AUTO_TEST_CASE(a_storage_is_on_the_stream_current_at_its_allocation) {
  const Stream s = new_stream(kFake0);
  Storage on_default(64, kFake0);
  BOOST_TEST(on_default.stream().id == 0u);
  StreamGuard guard(s);
  Storage on_s(64, Device(DeviceType::FakeCUDA));
  BOOST_TEST((on_s.stream() == s));
  BOOST_TEST((on_default.stream() == Stream{kFake0, 0}));
}

BOOST_AUTO_TEST_CASE(resize_keeps_the_common_prefix_on_the_device) {
  const auto bytes = pattern(1000, 3);
  Storage st(1000, kFake0);
  copy_bytes(st.data(), kFake0, bytes.data(), kCPU, 1000);
  st.resize(5000);
  std::vector<unsigned char> back(1000);
  copy_bytes(back.data(), kCPU, st.data(), kFake0, 1000);
  BOOST_TEST((back == bytes));
  st.resize(10);
  copy_bytes(back.data(), kCPU, st.data(), kFake0, 10);
  BOOST_TEST(std::equal(back.begin(), back.begin() + 10, bytes.begin()));
}

// A block used by work on another stream: freed without record_stream it is handed out again at
// once on its own stream (a real use-after-free race while that work waits); with it, the block
// comes back only after the recorded stream's work is done.
struct ReuseSetup {
  static constexpr std::size_t n = 4 * kMiB;  // a 20 MiB segment, split
  Stream home = new_stream(kFake0), other = new_stream(kFake0);
  StreamGuard on_home{home};
  Gate gate;
  void* first = nullptr;
  ReuseSetup() { empty_cache(kFake0); }
  // A block of `home` that queued work on `other` still reads when it is freed.
  void free_while_used_on_other(bool record) {
    Storage a(n, kFake0);
    first = a.data();
    const int* pa = view(a);
    launch(other, gate.waiter());
    launch(other, [pa] { (void)*static_cast<const volatile int*>(pa); });
    if (record) a.record_stream(other);
  }
};

BOOST_AUTO_TEST_CASE(without_record_stream_a_freed_block_is_reused_at_once_on_its_stream) {
  ReuseSetup r;
  r.free_while_used_on_other(false);
  Storage b(ReuseSetup::n, kFake0);
  BOOST_TEST(b.data() == r.first);
  BOOST_TEST(!r.other.query());  // the work reading the old block has not even run
  r.gate.open();
  r.other.synchronize();
}

BOOST_AUTO_TEST_CASE(record_stream_defers_reuse_until_the_recorded_work_is_done) {
  ReuseSetup r;
  r.free_while_used_on_other(true);
  BOOST_TEST(fake_cuda::memory_stats(kFake0).at("active_bytes.all.current") >=
             std::int64_t(ReuseSetup::n));  // freed, still active on `other`
  {
    Storage b(ReuseSetup::n, kFake0);
    BOOST_TEST(b.data() != r.first);
  }
  r.gate.open();
  r.other.synchronize();
  Storage c(ReuseSetup::n, kFake0);
  BOOST_TEST(c.data() == r.first);
}

// Freed on its own stream, a block may still be in use by work queued there; giving its segment
// back to the system waits for the device first, as cudaFree does.
BOOST_AUTO_TEST_CASE(empty_cache_waits_for_the_work_queued_on_the_device) {
  const Stream s = new_stream(kFake0);
  StreamGuard on_s(s);
  Gate gate;
  std::atomic<bool> written{false}, emptied{false};
  {
    Storage a(3 * kMiB, kFake0);
    int* pa = view(a);
    launch(s, gate.waiter());
    launch(s, [pa, &written] {
      pa[1000] = 7;  // the pages must still be there
      written = true;
    });
  }
  const std::int64_t reserved = allocator_stats(kFake0).reserved_bytes;
  std::thread emptier([&] {
    empty_cache(kFake0);
    emptied = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  BOOST_TEST(!emptied.load());  // waiting for s
  gate.open();
  emptier.join();
  BOOST_TEST(written.load());
  BOOST_TEST(allocator_stats(kFake0).reserved_bytes < reserved);
}

BOOST_AUTO_TEST_CASE(a_request_beyond_the_device_is_out_of_memory_naming_the_device) {
  const Device d(DeviceType::FakeCUDA, 4);
  BOOST_CHECK_EXCEPTION(Storage(std::size_t(17) << 30, d), RuntimeError, [](const RuntimeError& e) {
    return std::string(e.what()) ==
           "fake_cuda:4 out of memory. Tried to allocate 17408.00 MiB (a 17408.00 MiB segment); "
           "this allocator has 0.00 MiB allocated and 0.00 MiB reserved";
  });
  BOOST_TEST(allocator_stats(d).num_alloc_retries == 1);
  Storage fits(kMiB, d);  // the device is still usable
  BOOST_TEST(allocator_stats(d).allocated_bytes == std::int64_t(kMiB));
}

BOOST_AUTO_TEST_CASE(statistics_carry_torch_names_per_device) {
  const Device d(DeviceType::FakeCUDA, 3);  // used by no other test
  const std::int64_t before_on_0 = allocator_stats(kFake0).num_allocs;
  {
    Storage a(1000, d), b(3 * kMiB, d);
    const AllocatorStats s = allocator_stats(d);
    BOOST_TEST(s.allocated_bytes == std::int64_t(1024 + 3 * kMiB));
    BOOST_TEST(s.requested_bytes == std::int64_t(1000 + 3 * kMiB));
    BOOST_TEST(s.reserved_bytes == std::int64_t(22 * kMiB));  // a 2 MiB and a 20 MiB segment
    BOOST_TEST(s.num_allocs == 2);
    BOOST_TEST(s.num_system_allocs == 2);
    BOOST_TEST(s.cache_misses == 2);
    BOOST_TEST(s.num_splits == 2);
    const auto t = fake_cuda::memory_stats(d);
    BOOST_TEST(t.at("allocated_bytes.all.current") == std::int64_t(1024 + 3 * kMiB));
    BOOST_TEST(t.at("segment.all.current") == 2);
    BOOST_TEST(t.at("allocation.all.allocated") == 2);
    BOOST_TEST(t.at("num_device_alloc") == 2);
  }
  BOOST_TEST(allocator_stats(kFake0).num_allocs == before_on_0);
  AllocatorStats s = allocator_stats(d);
  BOOST_TEST(s.allocated_bytes == 0);
  BOOST_TEST(s.allocated_bytes_peak == std::int64_t(1024 + 3 * kMiB));
  BOOST_TEST(s.num_frees == 2);
  BOOST_TEST(s.cached_blocks == 2);  // both segments whole again
  BOOST_TEST(fake_cuda::memory_stats(d).at("allocation.all.freed") == 2);
  reset_allocator_peak_stats(d);
  BOOST_TEST(allocator_stats(d).allocated_bytes_peak == 0);
  empty_cache(d);
  s = allocator_stats(d);
  BOOST_TEST(s.reserved_bytes == 0);
  BOOST_TEST(s.num_system_frees == 2);
  {
    Storage again(1000, d);
    BOOST_TEST(allocator_stats(d).cache_hits == 0);  // a fresh segment
  }
  Storage hit(1000, d);
  BOOST_TEST(allocator_stats(d).cache_hits == 1);
}

BOOST_AUTO_TEST_SUITE_END()
