#include "core/warnings.h"

#include <cstdio>
#include <mutex>

namespace fsdp {

namespace {
thread_local WarningCapture* t_capture = nullptr;
std::mutex g_stderr_mutex;
}  // namespace

WarningCapture::WarningCapture() : outer_(t_capture) {
  t_capture = this;
}
WarningCapture::~WarningCapture() {
  t_capture = outer_;
}

bool WarningCapture::contains(const std::string& needle) const {
  for (const auto& w : warnings_)
    if (w.message.find(needle) != std::string::npos) return true;
  return false;
}

void warn(const std::string& message, const std::string& category) {
  if (t_capture) {
    t_capture->warnings_.push_back({category, message});
    return;
  }
  std::lock_guard<std::mutex> lock(g_stderr_mutex);
  std::fprintf(stderr, "%s: %s\n", category.c_str(), message.c_str());
}

}  // namespace fsdp
