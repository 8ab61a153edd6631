#include "core/cuda/cublaslt_library.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/error.h"

// The build passes the directory its libcublasLt came from (core/cuda/meson.build).
#ifndef FSDP_CUBLASLT_DIR
#define FSDP_CUBLASLT_DIR ""
#endif

namespace fsdp::cuda {

namespace {

const std::string kSoname = fmt::format("libcublasLt.so.{}", CUBLAS_VER_MAJOR);

// The handle and the path it was opened by.
std::pair<void*, std::string> open_first(const std::vector<std::string>& paths) {
  std::string tried;
  for (const std::string& path : paths) {
    if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return {handle, path};
    const char* why = dlerror();
    tried += fmt::format("{}{} ({})", tried.empty() ? "" : "; ", path, why ? why : "unknown");
  }
  throw RuntimeError(fmt::format(
      "cuBLASLt: cannot load {}, which the CUDA device's matrix products need: {}; put its "
      "directory on LD_LIBRARY_PATH or configure with -Dcublas_home",
      kSoname, tried.empty() ? "no path given" : tried));
}

// The loader's search first (LD_LIBRARY_PATH, the program's RUNPATH, ld.so.cache: so that
// tests/gpu/emulation's twin takes its place), then the build's directory.
std::vector<std::string> default_paths() {
  std::vector<std::string> paths{kSoname};
  if (const std::string dir = FSDP_CUBLASLT_DIR; !dir.empty()) paths.push_back(dir + "/" + kSoname);
  return paths;
}

}  // namespace

// The handle is never closed: the table's pointers are into it.
CublasLt load_cublaslt(const std::vector<std::string>& paths) {
  const auto [handle, path] = open_first(paths);
  CublasLt lt;
  const auto resolve = [&](auto& field, const char* name) {
    void* symbol = dlsym(handle, name);
    FSDP_CHECK(symbol != nullptr, RuntimeError, "cuBLASLt: {} has no function {}", path, name);
    field = reinterpret_cast<std::remove_reference_t<decltype(field)>>(symbol);
  };
#define FSDP_CUBLASLT_RESOLVE(name) resolve(lt.name, #name);
  FSDP_CUBLASLT_FUNCTIONS(FSDP_CUBLASLT_RESOLVE)
#undef FSDP_CUBLASLT_RESOLVE
  return lt;
}

const CublasLt& cublaslt() {
  static const CublasLt lt = load_cublaslt(default_paths());
  return lt;
}

// cublasLtGetStatusName/String cover the cuBLAS and cuBLASLt status codes alike.
void check_status(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const CublasLt& lt = cublaslt();
  throw_cuda_error(lt.cublasLtGetStatusName(status), lt.cublasLtGetStatusString(status), call, file,
                   line);
}

}  // namespace fsdp::cuda
