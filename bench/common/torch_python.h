// Which python runs the PyTorch baselines: the first of the candidates that imports torch, with
// torch's version, so every benchmark compares against the same (current) PyTorch and says which.
// /opt/torch2 is a venv with a current torch (bench/core/README.md); Debian's python3-torch 1.13
// is about 3x slower on this CPU and only a fallback.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace fsdp::bench {

inline const std::vector<std::string>& default_torch_pythons() {
  static const std::vector<std::string> pythons{"/opt/torch2/bin/python", "/usr/bin/python3"};
  return pythons;
}

// The command's standard output (empty when it cannot start).
inline std::string run_command(const std::string& cmd) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  if (!pipe) return {};
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe.get())) out += buf;
  return out;
}

struct TorchPython {
  std::string python;   // empty: no candidate imports torch
  std::string version;  // torch.__version__
};

inline TorchPython find_torch_python(const std::vector<std::string>& candidates) {
  for (const auto& py : candidates) {
    std::string v =
        run_command("'" + py + "' -c 'import torch; print(torch.__version__)' 2>/dev/null");
    while (!v.empty() && (v.back() == '\n' || v.back() == '\r')) v.pop_back();
    if (!v.empty()) return {py, v};
  }
  return {};
}

// Says on stdout when the baseline is an old PyTorch or missing (the preferred one is first).
inline void warn_unless_preferred(const TorchPython& found, const std::string& preferred) {
  if (found.python.empty()) {
    std::printf("(PyTorch baseline unavailable: no python among the candidates imports torch)\n");
  } else if (found.python != preferred) {
    std::printf(
        "*** WARNING: %s cannot import torch; comparing with %s (torch %s), an OLD PyTorch\n"
        "*** about 3x slower than current releases on this CPU. Make a venv with a current\n"
        "*** torch (bench/core/README.md) for a meaningful baseline.\n",
        preferred.c_str(), found.python.c_str(), found.version.c_str());
  }
}

}  // namespace fsdp::bench
