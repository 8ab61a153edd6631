#include "comm/env.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <limits>

namespace fsdp::comm::env {

namespace {

constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();

// Up to 200 characters of a value, for messages (a huge value would bury the message).
std::string shown(const std::string& v) {
  return v.size() <= 200 ? v : v.substr(0, 200) + fmt::format("... ({} characters)", v.size());
}

[[noreturn]] void refuse(const char* name, const std::string& value, const std::string& expected) {
  throw EnvError(fmt::format("environment variable {}='{}' is {}", name, shown(value), expected));
}

// A host name or a dotted IPv4 address: letters, digits, '.', '-', '_', at most 253 characters.
std::optional<std::string> host(const char* name) {
  auto v = raw(name);
  if (!v) return v;
  bool ok = v->size() <= 253;
  for (char c : *v)
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '.' || c == '-' || c == '_');
  if (!ok) refuse(name, *v, "not a host name or IPv4 address (letters, digits, '.', '-', '_')");
  return v;
}

}  // namespace

const std::vector<Knob>& knobs() {
  static const std::vector<Knob> all = {
      {"RANK", "-", "this rank, 0 to WORLD_SIZE-1 (launched without mpirun)"},
      {"WORLD_SIZE", "-", "the number of ranks, 1 to 2147483647"},
      {"OMPI_COMM_WORLD_RANK/SIZE", "-", "set by mpirun; used instead of RANK/WORLD_SIZE"},
      {"MASTER_ADDR", "127.0.0.1", "the host of rank 0's TCP store"},
      {"MASTER_PORT", "29500", "the TCP store's port, 1 to 65535"},
      {"FSDP_STORE_PATH", "-", "a directory shared by all ranks: selects the file store"},
      {"FSDP_TIMEOUT_MS", "300000", "every wait's limit, 1 to 86400000 ms"},
      {"FSDP_BACKEND", "-", "fake, threads, mpi, gloo or nccl (init_from_env)"},
      {"FSDP_GLOO_HOSTNAME", "-", "gloo: the address this rank's connections bind to"},
      {"FSDP_GLOO_IFNAME", "-",
       "gloo: the network interface to bind to (else GLOO_SOCKET_IFNAME; default: the one that "
       "reaches MASTER_ADDR)"},
      {"FSDP_MPI_DIRECT", "1", "mpi: 0 sends all data as MPI messages"},
      {"FSDP_GLOO_DIRECT", "1", "gloo: 0 sends all data over TCP, never reads peers' memory"},
      {"PMIX_NAMESPACE", "-", "set by mpirun; keys a reused file store directory by job"},
  };
  return all;
}

std::optional<std::string> raw(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::optional<std::int64_t> integer(const char* name, std::int64_t lo, std::int64_t hi) {
  auto v = raw(name);
  if (!v) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(v->c_str(), &end, 10);
  // strtoll skips leading blanks; a value is its digits alone.
  if (end == v->c_str() || *end != '\0' || (*v)[0] == ' ' || (*v)[0] == '\t' || (*v)[0] == '\n')
    refuse(name, *v, "not an integer");
  if (errno == ERANGE || value < lo || value > hi)
    refuse(name, *v, fmt::format("out of range: expected {} to {}", lo, hi));
  return value;
}

bool under_mpirun() {
  return raw("OMPI_COMM_WORLD_RANK").has_value();
}

const char* rank_variable() {
  return under_mpirun() ? "OMPI_COMM_WORLD_RANK" : "RANK";
}
const char* world_size_variable() {
  return under_mpirun() ? "OMPI_COMM_WORLD_SIZE" : "WORLD_SIZE";
}

std::optional<int> rank() {
  auto r = integer(rank_variable(), 0, kIntMax - 1);
  if (!r) return std::nullopt;
  return int(*r);
}

std::optional<int> world_size() {
  auto n = integer(world_size_variable(), 1, kIntMax);
  if (!n) return std::nullopt;
  return int(*n);
}

std::optional<std::string> master_addr() {
  return host("MASTER_ADDR");
}

std::optional<int> master_port() {
  auto p = integer("MASTER_PORT", 1, 65535);
  if (!p) return std::nullopt;
  return int(*p);
}

std::optional<std::string> store_path() {
  return raw("FSDP_STORE_PATH");
}
std::optional<std::string> mpirun_job() {
  return raw("PMIX_NAMESPACE");
}

std::optional<std::chrono::milliseconds> timeout() {
  auto ms = integer("FSDP_TIMEOUT_MS", 1, 86400000);  // a longer wait is a hang
  if (!ms) return std::nullopt;
  return std::chrono::milliseconds(*ms);
}

std::optional<std::string> backend() {
  auto v = raw("FSDP_BACKEND");
  if (!v) return v;
  bool ok = v->size() <= 64;
  for (char c : *v) ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
  if (!ok) refuse("FSDP_BACKEND", *v, "not a backend name (fake, threads, mpi, gloo, nccl)");
  return v;
}

std::optional<std::string> gloo_hostname() {
  return host("FSDP_GLOO_HOSTNAME");
}

const char* gloo_ifname_variable() {
  return raw("FSDP_GLOO_IFNAME") ? "FSDP_GLOO_IFNAME" : "GLOO_SOCKET_IFNAME";
}

std::optional<std::string> gloo_ifname() {
  const char* name = gloo_ifname_variable();
  auto v = raw(name);
  if (!v) return v;
  bool ok = v->size() <= 15;  // IFNAMSIZ - 1
  for (char c : *v)
    ok = ok && c != '/' && c != ' ' && c != '\t' && c != '\n' && c != ':' && c != ',';
  if (!ok)
    refuse(name, *v,
           "not one network interface name (1 to 15 characters, no '/', ':', ',' or blanks)");
  return v;
}

namespace {
// A switch that is on unless set to 0.
bool on_unless_zero(const char* name) {
  auto v = raw(name);
  if (!v || *v == "1") return true;
  if (*v == "0") return false;
  refuse(name, *v, "neither 0 nor 1");
}
}  // namespace

bool mpi_direct() {
  return on_unless_zero("FSDP_MPI_DIRECT");
}
bool gloo_direct() {
  return on_unless_zero("FSDP_GLOO_DIRECT");
}

}  // namespace fsdp::comm::env
