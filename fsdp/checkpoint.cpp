#include "fsdp/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/io/safetensors.h"
#include "fsdp/optim_state_dict.h"
#include "fsdp/state_dict_sharded.h"

namespace fsdp {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

constexpr const char* kFormat = "fsdp-cpp/sharded-checkpoint/1";

std::string step_name(std::int64_t step) {
  return fmt::format("step-{:08d}", step);
}
std::string rank_file(const char* kind, int rank) {
  return fmt::format("{}-rank-{:05d}.safetensors", kind, rank);
}
std::string rank_json(int rank) {
  return fmt::format("rank-{:05d}.json", rank);
}

// fsync a file or directory (directories: best effort, some file systems refuse it).
void fsync_path(const fs::path& p, bool directory) {
  const int fd = ::open(p.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  FSDP_CHECK(fd >= 0 || directory, RuntimeError, "checkpoint: cannot open {}: {}", p.string(),
             std::strerror(errno));
  if (fd < 0) return;
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  FSDP_CHECK(rc == 0 || directory, RuntimeError, "checkpoint: fsync {} failed: {}", p.string(),
             std::strerror(err));
}

void write_json(const fs::path& p, const json& j) {
  {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << j.dump(1) << '\n';
    FSDP_CHECK(out.good(), RuntimeError, "checkpoint: cannot write {}", p.string());
  }
  fsync_path(p, false);
}

json read_json(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  FSDP_CHECK(in.good(), ValueError, "checkpoint: cannot open {}", p.string());
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw ValueError(fmt::format("checkpoint: {} is not valid JSON: {}", p.string(), e.what()));
  }
}

// Writes the non-replica pieces to `file`; returns their index entries.
json write_pieces(const fs::path& file, const ShardedStateDict& pieces) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  json entries = json::array();
  for (const auto& p : pieces) {
    if (p.replica || p.local.numel() == 0) continue;
    tensors.emplace_back(p.fqn, p.local);
    entries.push_back({{"key", p.fqn},
                       {"shape", p.global_shape},
                       {"dtype", io::safetensors_dtype_code(p.local.dtype())},
                       {"offset", p.offset},
                       {"numel", p.local.numel()}});
  }
  io::save_safetensors(file.string(), tensors, {{"format", "pt"}});
  fsync_path(file, false);
  return entries;
}

// Removes leftovers of interrupted saves and all but the newest `keep` checkpoints.
void prune(const fs::path& dir, int keep, const std::string& current) {
  std::vector<std::string> steps;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(".tmp-step-", 0) == 0 && name != ".tmp-" + current) fs::remove_all(e.path());
    if (name.rfind("step-", 0) == 0 && fs::exists(e.path() / "index.json")) steps.push_back(name);
  }
  if (keep <= 0) return;
  std::sort(steps.begin(), steps.end());
  for (std::size_t i = 0; i + static_cast<std::size_t>(keep) < steps.size(); ++i)
    fs::remove_all(dir / steps[i]);
}

}  // namespace

std::string save_sharded_checkpoint(const std::string& dir, FullyShardedDataParallel& root,
                                    const optim::Optimizer* optimizer,
                                    const TrainingProgress& progress, comm::ProcessGroup& world,
                                    const CheckpointOptions& options) {
  const int rank = world.rank();
  auto stage = [&](const char* what) {
    if (options.on_stage) options.on_stage(what);
  };
  const std::string name = step_name(progress.step);
  const fs::path base(dir), tmp = base / (".tmp-" + name), final_dir = base / name;
  if (rank == 0) {
    fs::create_directories(base);
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    stage("tmp");
  }
  world.barrier();
  // Each rank: its pieces and its progress, no communication.
  json mine = {{"rank", rank}};
  const auto& g = default_generator().get_state();
  mine["rng"] = {g.seed, g.counter};
  // Views of the shards, written at once: no copy of the model (bench/checkpoint).
  mine["model"] =
      write_pieces(tmp / rank_file("model", rank), sharded_state_dict(root, /*copy=*/false));
  if (optimizer != nullptr) {
    ShardedOptimStateDict o = sharded_optim_state_dict(root, *optimizer);
    mine["optim"] = write_pieces(tmp / rank_file("optim", rank), o.pieces);
    if (rank == 0) {
      mine["optim_meta"] = {{"state_names", o.state_names},
                            {"param_groups", o.param_groups},
                            {"group_fqns", o.group_fqns}};
    }
  }
  write_json(tmp / rank_json(rank), mine);
  world.barrier();
  if (rank == 0) {
    stage("rank files");
    // The index: every rank's pieces, by tensor.
    json index = {{"format", kFormat}, {"world_size", world.size()}};
    json model = json::object(), optim = json::object(), rng = json::array();
    json optim_meta;
    for (int r = 0; r < world.size(); ++r) {
      const json part = read_json(tmp / rank_json(r));
      rng.push_back(part.at("rng"));
      for (const auto& [kind, section] : {std::pair<const char*, json*>{"model", &model},
                                          std::pair<const char*, json*>{"optim", &optim}}) {
        if (!part.contains(kind)) continue;
        for (const auto& e : part.at(kind)) {
          json& t = (*section)[e.at("key").get<std::string>()];
          if (t.is_null())
            t = {{"shape", e.at("shape")}, {"dtype", e.at("dtype")}, {"pieces", json::array()}};
          t["pieces"].push_back(
              {{"file", rank_file(kind, r)}, {"offset", e.at("offset")}, {"numel", e.at("numel")}});
        }
      }
      if (part.contains("optim_meta")) optim_meta = part.at("optim_meta");
    }
    index["progress"] = {
        {"step", progress.step}, {"data_position", progress.data_position}, {"rng", rng}};
    index["model"] = model;
    if (optimizer != nullptr) {
      optim_meta["tensors"] = optim;
      index["optim"] = optim_meta;
    }
    for (int r = 0; r < world.size(); ++r) fs::remove(tmp / rank_json(r));
    write_json(tmp / "index.json", index);
    fsync_path(tmp, true);
    stage("index");
    fs::remove_all(final_dir);  // a checkpoint of the same step, replaced
    fs::rename(tmp, final_dir);
    fsync_path(base, true);
    stage("rename");
    prune(base, options.keep, name);
    stage("pruned");
  }
  world.barrier();
  return final_dir.string();
}

