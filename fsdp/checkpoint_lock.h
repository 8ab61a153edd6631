// One writer per checkpoint directory: DIR/.lock holds "<host> <pid>" of the job that writes
// there, created exclusively (O_EXCL) when the job starts and removed when it ends, so that a
// second job on the same directory fails at its start, naming the first, instead of both writing
// and pruning each other's checkpoints. A lock left by a job that died (its pid no longer alive
// on this host) is taken over; one from another host is never presumed dead.
#pragma once

#include <string>

namespace fsdp {

inline constexpr const char* kCheckpointLockFile = ".lock";

class CheckpointDirLock {
 public:
  // Creates `dir` (and its parents) and the lock file. RuntimeError naming the other job's host
  // and pid when the lock is held, or naming the directory when it cannot be created or written.
  // A stale lock is taken over and `*takeover` (when given) says whose it was; else it is cleared.
  explicit CheckpointDirLock(const std::string& dir, std::string* takeover = nullptr);
  ~CheckpointDirLock();  // removes the lock file
  CheckpointDirLock(const CheckpointDirLock&) = delete;
  CheckpointDirLock& operator=(const CheckpointDirLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// This host's name, as a lock file records it.
std::string lock_host_name();

}  // namespace fsdp
