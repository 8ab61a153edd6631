// FSDP's stream protocol pieces that need no ops (fsdp/streams.h): the free-event queue
// (limit_all_gathers), the root's streams on the cpu and on fake_cuda, the unshard streams
// waiting for the compute stream, and exposed communication on an accelerator (a stream's stall
// waiting for a collective, timed on the device). Built with the fake_cuda test device.
#define BOOST_TEST_MODULE fsdp_streams
#include <atomic>
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <future>
#include <thread>

#include "comm/work.h"
#include "core/stream.h"
#include "fsdp/comm_scheduler.h"
#include "fsdp/streams.h"
#include "tests/support/gate.h"

using namespace fsdp;

namespace {

const Device kFake0(DeviceType::FakeCUDA, 0);

using fsdp::testing::Gate;  // tests/support/gate.h

}  // namespace

BOOST_AUTO_TEST_CASE(free_event_queue_hands_out_the_oldest_once_two_are_queued) {
  const Stream s = new_stream(kFake0);
  FreeEventQueue queue;  // upstream's _max_num_inflight_all_gathers: 2
  BOOST_TEST(!queue.dequeue_if_needed().has_value());
  Event first(kFake0), second(kFake0), third(kFake0);
  launch(s, [] {});
  first.record(s);
  queue.enqueue(first);
  BOOST_TEST(!queue.dequeue_if_needed().has_value());  // one in flight: no wait
  launch(s, [] {});
  second.record(s);
  queue.enqueue(second);
  std::optional<Event> oldest = queue.dequeue_if_needed();
  BOOST_REQUIRE(oldest.has_value());
  BOOST_TEST(oldest->sequence() == first.sequence());
  BOOST_TEST(queue.size() == 1u);
  BOOST_TEST(!queue.dequeue_if_needed().has_value());
  launch(s, [] {});
  third.record(s);
  queue.enqueue(third);
  oldest = queue.dequeue_if_needed();
  BOOST_REQUIRE(oldest.has_value());
  BOOST_TEST(oldest->sequence() == second.sequence());
  s.synchronize();
}

// What the runtime does with the event it gets: the host waits for the device's work before
// that reshard, here held back by a gate.
BOOST_AUTO_TEST_CASE(the_host_waits_for_the_oldest_free_event) {
  const Stream compute = new_stream(kFake0);
  FreeEventQueue queue(1);
  Gate gate;
  launch(compute, gate.waiter());
  Event freed(kFake0);
  freed.record(compute);
  queue.enqueue(freed);
  std::optional<Event> wait_for = queue.dequeue_if_needed();
  BOOST_REQUIRE(wait_for.has_value());
  BOOST_TEST(!wait_for->query());
  auto waited = std::async(std::launch::async, [&] { wait_for->synchronize(); });
  BOOST_TEST((waited.wait_for(std::chrono::milliseconds(50)) == std::future_status::timeout));
  gate.open();
  waited.get();
  BOOST_TEST(wait_for->query());
}

BOOST_AUTO_TEST_CASE(root_streams_on_the_cpu_are_its_one_stream) {
  const RootStreams s = RootStreams::for_device(kCPU);
  BOOST_TEST(!s.on_accelerator());
  const Stream cpu = current_stream(kCPU);
  BOOST_TEST((s.unshard == cpu && s.post_backward == cpu && s.pre_unshard == cpu));
  BOOST_TEST((s.compute() == cpu));
  s.wait_for_compute();  // nothing to order
}

BOOST_AUTO_TEST_CASE(root_streams_on_fake_cuda_are_three_streams_beside_compute) {
  const RootStreams s = RootStreams::for_device(Device(DeviceType::FakeCUDA));
  BOOST_TEST(s.on_accelerator());
  BOOST_TEST(s.device.str() == "fake_cuda:0");  // the current device, made explicit
  for (const Stream& x : {s.unshard, s.post_backward, s.pre_unshard}) {
    BOOST_TEST((x.device == kFake0));
    BOOST_TEST(x.id != 0u);  // never the default (compute) stream
  }
  BOOST_TEST(s.unshard.id != s.post_backward.id);
  BOOST_TEST(s.unshard.id != s.pre_unshard.id);
  BOOST_TEST(s.post_backward.id != s.pre_unshard.id);
  BOOST_TEST((s.compute() == default_stream(kFake0)));
}

