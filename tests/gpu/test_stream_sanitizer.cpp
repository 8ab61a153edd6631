// The stream sanitizer (core/stream_sanitizer.h) on CUDA: the CUDA kernel table, copies and the
// stream backend report to it (each op one item of work on its stream; events and waits by their
// numbers), so a read on one stream of what another stream writes is reported unless an event,
// wait_stream or a host synchronisation orders them, and a storage freed while another stream may
// still read it is reported unless record_stream was called; ops ordered by the stream's own order
// report nothing. The sanitizer reasons about ordering, not timing: an unordered pair is reported
// whether or not it raced. Skips (exit 77) without a device.
#define BOOST_TEST_MODULE gpu_stream_sanitizer
#include <memory>
#include <string>
#include <vector>

#include "core/dispatch/dispatch_mode.h"
#include "core/ops.h"
#include "core/stream.h"
#include "core/stream_sanitizer.h"
#include "core/stream_sanitizer_mode.h"
#include "core/tensor.h"
#include "tests/gpu/gpu_test_support.h"

using namespace fsdp;
namespace san = fsdp::stream_sanitizer;
using fsdp::cuda::testing::RequireDevice;

BOOST_TEST_GLOBAL_FIXTURE(RequireDevice);

namespace {

const Device kCuda0(DeviceType::CUDA, 0);

std::vector<std::string> messages() {
  std::vector<std::string> out;
  for (const auto& r : san::reports()) out.push_back(r.message);
  return out;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string stream_of(const Stream& s) {
  return "stream " + std::to_string(s.id) + " of cuda:0";
}

}  // namespace

// s2 reads what s1 writes (a fill, then a mul): reported with both ops and streams, unless s2
// waits for s1 (wait_stream) or the host synchronised s1 before s2's read was queued.
BOOST_AUTO_TEST_CASE(an_unordered_cross_stream_read_is_reported) {
  for (const std::string how : {"unordered", "wait_stream", "host synchronize"}) {
    BOOST_TEST_CONTEXT(how) {
      san::clear_reports();
      dispatch::ModeGuard mode(std::make_shared<san::StreamSanitizerMode>());
      const Stream s1 = new_stream(kCuda0), s2 = new_stream(kCuda0);
      Tensor x = zeros({4096}, TensorOptions(DType::Float32, kCuda0));
      // The zeros were written on the current stream: both streams wait for them, so the only
      // pair left to order is s1's fill and s2's read.
      s1.wait_stream(current_stream(kCuda0));
      s2.wait_stream(current_stream(kCuda0));
      {
        StreamGuard on(s1);
        x.fill_(1.0);
      }
      if (how == "wait_stream") s2.wait_stream(s1);
      if (how == "host synchronize") s1.synchronize();
      Tensor y;
      {
        StreamGuard on(s2);
        y = mul(x, 2.0);
      }
      device_synchronize(kCuda0);
      const auto got = messages();
      for (const auto& m : got) BOOST_TEST_MESSAGE(m);
      if (how != "unordered") {
        BOOST_TEST(got.empty());
      } else {
        BOOST_TEST_REQUIRE(got.size() == 1u);
        BOOST_TEST(has(got[0], "mul"));
        BOOST_TEST(has(got[0], "reads"));
        BOOST_TEST(has(got[0], "while fill"));
        BOOST_TEST(has(got[0], stream_of(s2) + " reads"));
        BOOST_TEST(has(got[0], stream_of(s1) + " writes"));
      }
    }
  }
}

// A write on s2 of what s1 still reads (a copy into a buffer that s1's op reads): a write against
// a read is a conflict too.
BOOST_AUTO_TEST_CASE(an_unordered_write_after_a_read_is_reported) {
  san::clear_reports();
  dispatch::ModeGuard mode(std::make_shared<san::StreamSanitizerMode>());
  const Stream s1 = new_stream(kCuda0), s2 = new_stream(kCuda0);
  Tensor x = ones({256}, TensorOptions(DType::Float32, kCuda0));
  s1.wait_stream(current_stream(kCuda0));
  s2.wait_stream(current_stream(kCuda0));
  Tensor y;
  {
    StreamGuard on(s1);
    y = add(x, 1.0);
  }
  {
    StreamGuard on(s2);
    x.copy_(zeros({256}, TensorOptions(DType::Float32, kCPU)));
  }
  device_synchronize(kCuda0);
  const auto got = messages();
  for (const auto& m : got) BOOST_TEST_MESSAGE(m);
  BOOST_TEST_REQUIRE(got.size() == 1u);
  BOOST_TEST(has(got[0], stream_of(s2) + " writes"));
  BOOST_TEST(has(got[0], "while add"));
}

// A tensor allocated on the current stream, read on another and freed: without record_stream its
// block could be reused while the read runs.
BOOST_AUTO_TEST_CASE(a_free_without_record_stream_is_reported) {
  for (bool recorded : {false, true}) {
    BOOST_TEST_CONTEXT((recorded ? "record_stream" : "no record_stream")) {
      san::clear_reports();
      dispatch::ModeGuard mode(std::make_shared<san::StreamSanitizerMode>());
      const Stream side = new_stream(kCuda0);
      Tensor y;
      {
        Tensor x = ones({32}, TensorOptions(DType::Float32, kCuda0));
        san::set_owner(x.data_ptr(), 32 * sizeof(float), "the test's buffer x");
        side.wait_stream(current_stream(kCuda0));
        {
          StreamGuard on(side);
          y = mul(x, 3.0);
        }
        if (recorded) x.storage()->record_stream(side);
      }
      device_synchronize(kCuda0);
      const auto got = messages();
      if (recorded) {
        BOOST_TEST(got.empty());
      } else {
        BOOST_TEST_REQUIRE(got.size() == 1u);
        BOOST_TEST(has(got[0], "the test's buffer x freed on stream 0 of cuda:0"));
        BOOST_TEST(has(got[0], "mul"));
      }
    }
  }
}

// A small training loop on one stream (forward, backward, the gradient zeroed, a loss read by the
// host) is in stream order: nothing to report.
BOOST_AUTO_TEST_CASE(work_in_one_stream_s_order_reports_nothing) {
  san::clear_reports();
  dispatch::ModeGuard mode(std::make_shared<san::StreamSanitizerMode>());
  Tensor w = randn({16, 8}, TensorOptions(DType::Float32, kCPU)).to(kCuda0);
  w.requires_grad_();
  const Tensor x = randn({4, 8}, TensorOptions(DType::Float32, kCPU)).to(kCuda0);
  for (int step = 0; step < 2; ++step) {
    const Tensor h = linear(x, w);
    Tensor loss = mul(h, h).mean();
    loss.backward();
    (void)loss.item();
    w.grad().zero_();
  }
  device_synchronize(kCuda0);
  const auto got = messages();
  for (const auto& m : got) BOOST_TEST_MESSAGE(m);
  BOOST_TEST(got.empty());
}
