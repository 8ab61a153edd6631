// TcpStore: rank 0 hosts a key-value server at MASTER_ADDR:MASTER_PORT; every rank (rank 0
// included) talks to it over a TCP connection. Plain POSIX sockets, IPv4. No authentication:
// bind it to loopback (the default) or a trusted network only.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "comm/store/store.h"

namespace fsdp::comm {

class TcpStoreServer;

class TcpStore final : public Store {
 public:
  // is_host: start the server (rank 0). Fails with a clear error when the port is in use;
  // clients retry connecting, then handshake, until `timeout`, which also bounds set and check.
  TcpStore(const std::string& address, int port, bool is_host, std::string prefix,
           std::chrono::milliseconds timeout);
  ~TcpStore() override;
  void set(const std::string& key, const std::vector<char>& value) override;
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  std::string describe() const override;

 private:
  std::vector<char> request(char op, const std::string& key, const std::vector<char>& value,
                            std::chrono::milliseconds timeout);

  std::string address_;
  int port_;
  std::string prefix_;
  std::unique_ptr<TcpStoreServer> server_;
  int socket_ = -1;
  std::chrono::milliseconds timeout_{0};
  std::mutex mutex_;  // one request at a time on the socket
};

}  // namespace fsdp::comm