// wait_for_compute: an all-gather or cast queued afterwards runs after the compute stream's work
// so far (the optimizer's step writing the shards).
BOOST_AUTO_TEST_CASE(unshard_streams_wait_for_the_compute_stream) {
  const RootStreams s = RootStreams::for_device(kFake0);
  Gate gate;
  launch(s.compute(), gate.waiter());
  s.wait_for_compute();
  Event gathered(kFake0), cast(kFake0);
  launch(s.unshard, [] {});
  gathered.record(s.unshard);
  launch(s.pre_unshard, [] {});
  cast.record(s.pre_unshard);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  BOOST_TEST(!gathered.query());
  BOOST_TEST(!cast.query());
  gate.open();
  gathered.synchronize();
  cast.synchronize();
  device_synchronize(kFake0);
}

// The runtime's wait for an all-gather on an accelerator: the compute stream waits on the device
// (the host goes on while the collective is held), and the stall, from the compute stream
// reaching the wait to the collective's end, is its exposed communication.
BOOST_AUTO_TEST_CASE(a_stream_stalled_by_a_collective_counts_it_as_exposed_communication) {
  const Stream collective = new_stream(kFake0), compute = new_stream(kFake0);
  Gate gate;
  launch(collective, gate.waiter());
  Event done(kFake0);
  done.record(collective);
  comm::StreamWork work(done);
  CommScheduler comm;
  comm.stream_wait(work, compute);  // returns with the collective held: no host wait
  std::atomic<bool> ran{false};
  launch(compute, [&ran] { ran = true; });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  BOOST_TEST(!ran.load());  // the compute stream waits
  gate.open();
  compute.synchronize();
  BOOST_TEST(ran.load());
  const double exposed = comm.blocked_seconds();
  BOOST_TEST(exposed >= 0.05);  // held 100 ms after the compute stream reached the wait
  BOOST_TEST(exposed < 10.0);
}

// A collective done before the stream reaches its wait is hidden: no stall, however long the
// stream's own work before the wait.
BOOST_AUTO_TEST_CASE(a_collective_done_before_the_stream_reaches_the_wait_is_not_exposed) {
  const Stream collective = new_stream(kFake0), compute = new_stream(kFake0);
  Event done(kFake0);
  done.record(collective);  // nothing queued: done at once
  launch(compute, [] { std::this_thread::sleep_for(std::chrono::milliseconds(100)); });
  comm::StreamWork work(done);
  CommScheduler comm;
  comm.stream_wait(work, compute);
  compute.synchronize();
  BOOST_TEST(comm.blocked_seconds() < 0.05);
}

// The final callback's wait of the compute stream for the post-backward stream (the last
// reductions) counts the same way; a reset drops stalls queued before it.
BOOST_AUTO_TEST_CASE(a_wait_for_another_stream_is_timed_and_a_reset_drops_earlier_stalls) {
  const Stream post_backward = new_stream(kFake0), compute = new_stream(kFake0);
  CommScheduler comm;
  Gate first;
  launch(post_backward, first.waiter());
  comm.stream_wait(post_backward, compute);
  comm.reset_blocked_seconds();  // the stall above belongs to the period before
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  first.open();
  compute.synchronize();
  BOOST_TEST(comm.blocked_seconds() == 0.0);
  Gate second;
  launch(post_backward, second.waiter());
  comm.stream_wait(post_backward, compute);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  second.open();
  BOOST_TEST(comm.blocked_seconds() >= 0.05);  // waits for the marks itself
}
