// Warnings: a sink that prints to stderr by default and that a scope can capture, the C++
// counterpart of Python's warnings.catch_warnings(record=True) / assertWarnsRegex.
// Capture is per thread (a rank running as a thread captures its own warnings).
#pragma once

#include <string>
#include <vector>

namespace fsdp {

struct Warning {
  std::string category;  // "UserWarning", "FutureWarning", ...
  std::string message;
};

// Emit a warning: recorded by the innermost WarningCapture of this thread, else printed to stderr
// as "CATEGORY: message".
void warn(const std::string& message, const std::string& category = "UserWarning");

// While alive, records this thread's warnings instead of printing them.
class WarningCapture {
 public:
  WarningCapture();
  ~WarningCapture();
  WarningCapture(const WarningCapture&) = delete;
  WarningCapture& operator=(const WarningCapture&) = delete;

  const std::vector<Warning>& warnings() const { return warnings_; }
  // True if some recorded warning's message contains `needle`.
  bool contains(const std::string& needle) const;
  void clear() { warnings_.clear(); }

 private:
  friend void warn(const std::string&, const std::string&);
  std::vector<Warning> warnings_;
  WarningCapture* outer_;
};

}  // namespace fsdp
