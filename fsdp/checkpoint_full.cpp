#include "fsdp/checkpoint_full.h"

#include <fmt/format.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "core/error.h"
#include "core/io/safetensors.h"
#include "core/io/safetensors_dir.h"

namespace fsdp {

int save_full_checkpoint(const std::string& dir, const NamedTensors& state,
                         std::int64_t max_shard_bytes,
                         const std::map<std::string, std::string>& metadata) {
  return static_cast<int>(
      io::save_safetensors_dir(dir, state, max_shard_bytes, metadata, io::Checksums::xxh3).size());
}

namespace {

// Writes tensors to a SafetensorsWriter on a thread of its own, in the order queued, so that
// rank 0 gathers the next unit while this one is written. The first write error is kept and
// every later write skipped.
class BackgroundWriter {
 public:
  explicit BackgroundWriter(io::SafetensorsWriter& writer)
      : writer_(writer), thread_([this] { run(); }) {}
  ~BackgroundWriter() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  void push(std::size_t index, const Tensor& t) {
    {
      std::lock_guard lock(mutex_);
      queue_.emplace_back(index, t);
    }
    wake_.notify_all();
  }
  // Waits until everything queued is written.
  void drain() {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [&] { return queue_.empty() && !busy_; });
  }
  std::exception_ptr failure() {
    std::lock_guard lock(mutex_);
    return failure_;
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    while (true) {
      wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      auto [index, t] = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      const bool skip = failure_ != nullptr;
      lock.unlock();
      std::exception_ptr error;
      if (!skip) {
        try {
          writer_.write(index, t);
        } catch (...) {
          error = std::current_exception();
        }
      }
      lock.lock();
      if (error && !failure_) failure_ = error;
      busy_ = false;
      if (queue_.empty()) idle_.notify_all();
    }
  }

  io::SafetensorsWriter& writer_;
  std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::deque<std::pair<std::size_t, Tensor>> queue_;
  bool busy_ = false, stop_ = false;
  std::exception_ptr failure_;
  std::thread thread_;  // last: starts after the members it uses
};

}  // namespace

void save_full_state_dict(FullyShardedDataParallel& root, const std::string& path,
                          const std::map<std::string, std::string>& metadata) {
  std::optional<io::SafetensorsWriter> writer;
  std::optional<BackgroundWriter> background;
  std::exception_ptr failure;
  // Under HYBRID_SHARD every shard group has a rank 0 holding the full values: the one of the
  // first replica writes.
  const auto& replicas = root.replicate_group();
  const bool writes = !replicas || replicas->rank() == 0;
  visit_full_state_dict(
      root, /*rank0_only=*/true,
      [&](const std::vector<FullEntry>& entries) {
        if (!writes) return;
        std::vector<io::SafetensorsWriter::Spec> specs;
        for (const auto& e : entries) specs.push_back({e.name, e.dtype, e.shape});
        try {
          writer.emplace(path, std::move(specs), metadata, io::Checksums::xxh3);
          background.emplace(*writer);
        } catch (...) {
          failure = std::current_exception();
        }
      },
      [&](std::size_t k, const Tensor& value) {
        if (background) background->push(k, value);
      },
      [&] {
        if (background) background->drain();
      });
  if (background) {
    background->drain();
    if (!failure) failure = background->failure();
    background.reset();
  }
  if (failure) std::rethrow_exception(failure);
  if (writer) writer->finish();
}

NamedTensors load_full_checkpoint(const std::string& dir,
                                  std::map<std::string, std::string>* metadata) {
  const io::SafetensorsDir src = io::SafetensorsDir::open(dir);
  if (metadata) *metadata = src.metadata();
  NamedTensors out;
  for (const std::string& name : src.names()) out.emplace_back(name, src.read(name));
  return out;
}

}  // namespace fsdp