std::optional<std::string> latest_checkpoint(const std::string& dir) {
  std::optional<std::string> best;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return best;
  std::string best_name;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) != 0 || !fs::exists(e.path() / "index.json")) continue;
    if (name > best_name) {
      best_name = name;
      best = e.path().string();
    }
  }
  return best;
}

namespace {

// The pieces of `section` (model or optim tensors) that hold elements this rank needs,
// `needed(key)` giving the ranges [begin, end) of that key, read from their files.
PieceSet read_pieces(
    const fs::path& path, const json& section,
    const std::function<std::vector<std::pair<std::int64_t, std::int64_t>>(const std::string&)>&
        needed) {
  // Which files to open: those with a piece that overlaps a needed range.
  std::map<std::string, std::vector<std::pair<std::string, std::int64_t>>> wanted;  // file->keys
  std::map<std::string, Shape> shapes;
  PieceSet set;
  for (const auto& [key, t] : section.items()) {
    shapes[key] = t.at("shape").get<Shape>();
    set.declare(key, shapes[key]);
    const auto ranges = needed(key);
    for (const auto& p : t.at("pieces")) {
      const auto off = p.at("offset").get<std::int64_t>(), n = p.at("numel").get<std::int64_t>();
      for (const auto& [b, e] : ranges)
        if (off < e && b < off + n) {
          wanted[p.at("file").get<std::string>()].emplace_back(key, off);
          break;
        }
    }
  }
  for (const auto& [file, keys] : wanted) {
    const std::string fpath = (path / file).string();
    io::SafetensorsFile f = io::load_safetensors(fpath);
    std::map<std::string, Tensor> by_key(f.tensors.begin(), f.tensors.end());
    for (const auto& [key, offset] : keys) {
      auto it = by_key.find(key);
      FSDP_CHECK(it != by_key.end(), ValueError,
                 "checkpoint: {} has no tensor '{}' (index.json lists a piece of it there)", fpath,
                 key);
      try {
        set.add({key, shapes.at(key), offset, it->second.reshape({-1}), false});
      } catch (const Error& e) {
        throw ValueError(fmt::format("checkpoint: {}: {}", fpath, e.what()));
      }
    }
  }
  return set;
}

}  // namespace

TrainingProgress load_sharded_checkpoint(const std::string& path, FullyShardedDataParallel& root,
                                         optim::Optimizer* optimizer) {
  const fs::path dir(path);
  const json index = read_json(dir / "index.json");
  FSDP_CHECK(index.value("format", "") == kFormat, ValueError,
             "checkpoint: {} is not a sharded checkpoint index (format '{}', expected '{}')",
             (dir / "index.json").string(), index.value("format", ""), kFormat);
  // What this rank needs: its parameters' ranges; buffers and steps whole.
  std::map<std::string, std::vector<std::pair<std::int64_t, std::int64_t>>> ranges;
  for (const auto& p : param_shards(root)) {
    auto& r = ranges[p.fqn];
    if (p.info.in_shard) r.emplace_back(p.info.intra_param_start, p.info.intra_param_end + 1);
  }
  auto model_needed = [&](const std::string& key) {
    auto it = ranges.find(key);
    if (it != ranges.end()) return it->second;
    return std::vector<std::pair<std::int64_t, std::int64_t>>{
        {0, std::numeric_limits<std::int64_t>::max()}};  // a buffer, or unknown: read it
  };
  load_sharded_state_dict(root, read_pieces(dir, index.at("model"), model_needed));
  if (optimizer != nullptr) {
    FSDP_CHECK(index.contains("optim"), ValueError, "checkpoint: {} holds no optimizer state",
               path);
    const json& o = index.at("optim");
    ShardedOptimStateDict meta;
    meta.state_names = o.at("state_names").get<std::set<std::string>>();
    meta.param_groups = o.at("param_groups").get<std::vector<std::map<std::string, double>>>();
    meta.group_fqns = o.at("group_fqns").get<std::vector<std::vector<std::string>>>();
    auto optim_needed = [&](const std::string& key) {
      // "state.<fqn>.<name>": the parameter's ranges; "step" whole.
      for (const auto& [fqn, r] : ranges)
        for (const auto& name : meta.state_names)
          if (name != "step" && key == optim_state_key(fqn, name)) return r;
      return std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 1}};
    };
    load_sharded_optim_state_dict(root, *optimizer, read_pieces(dir, o.at("tensors"), optim_needed),
                                  meta);
  }
  TrainingProgress progress;
  const json& pr = index.at("progress");
  progress.step = pr.at("step").get<std::int64_t>();
  progress.data_position = pr.at("data_position").get<std::int64_t>();
  for (const auto& s : pr.at("rng"))
    progress.rng.push_back({s.at(0).get<std::uint64_t>(), s.at(1).get<std::uint64_t>()});
  return progress;
}

}  // namespace fsdp
