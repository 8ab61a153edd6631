#include "comm/env.h"

#include <fmt/format.h>

namespace fsdp::comm::env {

using fsdp::env::refuse;

namespace {

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

std::optional<int> int_knob(const char* name) {
  auto v = fsdp::env::integer(name);  // the declared range fits an int
  if (!v) return std::nullopt;
  return int(*v);
}

}  // namespace

std::optional<std::int64_t> integer(const char* name, std::int64_t lo, std::int64_t hi) {
  auto v = fsdp::env::integer(name);
  if (v && (*v < lo || *v > hi))
    refuse(name, std::to_string(*v), fmt::format("out of range: expected {} to {}", lo, hi));
  return v;
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
  return int_knob(rank_variable());
}

std::optional<int> world_size() {
  return int_knob(world_size_variable());
}

std::optional<std::string> master_addr() {
  return host("MASTER_ADDR");
}

std::optional<int> master_port() {
  return int_knob("MASTER_PORT");
}

std::optional<std::string> store_path() {
  return raw("FSDP_STORE_PATH");
}
std::optional<std::string> mpirun_job() {
  return raw("PMIX_NAMESPACE");
}

std::optional<std::chrono::milliseconds> timeout() {
  auto ms = fsdp::env::integer("FSDP_TIMEOUT_MS");
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

bool mpi_direct() {
  return fsdp::env::enabled("FSDP_MPI_DIRECT");
}
bool gloo_direct() {
  return fsdp::env::enabled("FSDP_GLOO_DIRECT");
}

}  // namespace fsdp::comm::env
