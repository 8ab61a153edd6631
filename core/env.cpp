#include "core/env.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace fsdp::env {

namespace {

constexpr std::int64_t kIntMax = 2147483647;  // rank and world size are ints everywhere

// Up to 200 characters of a value, for messages (a huge value would bury the message).
std::string shown(const std::string& v) {
  return v.size() <= 200 ? v : v.substr(0, 200) + fmt::format("... ({} characters)", v.size());
}

const Knob& declared(const char* name, KnobKind kind) {
  const Knob& k = knob(name);
  FSDP_CHECK(k.kind == kind, AssertionError, "environment variable {} is read as another kind",
             name);
  return k;
}

// The words of a Choice knob's `accepted` ("caching|malloc").
std::vector<std::string> words(const Knob& k) {
  std::vector<std::string> out;
  std::string s = k.accepted;
  for (std::size_t at = 0;;) {
    const std::size_t bar = s.find('|', at);
    out.push_back(s.substr(at, bar - at));
    if (bar == std::string::npos) return out;
    at = bar + 1;
  }
}

}  // namespace

const std::vector<Knob>& knobs() {
  using K = KnobKind;
  static const std::vector<Knob> all = {
      // --- launcher: who this process is (comm/) ---
      {"RANK", K::Integer, "-", "", 0, kIntMax - 1,
       "this rank, below WORLD_SIZE (launched without mpirun; set both or neither)"},
      {"WORLD_SIZE", K::Integer, "-", "", 1, kIntMax, "the number of ranks"},
      {"OMPI_COMM_WORLD_RANK", K::Integer, "-", "", 0, kIntMax - 1,
       "set by mpirun; used instead of RANK"},
      {"OMPI_COMM_WORLD_SIZE", K::Integer, "-", "", 1, kIntMax,
       "set by mpirun; used instead of WORLD_SIZE"},
      {"PMIX_NAMESPACE", K::Text, "-", "any", 0, 0,
       "set by mpirun; keys a reused file-store directory by job"},
      {"OMPI_MCA_orte_forward_job_control", K::Text, "-", "any; 0 or false is off", 0, 0,
       "set by mpirun --mca orte_forward_job_control 1: the mpi backend then writes no report "
       "at its launcher's SIGCONT (mpirun forwards a user's SIGCONT)"},
      // --- rendezvous (comm/) ---
      {"MASTER_ADDR", K::Text, "127.0.0.1", "a host name or IPv4 address", 0, 0,
       "the host of rank 0's TCP store"},
      {"MASTER_PORT", K::Integer, "29500", "", 1, 65535, "the TCP store's port"},
      {"FSDP_STORE_PATH", K::Text, "-", "a directory", 0, 0,
       "a directory shared by all ranks: selects the file store"},
      // --- communication (comm/) ---
      {"FSDP_TIMEOUT_MS", K::Integer, "300000", "", 1, 86400000,
       "every collective's limit in milliseconds, from its start, and the store's: connect, "
       "handshake, set and get (a day at most: a longer wait is a hang)"},
      {"FSDP_BACKEND", K::Text, "-", "a backend name: fake, threads, mpi, gloo or nccl", 0, 0,
       "the backend init_from_env creates"},
      {"FSDP_GLOO_HOSTNAME", K::Text, "-", "a host name or IPv4 address", 0, 0,
       "gloo: the address this rank's connections bind to and advertise"},
      {"FSDP_GLOO_IFNAME", K::Text, "the route to MASTER_ADDR",
       "a network interface name, 1 to 15 characters", 0, 0,
       "gloo: the network interface to bind to"},
      {"GLOO_SOCKET_IFNAME", K::Text, "-", "a network interface name, 1 to 15 characters", 0, 0,
       "PyTorch's name for FSDP_GLOO_IFNAME (read when that is unset)"},
      {"FSDP_MPI_DIRECT", K::Switch, "1", "", 0, 0,
       "mpi: 0 sends all data as MPI messages, never reads peers' memory"},
      {"FSDP_GLOO_DIRECT", K::Switch, "1", "", 0, 0,
       "gloo: 0 sends all data over gloo's TCP pairs, never reads peers' memory"},
      // --- tensors and kernels (core/) ---
      {"FSDP_CPU_ALLOCATOR", K::Choice, "caching (malloc under ASan)", "caching|malloc", 0, 0,
       "the CPU allocator: caching keeps freed blocks for reuse, malloc returns them at once"},
      {"FSDP_BLAS_AUTOSELECT", K::Switch, "1", "", 0, 0,
       "1: a program whose OpenBLAS picked generic x86-64 kernels on an AVX2 or AVX-512 CPU "
       "restarts itself with OPENBLAS_CORETYPE set (core/blas_kernels.h); 0 keeps OpenBLAS's "
       "choice"},
      {"OPENBLAS_CORETYPE", K::Text, "-", "an OpenBLAS core name (read by OpenBLAS)", 0, 0,
       "set: OpenBLAS's kernels are left as given (no automatic choice)"},
      // --- FSDP runtime (fsdp/) ---
      {"FSDP_USE_FULL_PREC_IN_EVAL", K::Switch, "0", "", 0, 0,
       "1: eval() forwards run in full precision under mixed precision (as upstream)"},
      // --- programs (tools/) ---
      {"FSDP_PLAN_TIMING", K::Switch, "0", "", 0, 0,
       "fsdp-plan: 1 prints the CPU time of each phase on stderr"},
  };
  return all;
}

