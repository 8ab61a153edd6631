// Internal to comm/mpi: what a rank says when mpirun ends it mid-collective.
//
// mpirun ends every rank when one of them dies: SIGCONT, a second later SIGTERM, and SIGKILL a
// few milliseconds after that (measured with the kernel's signal trace; on a loaded machine a
// SIGTERM handler is often not scheduled in time). A rank blocked in a collective writes, from
// the handler of its launcher's SIGCONT (or of SIGTERM, when that comes first), which collective
// it was in and with which ranks, and dies of the signals as before (issue 12: the survivors
// vanished without a word). The collective's own loop cannot say it: after a peer hangs up, Open
// MPI's TCP transport may block inside MPI_Testall until the end (it waits for mpirun to take a
// help message). When the launcher itself dies (the job's store: its PMIx server), the rank says so
// the same way.
#pragma once

#include <vector>

#include "comm/collective.h"
#include "comm/process_group.h"

namespace fsdp::comm::mpi {

// The world rank and size, for a report outside any collective.
void set_stop_report_world(int rank, int size);

// Ignores SIGPIPE if the program left it at its default action (a dead peer's reset connection
// must not end this rank silently). Installs the SIGTERM handler once, if the program left
// SIGTERM at its default action; under mpirun also the handler of the launcher's SIGCONT; under
// mpirun (`under_launcher`) the rank also gets SIGHUP, reported the same way, when its launcher
// dies (PR_SET_PDEATHSIG).
// Under mpirun it also hears PMIx's word that the launcher's server is gone, which Open MPI acts
// on first (launcher_loss.h).
void install_stop_report(bool under_launcher);

// Before MPI_Finalize: stops listening to PMIx (nothing if it did not).
void finish_stop_report();

// While it lives, the handler reports this wait: the group, the collective, the phase and the
// ranks it exchanges with (group ranks; `peers` must outlive the scope, duplicates allowed).
class StopReportScope {
 public:
  StopReportScope(const ProcessGroup& group, const Collective& c, const char* phase,
                  const std::vector<int>& peers);
  // The whole collective: reported when no wait of it is (between its phases, say).
  StopReportScope(const ProcessGroup& group, const Collective& c);
  ~StopReportScope();
  StopReportScope(const StopReportScope&) = delete;
  StopReportScope& operator=(const StopReportScope&) = delete;

  struct Note {
    const ProcessGroup* group;
    const Collective* collective;
    const char* phase;              // null: the whole collective
    const std::vector<int>* peers;  // null: the whole collective
  };

 private:
  void publish();

  Note note_;
  int slot_ = -1;  // -1: every slot was taken (more concurrent waits than slots): not reported
};

}  // namespace fsdp::comm::mpi
