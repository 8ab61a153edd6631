// Starting a thread where the system may refuse one (the per-user process limit, the address
// space): the refusal becomes one clear RuntimeError naming what could not start, instead of a
// std::system_error escaping into a vector of joinable threads (std::terminate, SIGABRT).
#pragma once

#include <fmt/format.h>

#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "core/error.h"

namespace fsdp {

// "cannot start <what>: Resource temporarily unavailable (the per-user process limit?)".
template <class F>
std::thread start_thread(const std::string& what, F&& body) {
  try {
    return std::thread(std::forward<F>(body));
  } catch (const std::system_error& e) {
    const bool limit = e.code() == std::errc::resource_unavailable_try_again;
    throw RuntimeError(fmt::format("cannot start {}: {}{}", what, e.code().message(),
                                   limit ? " (the per-user process limit?)" : ""));
  }
}

}  // namespace fsdp
