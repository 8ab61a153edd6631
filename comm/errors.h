// Exceptions thrown by the communication layer. Every message names the backend, the collective,
// the rank and the world size, so that a log line from one rank of many is self-explanatory.
#pragma once

#include "core/error.h"

namespace fsdp::comm {

// Any failure of a collective or of a backend (I/O, library error, peer failure). An
// fsdp::Error, so that one catch handles the library's errors of every layer.
class CommError : public fsdp::Error {
 public:
  using fsdp::Error::Error;
};

// A peer did not arrive (or did not finish) within the configured timeout.
class CommTimeoutError : public CommError {
 public:
  using CommError::CommError;
};

// Ranks called the same collective with different counts, dtypes, ops or roots.
class CommMismatchError : public CommError {
 public:
  using CommError::CommError;
};

// Another rank of the group failed, so this group can no longer make progress.
class CommAbortedError : public CommError {
 public:
  using CommError::CommError;
};

// The requested backend was not compiled in (the message names the Meson option to enable it).
class BackendNotBuiltError : public CommError {
 public:
  using CommError::CommError;
};

// A collective was asked of a group that cannot run it (FakeProcessGroup with size > 1): a
// NotImplementedError, as torch's fake group raises for data it cannot produce.
class UnsupportedCollectiveError : public fsdp::NotImplementedError {
 public:
  using fsdp::NotImplementedError::NotImplementedError;
};

}  // namespace fsdp::comm
