#include "comm/store/store.h"

#include <fmt/format.h>

#include <thread>

#include "comm/env.h"
#include "comm/errors.h"
#include "comm/join.h"
#include "comm/store/file_store.h"
#include "comm/store/tcp_store.h"

namespace fsdp::comm {

void Store::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  while (!check(keys)) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::vector<std::string> missing;
      for (auto& k : keys)
        if (!check({k})) missing.push_back(k);
      throw CommTimeoutError(fmt::format("{}: timed out after {} ms waiting for key(s) {}",
                                         describe(), timeout.count(), join(missing)));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

std::shared_ptr<Store> make_store(const InitOptions& o, int rank) {
  if (!o.file_store_path.empty()) {
    // Under mpirun every job has a unique namespace: key the files by it, so that a later job can
    // reuse the same directory (files are not removed: a slow rank may still be reading).
    std::string prefix = o.group_name;
    if (auto job = env::mpirun_job()) prefix += "@mpirun-" + *job;
    return std::make_shared<FileStore>(o.file_store_path, prefix, rank);
  }
  return std::make_shared<TcpStore>(o.master_addr, o.master_port, rank == 0, o.group_name,
                                    o.timeout);
}

}  // namespace fsdp::comm
