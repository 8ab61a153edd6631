// Boost.Test is not thread-safe: two rank threads asserting at once race on its checkpoint and
// log state (seen as `basic_string::_M_create` thrown from `set_checkpoint`). Tests that assert
// on rank threads use these wrappers, which serialise the assertions of non-main threads. The
// main thread takes no lock: it only waits while rank threads run, and a lock held there across a
// run of ranks would deadlock them.
//
// An assertion on a rank thread must not run a collective inside its expression: the lock would
// keep the other ranks from joining it. Evaluate first, then assert.
//
// BOOST_TEST_CONTEXT and BOOST_TEST_INFO are the same shared state: on rank threads they freed a
// context string twice (ASan: double-free from a rank thread's refused-load check, about 1 run in
// 60). Code that may run on a rank thread uses TS_CONTEXT instead: it keeps the context in the
// thread's own list, and each TS_ assertion hands it to Boost.Test under the lock.
#pragma once

#include <boost/test/unit_test.hpp>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace fsdp::testing {

inline const std::thread::id kTestMainThread = std::this_thread::get_id();

inline std::unique_lock<std::recursive_mutex> lock_boost_test() {
  static std::recursive_mutex mutex;
  if (std::this_thread::get_id() == kTestMainThread) return {};
  return std::unique_lock<std::recursive_mutex>(mutex);
}

inline thread_local std::vector<std::string> thread_test_context;

// The innermost TS_CONTEXT scopes of this thread, outermost first ("" when none).
inline std::string thread_test_context_text() {
  std::string out;
  for (const auto& c : thread_test_context) out += (out.empty() ? "" : "; ") + c;
  return out;
}

class ThreadTestContext {
 public:
  explicit ThreadTestContext(std::string text) { thread_test_context.push_back(std::move(text)); }
  ~ThreadTestContext() { thread_test_context.pop_back(); }
  ThreadTestContext(const ThreadTestContext&) = delete;
  ThreadTestContext& operator=(const ThreadTestContext&) = delete;
};

}  // namespace fsdp::testing

#define FSDP_TS(...)                                                                  \
  do {                                                                                \
    auto fsdp_ts_lock_ = ::fsdp::testing::lock_boost_test();                          \
    const std::string fsdp_ts_context_ = ::fsdp::testing::thread_test_context_text(); \
    if (fsdp_ts_context_.empty()) {                                                   \
      __VA_ARGS__;                                                                    \
    } else {                                                                          \
      BOOST_TEST_CONTEXT(fsdp_ts_context_) {                                          \
        __VA_ARGS__;                                                                  \
      }                                                                               \
    }                                                                                 \
  } while (0)

// TS_CONTEXT("parameter " << name) { ... }: BOOST_TEST_CONTEXT for code on rank threads.
#define TS_CONTEXT(...)                                       \
  if (::fsdp::testing::ThreadTestContext fsdp_ts_scope_{[&] { \
        std::ostringstream fsdp_ts_text_;                     \
        fsdp_ts_text_ << __VA_ARGS__;                         \
        return fsdp_ts_text_.str();                           \
      }()};                                                   \
      true)

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
