// How a process joins a group: what init_process_group and every backend factory receive.
#pragma once

#include <chrono>
#include <string>

namespace fsdp::comm {

struct InitOptions {
  int rank = -1;        // -1: taken from the environment (init_from_env) or the launcher
  int world_size = -1;  // -1: likewise
  // Every wait (rendezvous, a peer's arrival, a collective's completion) fails after this long
  // with CommTimeoutError naming the backend, the collective and the missing rank(s).
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};

  // Rendezvous for gloo/nccl. file_store_path (a directory on a path shared by all ranks) wins
  // over master_addr/master_port (a TCP store hosted by rank 0, loopback/IPv4 addresses).
  std::string file_store_path;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // Distinguishes concurrent jobs sharing a store; also names the in-process world of the
  // threads backend.
  std::string group_name = "default";

  // Exchange a signature (kind, count, dtype, op, root) before each collective so that mismatched
  // calls fail with CommMismatchError instead of corrupting data. The threads backend always
  // checks; mpi and gloo check when this is set (one extra small message per peer).
  bool check_signatures = false;

  // nccl: CUDA device index of this rank (-1: rank modulo the visible devices).
  int device_index = -1;
};

}  // namespace fsdp::comm
