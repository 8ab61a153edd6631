#include "comm/threads/run_ranks.h"

#include <fmt/format.h>

#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/threads/threads_process_group.h"
#include "core/error.h"
#include "core/start_thread.h"

namespace fsdp::comm {

RankFailedError::RankFailedError(int rank, int world_size, std::exception_ptr cause,
                                 const std::string& what)
    : CommError(fmt::format("rank {} of {} failed: {}", rank, world_size, what)),
      rank_(rank),
      cause_(std::move(cause)) {}

void run_ranks(int world_size, const std::function<void(std::shared_ptr<ProcessGroup>)>& body,
               ThreadsOptions options) {
  if (world_size < 1) throw ValueError(fmt::format("run_ranks: world size {} < 1", world_size));
  auto world = std::make_shared<ThreadsWorld>(world_size, options.timeout);
  std::mutex failure_mutex;
  int failed_rank = -1;
  std::exception_ptr failure;
  std::string failure_what;

  auto rank_main = [&](int rank) {
    try {
      body(std::make_shared<ThreadsProcessGroup>(rank, world));
    } catch (...) {
      std::string what = "unknown exception";
      try {
        throw;
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      {
        std::lock_guard lock(failure_mutex);
        if (!failure) {
          failure = std::current_exception();
          failed_rank = rank;
          failure_what = what;
        }
      }
      world->abort(rank, what);
    }
    world->mark_exited(rank);
  };

  std::vector<std::thread> threads;
  threads.reserve(std::size_t(world_size));
  std::string start_failure;
  for (int r = 0; r < world_size && start_failure.empty(); ++r) {
    try {
      threads.push_back(start_thread(fmt::format("rank {} of {}", r, world_size),
                                     [&rank_main, r] { rank_main(r); }));
    } catch (const RuntimeError& e) {
      // The ranks already running fail their next collective instead of waiting for this one.
      start_failure = e.what();
      world->abort(r, start_failure);
    }
  }
  for (auto& t : threads) t.join();
  if (!start_failure.empty()) throw RuntimeError(start_failure);
  if (failure) throw RankFailedError(failed_rank, world_size, failure, failure_what);
}

}  // namespace fsdp::comm
