// The command-line fuzzers' input: bytes split on NUL or newline into arguments after a program
// name, as a shell would pass them (argv[argc] is null).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fsdp::fuzz {

class FuzzArgv {
 public:
  FuzzArgv(const char* program, const std::uint8_t* data, std::size_t size) {
    args_.emplace_back(program);
    std::string arg;
    for (std::size_t i = 0; i < size; ++i) {
      const char c = static_cast<char>(data[i]);
      if (c == '\0' || c == '\n') {
        args_.push_back(arg);
        arg.clear();
      } else {
        arg += c;
      }
    }
    if (!arg.empty()) args_.push_back(arg);
    for (const auto& a : args_) ptrs_.push_back(a.c_str());
    ptrs_.push_back(nullptr);
  }
  int argc() const { return static_cast<int>(args_.size()); }
  const char* const* argv() const { return ptrs_.data(); }

 private:
  std::vector<std::string> args_;
  std::vector<const char*> ptrs_;
};

}  // namespace fsdp::fuzz
