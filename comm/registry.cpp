#include "comm/registry.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>

#include "comm/builtin_backends.h"
#include "comm/errors.h"
#include "comm/join.h"

namespace fsdp::comm {

namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, BackendFactory> factories;
};

Registry& registry() {
  static Registry r;
  return r;
}

void register_builtins_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_fake_backend();
    register_threads_backend();
#if FSDP_COMM_HAVE_MPI
    register_mpi_backend();
#endif
#if FSDP_COMM_HAVE_GLOO
    register_gloo_backend();
#endif
#if FSDP_COMM_HAVE_NCCL
    register_nccl_backend();
#endif
  });
}

// What to tell a user who asks for a known backend this build left out.
std::string how_to_enable(const std::string& name) {
  if (name == "mpi") return "reconfigure with -Dmpi=enabled (needs OpenMPI: libopenmpi-dev)";
  if (name == "gloo") return "reconfigure with -Dgloo=enabled (needs libgloo-dev and cmake)";
  if (name == "nccl")
    return "reconfigure with -Dnccl=enabled (needs the CUDA toolkit with NCCL; set "
           "-Dnccl_home=PREFIX if it is not found)";
  return {};
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

// An integer environment variable within [lo, hi]: a value out of range (WORLD_SIZE=4294967298)
// or not an integer is refused with its name, never truncated.
std::int64_t env_int(const char* name, std::int64_t fallback, std::int64_t lo, std::int64_t hi) {
  const char* v = env(name);
  if (v == nullptr) return fallback;
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(v, &end, 10);
  if (end == v || *end != '\0')
    throw std::invalid_argument(
        fmt::format("environment variable {}='{}' is not an integer", name, v));
  if (errno == ERANGE || value < lo || value > hi)
    throw std::invalid_argument(fmt::format(
        "environment variable {}='{}' is out of range: expected {} to {}", name, v, lo, hi));
  return value;
}

constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();

}  // namespace

void register_backend(const std::string& name, BackendFactory factory) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  r.factories[name] = std::move(factory);
}

std::vector<std::string> available_backends() {
  register_builtins_once();
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> names;
  for (const char* known : {"fake", "threads", "mpi", "gloo", "nccl"})
    if (r.factories.count(known)) names.push_back(known);
  for (auto& [name, factory] : r.factories)
    if (how_to_enable(name).empty() && name != "fake" && name != "threads") names.push_back(name);
  return names;
}

bool backend_available(const std::string& name) {
  register_builtins_once();
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  return r.factories.count(name) != 0;
}

std::shared_ptr<ProcessGroup> create_process_group(const std::string& backend,
                                                   const InitOptions& options) {
  register_builtins_once();
  BackendFactory factory;
  {
    auto& r = registry();
    std::lock_guard lock(r.mutex);
    auto it = r.factories.find(backend);
    if (it != r.factories.end()) factory = it->second;
  }
  if (!factory) {
    std::string enable = how_to_enable(backend);
    if (!enable.empty())
      throw BackendNotBuiltError(fmt::format("backend '{}' was not built: {}", backend, enable));
    throw std::invalid_argument(fmt::format("unknown communication backend '{}' (built: {})",
                                            backend, join(available_backends())));
  }
  return factory(options);
}

InitOptions options_from_env(InitOptions o) {
  bool under_mpirun = env("OMPI_COMM_WORLD_RANK") != nullptr;
  // Every variable the layer reads, with its range (tests/comm/test_env.cpp).
  const char* rank_var = under_mpirun ? "OMPI_COMM_WORLD_RANK" : "RANK";
  const char* size_var = under_mpirun ? "OMPI_COMM_WORLD_SIZE" : "WORLD_SIZE";
  if (o.rank < 0) o.rank = static_cast<int>(env_int(rank_var, -1, 0, kIntMax - 1));
  if (o.world_size < 0) o.world_size = static_cast<int>(env_int(size_var, -1, 1, kIntMax));
  if (o.rank >= 0 && o.world_size >= 1 && o.rank >= o.world_size)
    throw std::invalid_argument(fmt::format("{}={} is not below {}={}: ranks are 0 to {}", rank_var,
                                            o.rank, size_var, o.world_size, o.world_size - 1));
  if (const char* addr = env("MASTER_ADDR")) o.master_addr = addr;
  o.master_port = static_cast<int>(env_int("MASTER_PORT", o.master_port, 1, 65535));
  if (const char* path = env("FSDP_STORE_PATH")) o.file_store_path = path;
  // Up to a day: a longer wait is a hang.
  if (env("FSDP_TIMEOUT_MS") != nullptr)
    o.timeout = std::chrono::milliseconds(env_int("FSDP_TIMEOUT_MS", 0, 1, 86400000));
  return o;
}

std::shared_ptr<ProcessGroup> init_process_group(const std::string& backend, InitOptions options) {
  return create_process_group(backend, options_from_env(std::move(options)));
}

std::shared_ptr<ProcessGroup> init_from_env(InitOptions defaults) {
  InitOptions o = options_from_env(std::move(defaults));
  std::string backend;
  if (const char* b = env("FSDP_BACKEND")) {
    backend = b;
  } else if (env("OMPI_COMM_WORLD_RANK") != nullptr && backend_available("mpi")) {
    backend = "mpi";
  } else if (env("RANK") != nullptr && env("WORLD_SIZE") != nullptr && backend_available("gloo")) {
    backend = "gloo";
  } else {
    backend = "threads";
    if (o.rank < 0) o.rank = 0;
    if (o.world_size < 0) o.world_size = 1;
  }
  return create_process_group(backend, o);
}

}  // namespace fsdp::comm