const Knob& knob(const char* name) {
  for (const Knob& k : knobs())
    if (std::strcmp(k.name, name) == 0) return k;
  throw AssertionError(
      fmt::format("environment variable {} is read but not declared in core/env.cpp", name));
}

std::string accepted(const Knob& k) {
  switch (k.kind) {
    case KnobKind::Integer:
      return fmt::format("{} to {}", k.lo, k.hi);
    case KnobKind::Switch:
      return "0 or 1";
    case KnobKind::Choice: {
      const auto w = words(k);
      std::string s = w[0];
      for (std::size_t i = 1; i < w.size(); ++i) s += (i + 1 == w.size() ? " or " : ", ") + w[i];
      return s;
    }
    case KnobKind::Text:
      break;
  }
  return k.accepted;
}

void refuse(const char* name, const std::string& value, const std::string& expected) {
  throw EnvError(fmt::format("environment variable {}='{}' is {}", name, shown(value), expected));
}

std::optional<std::string> raw(const char* name) {
  knob(name);  // declared
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::optional<std::int64_t> integer(const char* name) {
  const Knob& k = declared(name, KnobKind::Integer);
  auto v = raw(name);
  if (!v) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(v->c_str(), &end, 10);
  // strtoll skips leading blanks; a value is its digits alone.
  if (end == v->c_str() || *end != '\0' || (*v)[0] == ' ' || (*v)[0] == '\t' || (*v)[0] == '\n')
    refuse(name, *v, "not an integer");
  if (errno == ERANGE || value < k.lo || value > k.hi)
    refuse(name, *v, "out of range: expected " + accepted(k));
  return value;
}

bool enabled(const char* name) {
  const Knob& k = declared(name, KnobKind::Switch);
  auto v = raw(name);
  if (!v) return std::strcmp(k.fallback, "1") == 0;
  if (*v == "1") return true;
  if (*v == "0") return false;
  refuse(name, *v, "neither 0 nor 1");
}

std::optional<std::string> choice(const char* name) {
  const Knob& k = declared(name, KnobKind::Choice);
  auto v = raw(name);
  if (!v) return v;
  for (const std::string& w : words(k))
    if (*v == w) return v;
  refuse(name, *v, "not " + accepted(k));
}

void check_all() {
  for (const Knob& k : knobs()) {
    if (k.kind == KnobKind::Integer) integer(k.name);
    if (k.kind == KnobKind::Switch) enabled(k.name);
    if (k.kind == KnobKind::Choice) choice(k.name);
  }
}

}  // namespace fsdp::env
