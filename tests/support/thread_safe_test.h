// Boost.Test is not thread-safe: two rank threads asserting at once race on its checkpoint and
// log state (seen as `basic_string::_M_create` thrown from `set_checkpoint`). Tests that assert
// on rank threads use these wrappers, which serialise the assertions of non-main threads. The
// main thread takes no lock: it only waits while rank threads run, and a lock held there across a
// run of ranks would deadlock them.
//
// An assertion on a rank thread must not run a collective inside its expression: the lock would
// keep the other ranks from joining it. Evaluate first, then assert.
#pragma once

#include <boost/test/unit_test.hpp>
#include <mutex>
#include <thread>

namespace fsdp::testing {

inline const std::thread::id kTestMainThread = std::this_thread::get_id();

inline std::unique_lock<std::recursive_mutex> lock_boost_test() {
  static std::recursive_mutex mutex;
  if (std::this_thread::get_id() == kTestMainThread) return {};
  return std::unique_lock<std::recursive_mutex>(mutex);
}

}  // namespace fsdp::testing

#define FSDP_TS(...)                                         \
  do {                                                       \
    auto fsdp_ts_lock_ = ::fsdp::testing::lock_boost_test(); \
    __VA_ARGS__;                                             \
  } while (0)

#define TS_TEST(...) FSDP_TS(BOOST_TEST(__VA_ARGS__))
#define TS_TEST_REQUIRE(...) FSDP_TS(BOOST_TEST_REQUIRE(__VA_ARGS__))
#define TS_TEST_MESSAGE(...) FSDP_TS(BOOST_TEST_MESSAGE(__VA_ARGS__))
#define TS_CHECK_EQUAL(...) FSDP_TS(BOOST_CHECK_EQUAL(__VA_ARGS__))
#define TS_REQUIRE(...) FSDP_TS(BOOST_REQUIRE(__VA_ARGS__))
#define TS_REQUIRE_EQUAL(...) FSDP_TS(BOOST_REQUIRE_EQUAL(__VA_ARGS__))
#define TS_ERROR(...) FSDP_TS(BOOST_ERROR(__VA_ARGS__))
#define TS_FAIL(...) FSDP_TS(BOOST_FAIL(__VA_ARGS__))
#define TS_CHECK_THROW(...) FSDP_TS(BOOST_CHECK_THROW(__VA_ARGS__))
#define TS_CHECK_EXCEPTION(...) FSDP_TS(BOOST_CHECK_EXCEPTION(__VA_ARGS__))
