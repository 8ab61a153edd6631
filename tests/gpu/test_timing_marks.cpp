// gpu_runtime, continued: core/stream_timing.h on cuda. Timing events, so a mark's time is the
// device's when the stream reaches it (here a host function holds the stream 50 ms between two
// marks); marks of different devices refuse to be compared.
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/stream.h"
#include "core/stream_timing.h"

// fsdp::Stream spelled out: in a unity build, test_runtime.cpp before this uses fsdp::cuda too.
using namespace fsdp;

BOOST_AUTO_TEST_CASE(timing_marks_on_a_cuda_stream_time_the_device) {
  const fsdp::Stream s = new_stream(Device(DeviceType::CUDA, 0));
  std::unique_ptr<TimingMark> before = timing_mark(s);
  launch(s, [] { std::this_thread::sleep_for(std::chrono::milliseconds(50)); });
  std::unique_ptr<TimingMark> after = timing_mark(s);
  const double seconds = after->seconds_since(*before);
  BOOST_TEST(after->done());
  BOOST_TEST(seconds >= 0.045);
  BOOST_TEST(seconds < 10.0);
  std::unique_ptr<TimingMark> on_cpu = timing_mark(fsdp::Stream{kCPU, 0});
  BOOST_CHECK_EXCEPTION(after->seconds_since(*on_cpu), ValueError, [](const ValueError& e) {
    return std::string(e.what()) == "timing marks: seconds_since needs an earlier mark of cuda:0";
  });
}
