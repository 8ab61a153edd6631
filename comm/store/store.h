// Store: the small key-value service ranks rendezvous through (gloo's connection addresses,
// NCCL's unique id). Keys are written once; get waits until the key exists or times out.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/init_options.h"

namespace fsdp::comm {

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<char>& value) = 0;
  // Waits for key; CommTimeoutError naming the key after `timeout`.
  virtual std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // True when every key exists (never blocks for long).
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Waits for all keys; CommTimeoutError naming those still missing after `timeout`.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // "file store /tmp/x" / "tcp store 127.0.0.1:29500", for messages.
  virtual std::string describe() const = 0;
};

// The store `options` select: a FileStore when file_store_path is set, else a TcpStore at
// master_addr:master_port (hosted by rank 0). Keys are prefixed by options.group_name (and, for
// the file store under mpirun, by the job's PMIX_NAMESPACE).
std::shared_ptr<Store> make_store(const InitOptions& options, int rank);

}  // namespace fsdp::comm
