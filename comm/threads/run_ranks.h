// Runs `world_size` ranks as threads of this process, each with its threads-backend group.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>

#include "comm/errors.h"
#include "comm/process_group.h"

namespace fsdp::comm {

struct ThreadsOptions {
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

// The first failure among the rank threads, rethrown by run_ranks after every thread ended.
class RankFailedError : public CommError {
 public:
  RankFailedError(int rank, int world_size, std::exception_ptr cause, const std::string& what);
  int rank() const { return rank_; }
  // The rank's original exception (std::rethrow_exception to inspect its type).
  std::exception_ptr cause() const { return cause_; }

 private:
  int rank_;
  std::exception_ptr cause_;
};

// Starts the threads, hands each its group (shared: the body may keep it, e.g. in FSDP's options,
// past its own return), joins them all. When a rank throws, the others'
// pending and future collectives fail at once (no hang), and the first exception to occur is
// rethrown as RankFailedError naming its rank. Rank 0 runs on a new thread like the others.
void run_ranks(int world_size, const std::function<void(std::shared_ptr<ProcessGroup>)>& body,
               ThreadsOptions options = {});

}  // namespace fsdp::comm
