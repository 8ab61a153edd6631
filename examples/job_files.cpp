#include "examples/job_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>

#include "core/error.h"

namespace fsdp::examples {

namespace {

// Closes the descriptor on every path out, exceptions included.
struct Descriptor {
  int fd;
  ~Descriptor() {
    if (fd >= 0) ::close(fd);
  }
};

// What a non-regular file is, for the message ("a FIFO").
const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

void require_regular(const char* option, const std::string& path, const struct stat& st) {
  if (S_ISDIR(st.st_mode)) throw ValueError(fmt::format("{}: '{}' is a directory", option, path));
  FSDP_CHECK(S_ISREG(st.st_mode), ValueError, "{}: '{}' is {}, not a regular file", option, path,
             file_kind(st.st_mode));
}

}  // namespace

std::string read_data_file(const char* option, const std::string& path) {
  // O_NONBLOCK: opening a FIFO with no writer returns at once (then refused) instead of waiting.
  Descriptor f{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
  FSDP_CHECK(f.fd >= 0, ValueError, "{}: cannot open '{}': {}", option, path, std::strerror(errno));
  struct stat st {};
  FSDP_CHECK(::fstat(f.fd, &st) == 0, ValueError, "{}: cannot stat '{}': {}", option, path,
             std::strerror(errno));
  require_regular(option, path, st);
  const auto size = static_cast<std::size_t>(st.st_size);
  std::string bytes;
  try {
    bytes.resize(size);
  } catch (const std::exception&) {  // bad_alloc, or length_error beyond max_size()
    throw ValueError(fmt::format("{}: '{}' has {} bytes, more than this process can hold in memory",
                                 option, path, size));
  }
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(f.fd, bytes.data() + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    FSDP_CHECK(n >= 0, ValueError, "{}: reading '{}' failed after {} of {} bytes: {}", option, path,
               done, size, std::strerror(errno));
    FSDP_CHECK(n > 0, ValueError,
               "{}: '{}' ended after {} of its {} bytes (did it change while being read?)", option,
               path, done, size);
    done += static_cast<std::size_t>(n);
  }
  return bytes;
}

void check_writable_file(const char* option, const std::string& path) {
  struct stat before {};
  const bool existed = ::stat(path.c_str(), &before) == 0;
  // O_NONBLOCK: an existing FIFO without a reader fails at once instead of waiting.
  Descriptor f{::open(path.c_str(), O_WRONLY | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0666)};
  FSDP_CHECK(f.fd >= 0, ValueError, "{}: cannot write '{}': {}", option, path,
             std::strerror(errno));
  struct stat st {};
  FSDP_CHECK(::fstat(f.fd, &st) == 0, ValueError, "{}: cannot stat '{}': {}", option, path,
             std::strerror(errno));
  require_regular(option, path, st);
  if (!existed) ::unlink(path.c_str());
}

}  // namespace fsdp::examples
