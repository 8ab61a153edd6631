// Streams and events on the CPU (one stream, work inline, events complete at once) and the
// per-thread current stream that StreamGuard sets and restores.
#include <boost/test/unit_test.hpp>
#include <thread>
#include <vector>

#include "core/memory.h"
#include "core/stream.h"

using namespace fsdp;

BOOST_AUTO_TEST_SUITE(cpu_streams)

BOOST_AUTO_TEST_CASE(cpu_work_runs_inline_and_events_complete_at_once) {
  const Stream s = current_stream(kCPU);
  BOOST_TEST((s == Stream{kCPU, 0}));
  BOOST_TEST((new_stream(kCPU) == s));  // the CPU has one stream
  std::vector<int> order;
  launch(s, [&] { order.push_back(1); });
  order.push_back(2);
  BOOST_TEST(order == std::vector<int>({1, 2}));
  Event e;
  BOOST_TEST(!e.recorded());
  BOOST_TEST(e.query());  // never recorded: complete
  e.record();
  BOOST_TEST(e.recorded());
  BOOST_TEST(e.query());
  e.synchronize();
  e.block(s);
  s.wait_event(e);
  s.wait_stream(s);
  BOOST_TEST(s.query());
  s.synchronize();
  device_synchronize(kCPU);
}

BOOST_AUTO_TEST_CASE(cpu_storage_is_on_the_default_stream_and_record_stream_is_a_no_op) {
  Storage st(100, kCPU);
  BOOST_TEST((st.stream() == Stream{kCPU, 0}));
  st.record_stream(current_stream(kCPU));
  BOOST_CHECK_EXCEPTION(st.record_stream(Stream{Device(DeviceType::FakeCUDA, 0), 1}), ValueError,
                        [](const ValueError& e) {
                          return std::string(e.what()) ==
                                 "record_stream: a storage of cpu cannot be recorded on stream 1 "
                                 "of fake_cuda:0";
                        });
}

BOOST_AUTO_TEST_CASE(the_current_stream_is_per_thread_and_per_device_and_guards_restore_it) {
  const Device d0(DeviceType::FakeCUDA, 0), d1(DeviceType::FakeCUDA, 1);
  const Stream s{d0, 5};
  BOOST_TEST(current_stream(d0).id == 0u);
  {
    StreamGuard guard(s);
    BOOST_TEST((current_stream(d0) == s));
    BOOST_TEST((current_stream(Device(DeviceType::FakeCUDA)) == s));  // "fake_cuda" is :0
    BOOST_TEST(current_stream(d1).id == 0u);
    std::uint64_t seen = 99;
    std::thread([&] { seen = current_stream(d0).id; }).join();
    BOOST_TEST(seen == 0u);
    {
      StreamGuard inner(Stream{d0, 7});
      BOOST_TEST(current_stream(d0).id == 7u);
    }
    BOOST_TEST(current_stream(d0).id == 5u);
  }
  BOOST_TEST(current_stream(d0).id == 0u);
  BOOST_CHECK_EXCEPTION(current_stream(Device(DeviceType::FakeCUDA, 16)), ValueError,
                        [](const ValueError& e) {
                          return std::string(e.what()) ==
                                 "fake_cuda:16: device index out of range (this build supports "
                                 "indices 0 to 15)";
                        });
}

BOOST_AUTO_TEST_SUITE_END()
