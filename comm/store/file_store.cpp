#include "comm/store/file_store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "comm/errors.h"

namespace fsdp::comm {

namespace fs = std::filesystem;

namespace {
// Keys may hold any character; file names get a hex encoding.
std::string hex(const std::string& s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}
}  // namespace

FileStore::FileStore(std::string directory, std::string prefix, int rank)
    : directory_(std::move(directory)), prefix_(std::move(prefix)) {
  std::error_code ec;
  fs::create_directories(directory_, ec);
  if (!fs::is_directory(directory_))
    throw CommError(fmt::format("file store: cannot use directory '{}': {}", directory_,
                                ec ? ec.message() : "not a directory"));
  if (rank == 0) {
    std::string owner = path_of(".owner");
    int fd = ::open(owner.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (fd < 0 && errno == EEXIST)
      throw CommError(fmt::format(
          "file store path '{}' with group name '{}' is already in use ({} exists: another job "
          "is running there, or an earlier one left it behind). Use a fresh directory or "
          "group_name, or delete the directory's files",
          directory_, prefix_, owner));
    if (fd < 0)
      throw CommError(fmt::format("file store: cannot create {}: {}", owner, std::strerror(errno)));
    ::close(fd);
  }
}

std::string FileStore::describe() const {
  return fmt::format("file store {}", directory_);
}

std::string FileStore::path_of(const std::string& key) const {
  return (fs::path(directory_) / (hex(prefix_) + "-" + hex(key))).string();
}

void FileStore::set(const std::string& key, const std::vector<char>& value) {
  std::string final_path = path_of(key);
  std::string tmp = final_path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(value.data(), std::streamsize(value.size()));
    if (!out) throw CommError(fmt::format("{}: cannot write key '{}' ({})", describe(), key, tmp));
  }
  std::error_code ec;
  fs::rename(tmp, final_path, ec);
  if (ec)
    throw CommError(fmt::format("{}: cannot publish key '{}': {}", describe(), key, ec.message()));
}

bool FileStore::check(const std::vector<std::string>& keys) {
  for (auto& k : keys)
    if (!fs::exists(path_of(k))) return false;
  return true;
}

std::vector<char> FileStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  wait({key}, timeout);
  std::ifstream in(path_of(key), std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace fsdp::comm
