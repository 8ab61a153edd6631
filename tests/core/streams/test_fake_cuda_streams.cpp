// fake_cuda's streams: work runs on worker threads in order and asynchronously to the host;
// events order work across streams; a missing wait is a real race (the reader sees the old
// value) while with the wait it is correct; a failing item is reported at the next synchronising
// call; streams come from a pool of 32 per device.
#include <boost/test/unit_test.hpp>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/stream.h"
#include "tests/core/streams/fake_cuda_test_util.h"

using namespace fsdp;
using namespace fsdp::testing;

BOOST_AUTO_TEST_SUITE(fake_cuda_streams)

BOOST_AUTO_TEST_CASE(work_runs_in_order_asynchronously_to_the_host) {
  const Stream s = new_stream(kFake0);
  BOOST_TEST(s.id >= 1u);
  Gate gate;
  std::vector<int> order;  // written by the worker, read after synchronize
  launch(s, gate.waiter());
  launch(s, [&] { order.push_back(1); });
  launch(s, [&] { order.push_back(2); });
  Event e;
  e.record(s);
  BOOST_TEST(!s.query());
  BOOST_TEST(!e.query());
  gate.open();
  e.synchronize();
  BOOST_TEST(e.query());
  BOOST_TEST(s.query());
  BOOST_TEST(order == std::vector<int>({1, 2}));
}

// s1 writes x after the gate opens; s2 reads it. With s2 waiting on s1's event, s2 reads the new
// value; without, s2 runs (and the host sees its result) while s1 is still held: the old value.
struct RaceSetup {
  Stream s1 = new_stream(kFake0), s2 = new_stream(kFake0);
  std::unique_ptr<Storage> x;
  int seen = -1;
  Gate gate;
  RaceSetup() {
    StreamGuard on_s1(s1);
    x = device_int(0);
    s1.synchronize();
    int* px = view(*x);
    launch(s1, gate.waiter());
    launch(s1, [px] { *px = 1; });
  }
  void read_on_s2() {
    const int* px = view(*x);
    launch(s2, [px, this] { seen = *px; });
  }
};

BOOST_AUTO_TEST_CASE(an_event_orders_work_across_streams) {
  RaceSetup r;
  Event written;
  written.record(r.s1);
  r.s2.wait_event(written);
  r.read_on_s2();
  BOOST_TEST(!r.s2.query());  // waiting for s1
  r.gate.open();
  r.s2.synchronize();
  BOOST_TEST(r.seen == 1);
}

BOOST_AUTO_TEST_CASE(wait_stream_orders_work_across_streams) {
  RaceSetup r;
  r.s2.wait_stream(r.s1);
  r.read_on_s2();
  r.gate.open();
  r.s2.synchronize();
  BOOST_TEST(r.seen == 1);
}

BOOST_AUTO_TEST_CASE(without_the_wait_the_reader_sees_the_old_value) {
  RaceSetup r;
  r.read_on_s2();
  r.s2.synchronize();  // returns although s1 has not written yet
  BOOST_TEST(r.seen == 0);
  BOOST_TEST(!r.s1.query());
  r.gate.open();
  StreamGuard on_s1(r.s1);
  BOOST_TEST(read_int(*r.x) == 1);
}

BOOST_AUTO_TEST_CASE(device_synchronize_waits_for_every_stream) {
  const Stream a = new_stream(kFake0), b = new_stream(kFake0);
  Gate gate;
  std::mutex m;
  int done = 0;
  for (const Stream& s : {a, b}) {
    launch(s, gate.waiter());
    launch(s, [&] {
      std::lock_guard lock(m);
      ++done;
    });
  }
  gate.open();
  device_synchronize(kFake0);
  std::lock_guard lock(m);
  BOOST_TEST(done == 2);
}

BOOST_AUTO_TEST_CASE(a_failing_item_is_reported_once_at_the_next_synchronising_call) {
  const Stream s = new_stream(kFake0);
  launch(s, [] { throw ValueError("boom"); });
  int after = 0;
  launch(s, [&] { after = 1; });  // the stream goes on
  const std::string expected =
      "fake_cuda:0: work queued on stream " + std::to_string(s.id) + " failed: boom";
  BOOST_CHECK_EXCEPTION(s.synchronize(), RuntimeError,
                        [&](const RuntimeError& e) { return e.what() == expected; });
  BOOST_TEST(after == 1);
  s.synchronize();  // reported: forgotten
  launch(s, [] { throw ValueError("again"); });
  BOOST_CHECK_THROW(device_synchronize(kFake0), RuntimeError);
  launch(s, [] { throw ValueError("in a copy"); });
  StreamGuard on_s(s);
  auto x = device_int(5);
  BOOST_CHECK_EXCEPTION(read_int(*x), RuntimeError, [&](const RuntimeError& e) {
    return std::string(e.what()).ends_with("failed: in a copy");
  });
}

BOOST_AUTO_TEST_CASE(new_stream_hands_out_a_pool_of_32_round_robin) {
  const Device d(DeviceType::FakeCUDA, 2);
  std::vector<std::uint64_t> ids;
  for (int i = 0; i < 33; ++i) ids.push_back(new_stream(d).id);
  BOOST_TEST(ids.front() == 1u);
  BOOST_TEST(ids[31] == 32u);
  BOOST_TEST(ids[32] == 1u);
  BOOST_TEST((new_stream(Device(DeviceType::FakeCUDA)).device == kFake0));
  BOOST_CHECK_EXCEPTION(launch(Stream{kFake0, 33}, [] {}), ValueError, [](const ValueError& e) {
    return std::string(e.what()) ==
           "fake_cuda:0: no stream 33 (new_stream gives ids 1 to 32; 0 is the default stream)";
  });
}

BOOST_AUTO_TEST_CASE(an_event_cannot_order_a_stream_of_another_device_type) {
  Event e;
  e.record(new_stream(kFake0));
  BOOST_CHECK_EXCEPTION(e.block(current_stream(kCPU)), ValueError, [&](const ValueError& err) {
    return std::string(err.what()) ==
           "Event::block: an event of fake_cuda:0 cannot order stream 0 of cpu";
  });
}

BOOST_AUTO_TEST_SUITE_END()
