#include "comm/mpi/stop_report.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <string_view>

namespace fsdp::comm::mpi {

namespace {

// One slot per thread waiting in a collective (groups may run theirs on their own threads).
constexpr int kSlots = 16;
std::atomic<const StopReportScope::Note*> g_notes[kSlots];
std::atomic<pid_t> g_launcher{0};  // this rank's parent under mpirun (mpirun or its orted)

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
  if (sig == SIGHUP) {
    // PR_SET_PDEATHSIG: the launcher, whose PMIx server is the job's key-value store, is gone.
    l.add(") ended by signal ");
    l.add(sig);
    l.add(": its launcher (pid ");
    l.add(g_launcher.load());
    l.add(", the job's PMIx store) died, so the job cannot go on; it was in its ");
  } else {
    l.add(") ended by signal ");
    l.add(sig);
    l.add(" (mpirun's way to end the job after a rank failed; its report names that rank) in its ");
  }
  l.add(n.phase);
  l.add(", exchanging with rank(s) ");
  const std::vector<int>& peers = *n.peers;
  bool world_differs = false;
  for (std::size_t i = 0; i < peers.size(); ++i) {
    bool seen = false;
    for (std::size_t j = 0; j < i; ++j) seen = seen || peers[j] == peers[i];
    if (seen) continue;
    if (l.text[l.size - 1] != ' ') l.add(", ");
    l.add(peers[i]);
    world_differs = world_differs || g.world_rank(peers[i]) != peers[i];
  }
  if (world_differs) {
    l.add(" (world ranks");
    for (std::size_t i = 0; i < peers.size(); ++i) {
      bool seen = false;
      for (std::size_t j = 0; j < i; ++j) seen = seen || peers[j] == peers[i];
      if (seen) continue;
      l.add(i == 0 ? " " : ", ");
      l.add(g.world_rank(peers[i]));
    }
    l.add(")");
  }
  l.add("\n");
  [[maybe_unused]] auto written = ::write(STDERR_FILENO, l.text, l.size);
}

void on_stop_signal(int sig) {
  for (auto& slot : g_notes)
    if (const StopReportScope::Note* n = slot.load()) report(*n, sig);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

// Installs the report for `sig` if the program left it at its default action.
bool handle(int sig) {
  struct sigaction current {};
  if (sigaction(sig, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) return false;
  std::signal(sig, on_stop_signal);
  return true;
}

}  // namespace

void install_stop_report(bool under_launcher) {
  handle(SIGTERM);
  // Open MPI ends a rank whose launcher died without a word (exit code 195, when PMIx loses its
  // server): a SIGHUP from the kernel at the parent's death lets the rank say so first (a rank
  // under mpirun has no terminal to hang up; SIGTERM would not tell the two cases apart).
  if (!under_launcher || !handle(SIGHUP)) return;
  g_launcher = ::getppid();
  ::prctl(PR_SET_PDEATHSIG, SIGHUP);
  if (::getppid() != g_launcher.load()) std::raise(SIGHUP);  // it died before the prctl
}

StopReportScope::StopReportScope(const ProcessGroup& group, const Collective& c, const char* phase,
                                 const std::vector<int>& peers)
    : note_{&group, &c, phase, &peers} {
  for (int i = 0; i < kSlots && slot_ < 0; ++i) {
    const Note* empty = nullptr;
    if (g_notes[i].compare_exchange_strong(empty, &note_)) slot_ = i;
  }
}

StopReportScope::~StopReportScope() {
  if (slot_ >= 0) g_notes[slot_].store(nullptr);
}

}  // namespace fsdp::comm::mpi
