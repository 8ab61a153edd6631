// The comm layer's environment: the launcher's variables (RANK, WORLD_SIZE, mpirun's), the
// rendezvous and the backends' switches, as typed values. Each variable is declared (name,
// default, range, meaning) in the one table of core/env.cpp and parsed there; the accessors below
// add only the checks of form that belong to comm (a host name, an interface name). A value of
// the wrong form or out of range is refused with an EnvError naming the variable, the value and
// what is accepted. An unset or empty variable means "not given".
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/env.h"

namespace fsdp::comm {

// A bad environment value (core/env.h): a ValueError, so one catch of fsdp::Error handles it.
using EnvError = fsdp::EnvError;

namespace env {

// The one table of every knob, comm's among them (docs/environment.md is made from it).
using fsdp::env::Knob;
using fsdp::env::knobs;

// --- launcher ----------------------------------------------------------------------------------
// True under mpirun (OMPI_COMM_WORLD_RANK is set): ranks come from OMPI_COMM_WORLD_RANK/SIZE.
bool under_mpirun();
// This rank and the world size from RANK/WORLD_SIZE (torchrun's names), or OMPI_COMM_WORLD_RANK/
// SIZE under mpirun; rank 0..2^31-2, world size 1..2^31-1, rank below the world size.
std::optional<int> rank();
std::optional<int> world_size();
const char* rank_variable();
const char* world_size_variable();

// --- rendezvous --------------------------------------------------------------------------------
std::optional<std::string> master_addr();  // MASTER_ADDR: a host name or IPv4 address
std::optional<int> master_port();          // MASTER_PORT: 1..65535
std::optional<std::string> store_path();   // FSDP_STORE_PATH: a directory shared by the ranks
std::optional<std::string> mpirun_job();   // PMIX_NAMESPACE: the mpirun job, keys file stores

// --- behaviour ---------------------------------------------------------------------------------
std::optional<std::chrono::milliseconds> timeout();  // FSDP_TIMEOUT_MS: 1..86400000 (a day)
std::optional<std::string> backend();                // FSDP_BACKEND: a backend name ([a-z0-9_]+)
// gloo: the address this rank's TCP pairs bind to (FSDP_GLOO_HOSTNAME), or the network interface
// (FSDP_GLOO_IFNAME, else PyTorch's GLOO_SOCKET_IFNAME: a name of 1 to 15 characters).
std::optional<std::string> gloo_hostname();
std::optional<std::string> gloo_ifname();
const char* gloo_ifname_variable();  // the one of the two that is set
bool mpi_direct();                   // FSDP_MPI_DIRECT: 1 (default) or 0
bool gloo_direct();                  // FSDP_GLOO_DIRECT: 1 (default) or 0

// --- parsing (core/env.h), for the accessors above and the tests --------------------------------
using fsdp::env::raw;  // the variable's value; nullopt when unset or empty
// A declared Integer knob within its declared range and within [lo, hi].
std::optional<std::int64_t> integer(const char* name, std::int64_t lo, std::int64_t hi);

}  // namespace env
}  // namespace fsdp::comm
