// The stream sanitizer's hooks for a backend that numbers its events, not its items (CUDA's):
// each on_work is one item; an event is known by its number, which maps to the item it follows.
// Called directly on stream keys of cuda:0, so no device is needed.
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "core/stream.h"
#include "core/stream_sanitizer.h"

using namespace fsdp;
namespace san = fsdp::stream_sanitizer;

namespace {

const Device kCuda0(DeviceType::CUDA, 0);
const Stream s1{kCuda0, 1}, s2{kCuda0, 2};
float buffer[64];  // the addresses the accesses name

std::vector<san::Access> writes() {
  return {{buffer, sizeof buffer, true}};
}
std::vector<san::Access> reads() {
  return {{buffer, sizeof buffer, false}};
}

std::vector<std::string> reported() {
  std::vector<std::string> out;
  for (const auto& r : san::reports()) out.push_back(r.message);
  san::clear_reports();
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(stream_sanitizer_sequences)

BOOST_AUTO_TEST_CASE(an_unordered_read_of_another_stream_s_write_is_reported) {
  san::Enable on;
  san::clear_reports();
  san::on_work(s1, "fill", writes());
  san::on_work(s2, "mul", reads());
  const auto got = reported();
  BOOST_TEST_REQUIRE(got.size() == 1u);
  BOOST_TEST(got[0].find("mul on stream 2 of cuda:0 reads") != std::string::npos, got[0]);
  BOOST_TEST(got[0].find("while fill on stream 1 of cuda:0 writes") != std::string::npos, got[0]);
}

BOOST_AUTO_TEST_CASE(an_event_recorded_after_the_write_orders_the_waiter) {
  san::Enable on;
  san::clear_reports();
  san::on_work(s1, "fill", writes());
  san::on_record_sequence(s1, 1);
  san::on_wait_sequence(s2, s1, 1);
  san::on_work(s2, "mul", reads());
  BOOST_TEST(reported().empty());
}

BOOST_AUTO_TEST_CASE(an_event_recorded_before_the_write_does_not) {
  san::Enable on;
  san::clear_reports();
  san::on_record_sequence(s1, 1);  // before any work: it follows no item
  san::on_work(s1, "fill", writes());
  san::on_record_sequence(s1, 2);  // after it, but not the one waited for
  san::on_wait_sequence(s2, s1, 1);
  san::on_work(s2, "mul", reads());
  BOOST_TEST(reported().size() == 1u);
}

BOOST_AUTO_TEST_CASE(a_host_wait_for_the_event_orders_work_queued_after_it) {
  san::Enable on;
  san::clear_reports();
  san::on_work(s1, "fill", writes());
  san::on_record_sequence(s1, 1);
  san::on_synchronize_sequence(s1, 1);
  san::on_work(s2, "mul", reads());
  BOOST_TEST(reported().empty());
}

BOOST_AUTO_TEST_CASE(an_event_recorded_while_the_sanitizer_was_off_orders_nothing) {
  san::on_record_sequence(s1, 7);  // off: forgotten
  san::Enable on;
  san::clear_reports();
  san::on_work(s1, "fill", writes());
  san::on_wait_sequence(s2, s1, 7);
  san::on_work(s2, "mul", reads());
  BOOST_TEST(reported().size() == 1u);
}

// Work queued inside an item already reported (a kernel table family's copies) is that item.
BOOST_AUTO_TEST_CASE(work_within_a_reported_item_reports_nothing_more) {
  san::Enable on;
  san::clear_reports();
  san::on_work(s1, "fill", writes());
  {
    const san::WithinWork whole;
    san::on_work(s2, "copy on the device", reads());  // would conflict with the fill
  }
  BOOST_TEST(reported().empty());
  san::on_work(s2, "mul", reads());  // after the scope: reported again
  BOOST_TEST(reported().size() == 1u);
}

BOOST_AUTO_TEST_SUITE_END()
