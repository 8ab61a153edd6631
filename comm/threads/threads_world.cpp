#include "comm/threads/threads_world.h"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "comm/errors.h"
#include "comm/join.h"
#include "core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FSDP_CPU_RELAX() _mm_pause()
#else
#define FSDP_CPU_RELAX() std::this_thread::yield()
#endif

namespace fsdp::comm {

namespace {
// Spinning briefly before sleeping keeps the barrier latency near a cache-line transfer when
// every rank has a core, and bounds the waste when ranks outnumber cores.
constexpr auto kSpinFor = std::chrono::microseconds(20);
}  // namespace

ThreadsWorld::ThreadsWorld(int size, std::chrono::milliseconds timeout)
    : size_(size),
      timeout_(timeout),
      slots_(std::size_t(size)),
      arrivals_(std::size_t(size), 0),
      exited_(std::size_t(size), 0),
      claimed_(std::size_t(size), 0) {}

void ThreadsWorld::throw_if_aborted_locked(const std::string& where,
                                           const std::string& what) const {
  if (aborted_)
    throw CommAbortedError(fmt::format("{}: {} aborted: {}", where, what, abort_reason_));
}

std::vector<int> ThreadsWorld::missing_locked(int rank) const {
  std::vector<int> missing;
  for (int r = 0; r < size_; ++r)
    if (arrivals_[std::size_t(r)] < arrivals_[std::size_t(rank)]) missing.push_back(r);
  return missing;
}

void ThreadsWorld::arrive_and_wait(int rank, const std::string& where, const std::string& what) {
  std::uint64_t my_generation;
  {
    std::unique_lock lock(mutex_);
    throw_if_aborted_locked(where, what);
    my_generation = generation_.load(std::memory_order_relaxed);
    ++arrivals_[std::size_t(rank)];
    if (++arrived_ == size_) {
      arrived_ = 0;
      generation_.store(my_generation + 1, std::memory_order_release);
      lock.unlock();
      cv_.notify_all();
      return;
    }
  }
  const auto spin_until = std::chrono::steady_clock::now() + kSpinFor;
  do {
    for (int i = 0; i < 64; ++i) {
      if (generation_.load(std::memory_order_acquire) != my_generation) return;
      FSDP_CPU_RELAX();
    }
    if (aborted_flag_.load(std::memory_order_relaxed)) break;
  } while (std::chrono::steady_clock::now() < spin_until);

  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  std::unique_lock lock(mutex_);
  for (;;) {
    if (generation_.load(std::memory_order_acquire) != my_generation) return;
    throw_if_aborted_locked(where, what);
    std::vector<int> missing = missing_locked(rank);
    for (int r : missing) {
      if (exited_[std::size_t(r)]) {
        std::string reason = fmt::format("rank {} returned without joining it", r);
        aborted_ = true;
        abort_reason_ = reason;
        aborted_flag_ = true;
        cv_.notify_all();
        throw CommAbortedError(fmt::format("{}: {} aborted: {}", where, what, reason));
      }
    }
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout &&
        generation_.load(std::memory_order_acquire) == my_generation && !aborted_) {
      missing = missing_locked(rank);
      std::string message = fmt::format(
          "{}: {} timed out after {} ms waiting for rank(s) {} (never reached it or died)", where,
          what, timeout_.count(), join(missing));
      // The barrier count is now off by this rank: the world cannot be used again.
      aborted_ = true;
      abort_reason_ = message;
      aborted_flag_ = true;
      cv_.notify_all();
      throw CommTimeoutError(message);
    }
  }
}

void ThreadsWorld::abort(int failed_rank, const std::string& reason) {
  std::vector<std::shared_ptr<ThreadsWorld>> children;
  {
    std::lock_guard lock(mutex_);
    if (!aborted_) {
      aborted_ = true;
      abort_reason_ = fmt::format("rank {} failed: {}", failed_rank, reason);
      aborted_flag_ = true;
    }
    for (auto& [key, world] : subworlds_) children.push_back(world);
  }
  cv_.notify_all();
  for (auto& child : children) child->abort(failed_rank, reason);
}

void ThreadsWorld::mark_exited(int rank) {
  std::vector<std::pair<std::shared_ptr<ThreadsWorld>, int>> children;  // (subworld, its rank)
  {
    std::lock_guard lock(mutex_);
    exited_[std::size_t(rank)] = 1;
    for (auto& [key, world] : subworlds_) {
      const auto& members = key.second;
      auto it = std::find(members.begin(), members.end(), rank);
      if (it != members.end()) children.emplace_back(world, int(it - members.begin()));
    }
  }
  cv_.notify_all();
  for (auto& [child, child_rank] : children) child->mark_exited(child_rank);
}

bool ThreadsWorld::claim_rank(int rank) {
  std::lock_guard lock(mutex_);
  if (claimed_[std::size_t(rank)]) return false;
  claimed_[std::size_t(rank)] = 1;
  return true;
}

std::shared_ptr<ThreadsWorld> ThreadsWorld::subworld(int call_index,
                                                     const std::vector<int>& ranks) {
  std::shared_ptr<ThreadsWorld> world;
  std::vector<int> exited;  // members whose thread already finished, as subworld ranks
  {
    std::lock_guard lock(mutex_);
    auto& entry = subworlds_[{call_index, ranks}];
    if (entry) return entry;
    entry = world = std::make_shared<ThreadsWorld>(int(ranks.size()), timeout_);
    for (std::size_t i = 0; i < ranks.size(); ++i)
      if (exited_[std::size_t(ranks[i])]) exited.push_back(int(i));
  }
  for (int r : exited) world->mark_exited(r);
  return world;
}

std::shared_ptr<ThreadsWorld> join_named_world(const std::string& name, int rank, int size,
                                               std::chrono::milliseconds timeout) {
  static std::mutex mutex;
  static std::map<std::string, std::weak_ptr<ThreadsWorld>> worlds;
  std::lock_guard lock(mutex);
  auto world = worlds[name].lock();
  if (world && world->size() != size)
    throw ValueError(
        fmt::format("threads backend: rank {} asked for world '{}' of size {}, but it has size {}",
                    rank, name, size, world->size()));
  if (!world) {
    world = std::make_shared<ThreadsWorld>(size, timeout);
    worlds[name] = world;
  }
  if (!world->claim_rank(rank))
    throw ValueError(fmt::format(
        "threads backend: rank {} of world '{}' joined twice (is an earlier job's group with "
        "that group_name still alive?)",
        rank, name));
  return world;
}

}  // namespace fsdp::comm
