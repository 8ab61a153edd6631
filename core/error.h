// The exception hierarchy. Names follow Python's so that messages ported from PyTorch keep their
// category (tests match ValueError vs AssertionError as upstream's assertRaisesRegex does).
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace fsdp {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
class ValueError : public Error {
 public:
  using Error::Error;
};
class TypeError : public Error {
 public:
  using Error::Error;
};
class RuntimeError : public Error {
 public:
  using Error::Error;
};
class AssertionError : public Error {
 public:
  using Error::Error;
};
class NotImplementedError : public Error {
 public:
  using Error::Error;
};
class IndexError : public Error {
 public:
  using Error::Error;
};
class KeyError : public Error {
 public:
  using Error::Error;
};

// FSDP_CHECK(cond, ErrorType, "fmt {}", args...): throw ErrorType with a formatted message.
#define FSDP_CHECK(cond, ErrorType, ...)                      \
  do {                                                        \
    if (!(cond)) throw ErrorType(::fmt::format(__VA_ARGS__)); \
  } while (0)

}  // namespace fsdp
