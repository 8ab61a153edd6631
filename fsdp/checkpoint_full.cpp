#include "fsdp/checkpoint_full.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>

#include "core/error.h"
#include "core/io/safetensors.h"

namespace fsdp {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSingle = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";

// Writes `text` to `path` through a temporary file, fsynced, then renamed.
void write_atomically(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    FSDP_CHECK(out.good(), RuntimeError, "save_full_checkpoint: cannot write {}", tmp.string());
  }
  const int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  fs::rename(tmp, path);
}

}  // namespace

int save_full_checkpoint(const std::string& dir, const NamedTensors& state,
                         std::int64_t max_shard_bytes,
                         const std::map<std::string, std::string>& metadata) {
  FSDP_CHECK(max_shard_bytes > 0, ValueError,
             "save_full_checkpoint: the size limit must be positive, got {}", max_shard_bytes);
  fs::create_directories(dir);
  // Greedy, in order: a file takes tensors while they fit.
  std::vector<NamedTensors> files(1);
  std::int64_t in_file = 0, total = 0;
  for (const auto& [name, t] : state) {
    const auto bytes = static_cast<std::int64_t>(t.nbytes());
    if (in_file > 0 && in_file + bytes > max_shard_bytes) {
      files.emplace_back();
      in_file = 0;
    }
    files.back().emplace_back(name, t);
    in_file += bytes;
    total += bytes;
  }
  const fs::path base(dir);
  if (files.size() == 1) {
    io::save_safetensors((base / kSingle).string(), files.front(), metadata, io::Checksums::xxh3);
    fs::remove(base / kIndex);  // a sharded save of earlier would shadow this one
    return 1;
  }
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  const std::size_t n = files.size();
  for (std::size_t k = 0; k < n; ++k) {
    const std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, n);
    io::save_safetensors((base / file).string(), files[k], metadata, io::Checksums::xxh3);
    for (const auto& [name, t] : files[k]) weight_map[name] = file;
  }
  nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}},
                                  {"weight_map", weight_map}};
  write_atomically(base / kIndex, index.dump(2) + "\n");
  fs::remove(base / kSingle);
  return static_cast<int>(n);
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
  const fs::path base(dir);
  if (!fs::exists(base / kIndex)) {
    io::SafetensorsFile f = io::load_safetensors((base / kSingle).string());
    if (metadata) *metadata = std::move(f.metadata);
    return std::move(f.tensors);
  }
  const std::string index_path = (base / kIndex).string();
  nlohmann::json index;
  try {
    std::ifstream in(index_path);
    FSDP_CHECK(in.good(), ValueError, "load_full_checkpoint: cannot open {}", index_path);
    index = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception&) {
    throw ValueError(
        fmt::format("load_full_checkpoint: {} is damaged: not valid JSON", index_path));
  }
  FSDP_CHECK(index.contains("weight_map") && index.at("weight_map").is_object(), ValueError,
             "load_full_checkpoint: {} has no weight_map", index_path);
  std::map<std::string, std::set<std::string>> by_file;
  for (const auto& [name, file] : index.at("weight_map").items())
    by_file[file.get<std::string>()].insert(name);
  NamedTensors out;
  for (const auto& [file, names] : by_file) {
    const std::string path = (base / file).string();
    auto f = io::load_safetensors(path);
    if (metadata && out.empty()) *metadata = f.metadata;
    std::set<std::string> found;
    for (auto& [name, t] : f.tensors)
      if (names.count(name)) {
        found.insert(name);
        out.emplace_back(name, std::move(t));
      }
    for (const auto& name : names)
      FSDP_CHECK(found.count(name), ValueError,
                 "load_full_checkpoint: {} maps '{}' to {}, which has no such tensor", index_path,
                 name, path);
  }
  return out;
}

}  // namespace fsdp
