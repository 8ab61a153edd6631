// A fresh directory under the system's temporary directory for one test, removed with its
// contents when the object goes.
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>

namespace fsdp::testing {

struct TempDir {
  std::filesystem::path dir;
  TempDir() {
    static std::atomic<int> counter{0};
    dir = std::filesystem::temp_directory_path() /
          ("fsdp_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path(const std::string& name) const { return (dir / name).string(); }
};

}  // namespace fsdp::testing
