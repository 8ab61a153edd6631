// The error of a command line (the tools' and the example jobs' flags), in the hierarchy of
// core/error.h.
#pragma once

#include <string>

#include "core/error.h"

namespace fsdp {

// A command line a tool cannot run with (an unknown option, a value out of range): the tool
// prints what() on stderr and exits with exit_code(), 2 unless the parser says otherwise.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& what, int exit_code = 2)
      : Error(what), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

}  // namespace fsdp
