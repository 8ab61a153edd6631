#include "core/blas_kernels.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "core/env.h"

extern "C" char* openblas_get_corename(void);
extern "C" void openblas_set_num_threads(int);

namespace fsdp {

std::optional<std::string> better_openblas_coretype(const std::string& chosen, bool avx512f,
                                                    bool avx2_fma) {
  std::string name = chosen;
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  // The generic x86-64 fallbacks of a DYNAMIC_ARCH build, older than AVX2.
  const bool generic = name == "prescott" || name == "core2" || name == "nehalem" ||
                       name == "katmai" || name == "northwood" || name == "penryn" ||
                       name == "dunnington" || name == "atom" || name == "barcelona";
  if (!generic) return std::nullopt;
  if (avx512f) return "SkylakeX";
  if (avx2_fma) return "Haswell";
  return std::nullopt;
}

void select_blas_kernels(char** argv) {
  if (env::raw("OPENBLAS_CORETYPE") || !env::enabled("FSDP_BLAS_AUTOSELECT")) return;
  const char* chosen = openblas_get_corename();
  if (chosen == nullptr) return;
  __builtin_cpu_init();
  const auto better =
      better_openblas_coretype(chosen, __builtin_cpu_supports("avx512f"),
                               __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
  if (!better) return;
  // The resolved path, not /proc/self/exe: the process keeps its name (ps, pgrep, mpirun logs).
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return;
  path[n] = '\0';
  setenv("OPENBLAS_CORETYPE", better->c_str(), 1);
  execv(path, argv);
  unsetenv("OPENBLAS_CORETYPE");  // exec failed: run on with OpenBLAS's own choice
}

void set_blas_threads(int threads) {
  openblas_set_num_threads(threads);
}

}  // namespace fsdp
