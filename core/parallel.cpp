#include "core/parallel.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/start_thread.h"

namespace fsdp {
namespace {

thread_local bool t_in_region = false;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// How long an idle worker spins before it sleeps.
constexpr auto kSpin = std::chrono::microseconds(50);

// One parallel_for call: the range cut into chunks that the caller and the workers take from a
// shared counter. Shared with the workers through Pool::job_.
struct Job {
  Job(const std::function<void(std::int64_t, std::int64_t)>* f, std::int64_t b, std::int64_t e,
      std::int64_t c)
      : fn(f), begin(b), end(e), chunks(c) {}
  const std::function<void(std::int64_t, std::int64_t)>* fn;
  std::int64_t begin, end, chunks;
  std::atomic<std::int64_t> next{0}, done{0};  // chunks taken, chunks finished

  // Runs chunks until none is left.
  void take_chunks() {
    const std::int64_t n = end - begin;
    for (std::int64_t c; (c = next.fetch_add(1, std::memory_order_relaxed)) < chunks;) {
      const std::int64_t b = begin + n * c / chunks, e = begin + n * (c + 1) / chunks;
      if (b < e) (*fn)(b, e);
      done.fetch_add(1, std::memory_order_acq_rel);
    }
  }
};

class Pool {
 public:
  explicit Pool(int threads) {
    try {
      for (int i = 1; i < threads; ++i)
        workers_.push_back(
            start_thread(fmt::format("intra-op thread {} of {} (set_num_threads)", i, threads - 1),
                         [this] { work(); }));
    } catch (...) {
      stop();  // no destructor runs for a constructor that throws
      throw;
    }
  }
  ~Pool() { stop(); }
  std::int64_t threads() const { return static_cast<std::int64_t>(workers_.size()) + 1; }

  void stop() {
    stop_.store(true);
    generation_.fetch_add(1);
    generation_.notify_all();
    for (auto& t : workers_) t.join();
  }

  // False when another thread holds the pool (the caller then runs the range itself). The
  // chunks are taken from a shared counter: a worker that is slow to wake (its core busy, e.g.
  // with OpenBLAS's spinning thread) leaves its chunk to the caller instead of holding it up.
  bool run(std::int64_t begin, std::int64_t end, std::int64_t chunks,
           const std::function<void(std::int64_t, std::int64_t)>& fn) {
    std::unique_lock lock(busy_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    auto job =
        std::make_shared<Job>(&fn, begin, end, std::min(chunks * kChunksPerThread, end - begin));
    set_job(job);
    // Sequentially consistent with the workers' announce-then-recheck: either this sees a
    // sleeper and wakes it, or the sleeper sees the new generation and does not sleep.
    generation_.fetch_add(1);
    if (sleepers_.load() > 0) generation_.notify_all();
    t_in_region = true;
    job->take_chunks();
    t_in_region = false;
    // Every chunk taken is finished: a worker that comes later holds the job (shared) but finds
    // no chunk, so it never calls fn, which ends with this call.
    while (job->done.load(std::memory_order_acquire) < job->chunks) cpu_relax();
    set_job(nullptr);
    return true;
  }

 private:
  // More chunks than threads were slower on the demo model (bench/core/README.md).
  static constexpr std::int64_t kChunksPerThread = 1;

  void set_job(std::shared_ptr<Job> job) {
    std::lock_guard lock(job_mutex_);
    job_ = std::move(job);
  }
  std::shared_ptr<Job> current_job() {
    std::lock_guard lock(job_mutex_);
    return job_;
  }

  void work() {
    t_in_region = true;
    // The generation at construction, not a load here: a run may publish before this thread
    // starts, and it must see that as new.
    std::uint32_t seen = 0;
    for (;;) {
      std::uint32_t g = generation_.load();
      if (g == seen) {
        const auto until = std::chrono::steady_clock::now() + kSpin;
        while ((g = generation_.load()) == seen && std::chrono::steady_clock::now() < until)
          for (int i = 0; i < 32; ++i) cpu_relax();
      }
      if (g == seen) {
        sleepers_.fetch_add(1);
        // Checked again after announcing the sleep: a generation published in between would
        // not wake this worker.
        if (generation_.load() == seen) generation_.wait(seen);
        sleepers_.fetch_sub(1);
        continue;
      }
      seen = g;
      if (stop_.load()) return;
      if (std::shared_ptr<Job> job = current_job()) job->take_chunks();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex busy_;
  // 32 bits: std::atomic<int>::wait is a futex on the word itself (only equality matters).
  std::atomic<std::uint32_t> generation_{0};
  // The current call's job, shared with late workers. Under a mutex rather than in a
  // std::atomic<std::shared_ptr>: libstdc++ 12 implements that with a lock bit ThreadSanitizer
  // cannot see, and this lock is taken once per call and per wake.
  std::mutex job_mutex_;
  std::shared_ptr<Job> job_;
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
};

std::mutex g_mutex;
std::shared_ptr<Pool> g_pool;
std::atomic<int> g_threads{1};

}  // namespace

void set_num_threads(int n) {
  n = std::max(n, 1);
  std::lock_guard lock(g_mutex);
  g_pool.reset();
  if (n > 1) g_pool = std::make_shared<Pool>(n);
  g_threads.store(n);
}

int get_num_threads() {
  return g_threads.load(std::memory_order_relaxed);
}

namespace parallel_detail {

bool in_parallel_region() {
  return t_in_region;
}

void run(std::int64_t begin, std::int64_t end, std::int64_t chunks,
         const std::function<void(std::int64_t, std::int64_t)>& fn) {
  std::shared_ptr<Pool> pool;
  {
    std::lock_guard lock(g_mutex);
    pool = g_pool;
  }
  if (!pool || !pool->run(begin, end, chunks, fn)) fn(begin, end);
}

}  // namespace parallel_detail
}  // namespace fsdp
