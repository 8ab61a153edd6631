#include "comm/registry.h"

#include <fmt/format.h>

#include <map>
#include <mutex>

#include "comm/builtin_backends.h"
#include "comm/env.h"
#include "comm/errors.h"
#include "comm/join.h"
#include "core/error.h"

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
    for (const auto& b : builtin_backends())
      if (b.register_backend) b.register_backend();
  });
}

// What to tell a user who asks for a known backend this build left out ("" for other names).
std::string how_to_enable(const std::string& name) {
  for (const auto& b : builtin_backends())
    if (name == b.name) return b.how_to_enable;
  return {};
}

// Whether `name` is one of the built-in backends (compiled in or not).
bool builtin(const std::string& name) {
  for (const auto& b : builtin_backends())
    if (name == b.name) return true;
  return false;
}

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
  for (const auto& b : builtin_backends())
    if (r.factories.count(b.name)) names.push_back(b.name);
  for (auto& [name, factory] : r.factories)  // registered by the application, after the table
    if (!builtin(name)) names.push_back(name);
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
    throw ValueError(fmt::format("unknown communication backend '{}' (built: {})", backend,
                                 join(available_backends())));
  }
  return factory(options);
}

InitOptions options_from_env(InitOptions o) {
  // Every variable is parsed and range-checked in comm/env.cpp (tests/comm/test_env.cpp).
  const auto env_rank = env::rank();
  const auto env_world_size = env::world_size();
  // A launcher sets both; one alone (and not given in the options) would run as a world of one
  // rank, or wait for ranks that never come.
  if (env_rank.has_value() != env_world_size.has_value() &&
      (env_rank ? o.world_size < 0 : o.rank < 0))
    throw EnvError(fmt::format("{} is set but {} is not: a launcher sets both (or neither)",
                               env_rank ? env::rank_variable() : env::world_size_variable(),
                               env_rank ? env::world_size_variable() : env::rank_variable()));
  if (o.rank < 0) o.rank = env_rank.value_or(-1);
  if (o.world_size < 0) o.world_size = env_world_size.value_or(-1);
  if (o.rank >= 0 && o.world_size >= 1 && o.rank >= o.world_size)
    throw EnvError(fmt::format("{}={} is not below {}={}: ranks are 0 to {}", env::rank_variable(),
                               o.rank, env::world_size_variable(), o.world_size, o.world_size - 1));
  if (auto addr = env::master_addr()) o.master_addr = *addr;
  o.master_port = env::master_port().value_or(o.master_port);
  if (auto path = env::store_path()) o.file_store_path = *path;
  o.timeout = env::timeout().value_or(o.timeout);
  return o;
}

std::shared_ptr<ProcessGroup> init_process_group(const std::string& backend, InitOptions options) {
  return create_process_group(backend, options_from_env(std::move(options)));
}

std::shared_ptr<ProcessGroup> init_from_env(InitOptions defaults) {
  InitOptions o = options_from_env(std::move(defaults));
  std::string backend;
  if (auto chosen = env::backend()) {
    backend = *chosen;
    if (!backend_available(backend) && how_to_enable(backend).empty())
      throw EnvError(
          fmt::format("environment variable FSDP_BACKEND='{}' is not a backend "
                      "(built: {})",
                      backend, join(available_backends())));
  } else if (env::under_mpirun() && backend_available("mpi")) {
    backend = "mpi";
  } else if (env::raw("RANK") && env::raw("WORLD_SIZE") && backend_available("gloo")) {
    backend = "gloo";
  } else {
    backend = "threads";
    if (o.rank < 0) o.rank = 0;
    if (o.world_size < 0) o.world_size = 1;
  }
  return create_process_group(backend, o);
}

}  // namespace fsdp::comm
