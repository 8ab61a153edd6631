#include "comm/mpi/stop_report.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <string_view>

#include "comm/mpi/launcher_loss.h"
#include "core/env.h"

namespace fsdp::comm::mpi {

namespace {

// One slot per thread waiting in a collective (groups may run theirs on their own threads).
constexpr int kSlots = 16;
std::atomic<const StopReportScope::Note*> g_notes[kSlots];
std::atomic<pid_t> g_launcher{0};  // this rank's parent under mpirun (mpirun or its orted)
std::atomic<int> g_world_rank{-1}, g_world_size{0};

// Text built in a fixed buffer: a signal handler may not allocate or call fmt.
struct Line {
  char text[1024];
  std::size_t size = 0;
  void add(std::string_view s) {
    for (char ch : s)
      if (size < sizeof text - 1) text[size++] = ch;
  }
  void add(long long v) {
    char digits[24];
    int n = 0;
    unsigned long long u = v < 0 ? 0ULL - static_cast<unsigned long long>(v) : v;
    do digits[n++] = char('0' + u % 10);
    while ((u /= 10) != 0);
    if (v < 0) add("-");
    while (n > 0) add(std::string_view(&digits[--n], 1));
  }
};

// Not a signal: PMIx's word that the launcher's server is gone (launcher_loss.h).
constexpr int kLauncherLost = -1;

void add_launcher_died(Line& l) {
  l.add(": its launcher (pid ");
  l.add(g_launcher.load());
  l.add(", the job's PMIx store) died, so the job cannot go on");
}

void add_cause(Line& l, int sig) {
  if (sig == kLauncherLost) {
    l.add(" is being ended by Open MPI");
    add_launcher_died(l);
    return;
  }
  if (sig == SIGCONT) {
    // Open MPI's launcher ends its ranks with SIGCONT, a second later SIGTERM, and SIGKILL a few
    // milliseconds after that: too soon for a SIGTERM handler on a busy machine, so the report
    // is written at the first step.
    l.add(
        " is being ended by mpirun (signal 18, SIGCONT, the first of its SIGCONT, SIGTERM, "
        "SIGKILL: its way to end the job after a rank failed or when it is interrupted; its "
        "report names that rank)");
    return;
  }
  l.add(" ended by signal ");
  l.add(sig);
  if (sig == SIGHUP) {
    // PR_SET_PDEATHSIG: the launcher, whose PMIx server is the job's key-value store, is gone.
    add_launcher_died(l);
  } else {
    l.add(" (mpirun's way to end the job after a rank failed; its report names that rank)");
  }
}

void report(const StopReportScope::Note& n, int sig) {
  Line l;
  const ProcessGroup& g = *n.group;
  l.add("mpi rank ");
  l.add(g.rank());
  l.add("/");
  l.add(g.size());
  if (g.world_rank(g.rank()) != g.rank()) {
    l.add(" (world rank ");
    l.add(g.world_rank(g.rank()));
    l.add(")");
  }
  l.add(": ");
  l.add(collective_name(n.collective->kind));
  l.add("(count=");
  l.add(static_cast<long long>(n.collective->count));
  l.add(", dtype=");
  l.add(dtype_name(n.collective->dtype));
  l.add(")");
  add_cause(l, sig);
  // The ranks: those of the phase being waited for, else every other rank of the group.
  std::vector<int> none;
  const std::vector<int>& peers = n.peers ? *n.peers : none;
  const int count = n.peers ? int(peers.size()) : g.size();
  auto peer = [&](int i) { return n.peers ? peers[std::size_t(i)] : i; };
  auto listed = [&](int i) {
    if (!n.peers && i == g.rank()) return false;
    for (int j = 0; j < i; ++j)
      if (peer(j) == peer(i)) return false;
    return true;
  };
  if (n.phase) {
    l.add(" in its ");
    l.add(n.phase);
    l.add(", exchanging with rank(s) ");
  } else {
    l.add(" between its exchanges, exchanging with rank(s) ");  // every other rank of the group
  }
  bool first = true, world_differs = false;
  for (int i = 0; i < count; ++i) {
    if (!listed(i)) continue;
    l.add(first ? "" : ", ");
    l.add(peer(i));
    first = false;
    world_differs = world_differs || g.world_rank(peer(i)) != peer(i);
  }
  if (world_differs) {
    l.add(" (world ranks");
    first = true;
    for (int i = 0; i < count; ++i) {
      if (!listed(i)) continue;
      l.add(first ? " " : ", ");
      l.add(g.world_rank(peer(i)));
      first = false;
    }
    l.add(")");
  }
  l.add("\n");
  [[maybe_unused]] auto written = ::write(STDERR_FILENO, l.text, l.size);
}

std::atomic<bool> g_reported{false};  // a SIGCONT from the launcher already wrote the report
std::atomic<bool> g_written{false};   // ... and it is written

// Reports every wait in progress or, with none, that the rank is between collectives.
void report_all(int sig) {
  bool reported = false;
  for (auto& slot : g_notes) {
    const StopReportScope::Note* n = slot.load();
    if (n == nullptr) continue;
    // A whole collective is reported only when none of its waits is.
    bool waiting = false;
    for (auto& other : g_notes) {
      const StopReportScope::Note* o = other.load();
      waiting = waiting || (o && o != n && o->collective == n->collective && o->phase);
    }
    if (n->phase || !waiting) report(*n, sig);
    reported = true;
  }
  if (!reported && g_world_rank.load() >= 0) {
    Line l;
    l.add("mpi rank ");
    l.add(g_world_rank.load());
    l.add("/");
    l.add(g_world_size.load());
    l.add(":");
    add_cause(l, sig);
    l.add(" between collectives\n");
    [[maybe_unused]] auto written = ::write(STDERR_FILENO, l.text, l.size);
  }
  g_written = true;
}

// Waits (bounded: 2 s) for the report another thread is writing: the rank must not end before it.
void await_report() {
  for (int i = 0; i < 2000 && !g_written.load(); ++i) ::usleep(1000);
}

void on_stop_signal(int sig) {
  // The report may be another thread's already: PMIx's, at the launcher's loss, which the
  // SIGHUP of the same death can follow by microseconds (raising the signal there ended the rank
  // before that report was written: a rank silent about 1 trial in 100).
  if (!g_reported.exchange(true))
    report_all(sig);
  else
    await_report();
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

// SIGCONT from the launcher, which sends none otherwise (mpirun forwards a user's SIGCONT only
// with orte_forward_job_control, when this handler is not installed): the job is being ended.
void on_launcher_cont(int, siginfo_t* info, void*) {
  if (info == nullptr || info->si_pid != g_launcher.load() || g_reported.exchange(true)) return;
  report_all(SIGCONT);
}

// PMIx's handler (launcher_loss.h): Open MPI ends the rank right after. When the SIGHUP's
// handler is writing the report already, Open MPI must not end the rank before it is written:
// wait for it (bounded; that handler ends the rank when done).
void on_launcher_lost() {
  if (!g_reported.exchange(true))
    report_all(kLauncherLost);
  else
    await_report();
}

// Installs the report for `sig` if the program left it at its default action.
bool handle(int sig) {
  struct sigaction current {};
  if (sigaction(sig, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) return false;
  std::signal(sig, on_stop_signal);
  return true;
}

}  // namespace

void set_stop_report_world(int rank, int size) {
  g_world_size = size;
  g_world_rank = rank;
}

void install_stop_report(bool under_launcher) {
  // A peer that dies leaves its TCP connections reset: Open MPI's next write to one must fail
  // (EPIPE), not end this rank silently with SIGPIPE before it can report (as gloo's backend).
  struct sigaction pipe {};
  if (sigaction(SIGPIPE, nullptr, &pipe) == 0 && pipe.sa_handler == SIG_DFL)
    std::signal(SIGPIPE, SIG_IGN);
  handle(SIGTERM);
  // Open MPI ends a rank whose launcher died without a word (exit code 195, when PMIx loses its
  // server): a SIGHUP from the kernel at the parent's death lets the rank say so first (a rank
  // under mpirun has no terminal to hang up; SIGTERM would not tell the two cases apart).
  if (!under_launcher || !handle(SIGHUP)) return;
  g_launcher = ::getppid();
  struct sigaction cont {};
  const auto forward = ::fsdp::env::raw("OMPI_MCA_orte_forward_job_control");
  const bool forwarded = forward && *forward != "0" && *forward != "false";
  if (!forwarded && sigaction(SIGCONT, nullptr, &cont) == 0 && cont.sa_handler == SIG_DFL) {
    cont.sa_sigaction = on_launcher_cont;
    cont.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&cont.sa_mask);
    sigaction(SIGCONT, &cont, nullptr);
  }
  ::prctl(PR_SET_PDEATHSIG, SIGHUP);
  if (::getppid() != g_launcher.load()) std::raise(SIGHUP);  // it died before the prctl
  // The SIGHUP may come after Open MPI has ended the rank for the same loss: PMIx's handler
  // comes first where there is one.
  watch_launcher_loss(on_launcher_lost);
}

void finish_stop_report() {
  unwatch_launcher_loss();
}

StopReportScope::StopReportScope(const ProcessGroup& group, const Collective& c, const char* phase,
                                 const std::vector<int>& peers)
    : note_{&group, &c, phase, &peers} {
  publish();
}

StopReportScope::StopReportScope(const ProcessGroup& group, const Collective& c)
    : note_{&group, &c, nullptr, nullptr} {
  publish();
}

void StopReportScope::publish() {
  for (int i = 0; i < kSlots && slot_ < 0; ++i) {
    const Note* empty = nullptr;
    if (g_notes[i].compare_exchange_strong(empty, &note_)) slot_ = i;
  }
}

StopReportScope::~StopReportScope() {
  if (slot_ >= 0) g_notes[slot_].store(nullptr);
}

}  // namespace fsdp::comm::mpi
