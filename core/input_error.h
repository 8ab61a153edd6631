// The error of a user's input that is not a command line (a model file, a --policy expression, a
// path), in the hierarchy of core/error.h: the policies' parser and the tools throw it.
#pragma once

#include "core/error.h"

namespace fsdp {

// Any problem with the user's input; the message is one line and names the file or the text
// and the place in it. Tools print what() and exit with status 1.
class InputError : public Error {
 public:
  using Error::Error;
};

}  // namespace fsdp
