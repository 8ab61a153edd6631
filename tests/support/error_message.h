// The message of the error `fn` throws (of type E, fsdp::Error by default), or "no error": lets a
// test assert a message exactly, BOOST_TEST(error_message([] { ... }) == "...").
#pragma once

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

}  // namespace fsdp::testing
