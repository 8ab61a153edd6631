// Internal: presents a comm Store to gloo's rendezvous (gloo::rendezvous::Store), so that gloo
// connects through our FileStore or TcpStore with our timeout and error messages.
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>

#include "comm/store/store.h"

namespace fsdp::comm {

class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(std::shared_ptr<comm::Store> store, std::chrono::milliseconds timeout)
      : store_(std::move(store)), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  std::shared_ptr<comm::Store> store_;
  std::chrono::milliseconds timeout_;
};

}  // namespace fsdp::comm
