// Backends by name: "fake", "threads", "mpi", "gloo", "nccl". Each backend compiled in registers
// a factory here; asking for one that was not built names the Meson option that enables it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/init_options.h"
#include "comm/process_group.h"

namespace fsdp::comm {

using BackendFactory = std::function<std::shared_ptr<ProcessGroup>(const InitOptions&)>;

// Adds (or replaces) a backend; the built-in ones are registered before first use.
void register_backend(const std::string& name, BackendFactory factory);

// Names of the backends this build can create, in a stable order.
std::vector<std::string> available_backends();
bool backend_available(const std::string& name);

// Creates a group of `backend`; throws BackendNotBuiltError for a known backend that was not
// compiled in, fsdp::ValueError for an unknown name.
std::shared_ptr<ProcessGroup> create_process_group(const std::string& backend,
                                                   const InitOptions& options);

// create_process_group after filling rank/world_size (and the store address) from the
// environment where options leave them unset (-1). Same as init_from_env for the default group.
std::shared_ptr<ProcessGroup> init_process_group(const std::string& backend,
                                                 InitOptions options = {});

// The environment a launcher sets: OMPI_COMM_WORLD_RANK/SIZE under mpirun, else RANK/WORLD_SIZE
// and MASTER_ADDR/MASTER_PORT (torchrun's names), FSDP_STORE_PATH for a file store,
// FSDP_TIMEOUT_MS for the timeout. Returns `defaults` with what was found filled in.
InitOptions options_from_env(InitOptions defaults = {});

// Backend from FSDP_BACKEND; else "mpi" under mpirun (when built); else "gloo" when RANK and
// WORLD_SIZE are set (when built); else a single-rank "threads" group.
std::shared_ptr<ProcessGroup> init_from_env(InitOptions defaults = {});

}  // namespace fsdp::comm
