// Internal to comm/mpi: hearing that the launcher (mpirun, the job's PMIx server) is gone before
// Open MPI ends the rank for it.
//
// When mpirun dies, each rank's PMIx client sees its server connection close and raises
// PMIX_ERR_LOST_CONNECTION; Open MPI's handler for it ends the rank at once with `_exit(195)`
// (-61, the status), so neither atexit nor the SIGHUP of PR_SET_PDEATHSIG (sent by the kernel
// after the dying launcher's sockets are closed) is sure to run first: on a loaded machine about
// one rank in 30 vanished without its report (netns_storedies_mpi_np3). A handler registered
// with PMIX_EVENT_HDLR_FIRST runs before Open MPI's, which then ends the rank as before.
#pragma once

namespace fsdp::comm::mpi {

// Calls `on_loss` (from PMIx's progress thread; it must not return to a collective) when the
// connection to the launcher's PMIx server is lost. Call after MPI_Init. False, and nothing
// registered, without PMIx (a build without it, or a rank not started by a PMIx launcher).
bool watch_launcher_loss(void (*on_loss)());

// Deregisters the handler and releases PMIx (before MPI_Finalize); nothing if none was set.
void unwatch_launcher_loss();

}  // namespace fsdp::comm::mpi
