#include "fsdp/checkpoint_lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace fsdp {

namespace fs = std::filesystem;

std::string lock_host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown-host";
  return name;
}

namespace {

// Creates `path` holding "<host> <pid>"; false when it exists.
bool create_lock(const std::string& path, const std::string& dir) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0 && errno == EEXIST) return false;
  FSDP_CHECK(fd >= 0, RuntimeError, "checkpoint directory '{}': cannot create the lock file {}: {}",
             dir, path, std::strerror(errno));
  const std::string text = fmt::format("{} {}\n", lock_host_name(), ::getpid());
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    ::unlink(path.c_str());
    throw RuntimeError(fmt::format("checkpoint directory '{}': cannot write the lock file {}: {}",
                                   dir, path, n < 0 ? std::strerror(err) : "short write"));
  }
  return true;
}

}  // namespace

CheckpointDirLock::CheckpointDirLock(const std::string& dir, std::string* takeover) {
  if (takeover) takeover->clear();
  std::error_code ec;
  FSDP_CHECK(!fs::exists(dir, ec) || fs::is_directory(dir, ec), RuntimeError,
             "checkpoint directory '{}' exists and is not a directory", dir);
  fs::create_directories(dir, ec);
  FSDP_CHECK(!ec, RuntimeError, "checkpoint directory '{}': cannot create the directory: {}", dir,
             ec.message());
  path_ = (fs::path(dir) / kCheckpointLockFile).string();
  if (create_lock(path_, dir)) return;
  // Held: by whom?
  std::ifstream in(path_);
  std::string host;
  long pid = 0;
  std::string line;
  std::getline(in, line);
  std::istringstream fields(line);
  const bool parsed = static_cast<bool>(fields >> host >> pid) && pid > 0;
  FSDP_CHECK(
      parsed, RuntimeError,
      "checkpoint directory '{}' is locked by {}, which does not name a host and a pid: if no "
      "job writes there, remove it",
      dir, path_);
  const bool alive = ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH;
  FSDP_CHECK(host != lock_host_name() || alive == false, RuntimeError,
             "checkpoint directory '{}' is in use by another job (host {}, pid {}; lock file {})",
             dir, host, pid, path_);
  FSDP_CHECK(
      host == lock_host_name(), RuntimeError,
      "checkpoint directory '{}' is in use by another job (host {}, pid {}; lock file {}): if "
      "that job has ended, remove the lock file",
      dir, host, pid, path_);
  // Its job is gone: take the lock over.
  ::unlink(path_.c_str());
  FSDP_CHECK(create_lock(path_, dir), RuntimeError,
             "checkpoint directory '{}': another job took the stale lock {} at the same time", dir,
             path_);
  if (takeover)
    *takeover = fmt::format(
        "took over the lock {} of pid {} on this host, which is no longer "
        "running",
        path_, pid);
}

CheckpointDirLock::~CheckpointDirLock() {
  ::unlink(path_.c_str());
}

}  // namespace fsdp
