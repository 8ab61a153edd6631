// The message of the error `fn` throws (of type E, fsdp::Error by default), or "no error": lets a
// test assert a message exactly, BOOST_TEST(error_message([] { ... }) == "..."); message_has for
// BOOST_CHECK_EXCEPTION's predicates.
#pragma once

#include <exception>
#include <string>

#include "core/error.h"

namespace fsdp::testing {

template <typename E = Error, typename F>
std::string error_message(F&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return "no error";
}

// Whether the error's message contains `needle`.
inline bool message_has(const std::exception& e, const std::string& needle) {
  return std::string(e.what()).find(needle) != std::string::npos;
}

}  // namespace fsdp::testing
