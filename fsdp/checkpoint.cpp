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
#include <regex>
#include <set>

#include "core/error.h"
#include "core/io/checksum.h"
#include "core/io/safetensors.h"
#include "fsdp/checkpoint_lock.h"
#include "fsdp/optim_state_dict.h"
#include "fsdp/param_shards.h"
#include "fsdp/state_dict_sharded.h"

namespace fsdp {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

std::string checkpoint_name(std::int64_t step) {
  return fmt::format("step-{:08d}", step);
}

namespace {

constexpr const char* kFormat = "fsdp-cpp/sharded-checkpoint/2";
constexpr const char* kFormatUnverified = "fsdp-cpp/sharded-checkpoint/1";  // no checksums
constexpr const char* kIndexFile = "index.json";

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
  } catch (const json::exception&) {
    throw ValueError(fmt::format("checkpoint: {} is damaged: not valid JSON", p.string()));
  }
}

// The index's checksum: of its compact text without the "checksum" field.
std::string index_checksum(json index) {
  index.erase("checksum");
  const std::string text = index.dump();
  return io::xxh3_hex(text.data(), text.size());
}

// Parses and verifies DIR/index.json (this version's format, its checksum) into `index`; what is
// wrong with it, or "".
std::string index_problem(const fs::path& dir, json& index) {
  const fs::path p = dir / kIndexFile;
  std::error_code ec;
  if (!fs::exists(p, ec)) return "no index.json (an incomplete save?)";
  std::ifstream in(p, std::ios::binary);
  if (!in.good()) return fmt::format("cannot open index.json: {}", std::strerror(errno));
  try {
    index = json::parse(in);
  } catch (const json::exception&) {
    return "index.json is damaged: not valid JSON";
  }
  if (!index.is_object() || !index.contains("format") || !index.at("format").is_string())
    return "index.json is not a sharded checkpoint index (no format)";
  const std::string format = index.at("format").get<std::string>();
  if (format == kFormatUnverified)
    return fmt::format(
        "index.json has format '{}', written before checkpoints recorded checksums and the job's "
        "identity: it cannot be verified, so it is not loaded (train afresh)",
        format);
  if (format != kFormat)
    return fmt::format("index.json is not a sharded checkpoint index (format '{}', expected '{}')",
                       format, kFormat);
  if (!index.contains("checksum") || !index.at("checksum").is_string() ||
      index.at("checksum").get<std::string>() != index_checksum(index))
    return "index.json is damaged: its checksum does not match its contents";
  return "";
}

json read_index(const fs::path& dir) {
  json index;
  const std::string problem = index_problem(dir, index);
  FSDP_CHECK(problem.empty(), ValueError, "checkpoint: {}: {}", dir.string(), problem);
  return index;
}

// step-NNNNNNNN: a checkpoint's name; .tmp-step-NNNNNNNN: a save in progress (or interrupted).
bool is_step_name(const std::string& name) {
  static const std::regex pattern("step-[0-9]{8}");
  return std::regex_match(name, pattern);
}
bool is_tmp_step_name(const std::string& name) {
  return name.starts_with(".tmp-") && is_step_name(name.substr(5));
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
  const auto written =
      io::save_safetensors(file.string(), tensors, {{"format", "pt"}}, io::Checksums::xxh3);
  for (auto& e : entries)  // the file's checksums, also in the index
    e["xxh3"] = written.at(io::checksum_key(e.at("key").get<std::string>()));
  fsync_path(file, false);
  return entries;
}

// Removes leftovers of interrupted saves and all but the newest `keep` checkpoints; only what a
// save writes (scan_checkpoint_dir's checkpoints), never what someone else put there.
void prune(const fs::path& dir, int keep, const std::string& current) {
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (is_tmp_step_name(name) && name != ".tmp-" + current) fs::remove_all(e.path());
  }
  if (keep <= 0) return;
  const auto steps = scan_checkpoint_dir(dir.string()).checkpoints;
  for (std::size_t i = 0; i + static_cast<std::size_t>(keep) < steps.size(); ++i)
    fs::remove_all(steps[i]);
}

}  // namespace

namespace {

std::string save(const std::string& dir, FullyShardedDataParallel& root,
                 const optim::Optimizer* optimizer, const TrainingProgress& progress,
                 comm::ProcessGroup& world, const CheckpointOptions& options) {
  const int rank = world.rank();
  auto stage = [&](const char* what) {
    if (options.on_stage) options.on_stage(what);
  };
  const std::string name = checkpoint_name(progress.step);
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
    json job = json::object();
    for (const auto& [field, value] : options.job) job[field] = value;
    index["job"] = job;
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
          t["pieces"].push_back({{"file", rank_file(kind, r)},
                                 {"offset", e.at("offset")},
                                 {"numel", e.at("numel")},
                                 {"xxh3", e.at("xxh3")}});
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
    index["checksum"] = index_checksum(index);
    write_json(tmp / kIndexFile, index);
    fsync_path(tmp, true);
    stage("index");
    if (fs::exists(final_dir)) {  // a checkpoint of the same step is replaced; nothing else
      json old;
      const std::string problem = index_problem(final_dir, old);
      FSDP_CHECK(problem.empty(), RuntimeError,
                 "checkpoint: {} is in the way and was not written by a save ({}): move it away",
                 final_dir.string(), problem);
      fs::remove_all(final_dir);
    }
    fs::rename(tmp, final_dir);
    fsync_path(base, true);
    stage("rename");
    prune(base, options.keep, name);
    stage("pruned");
  }
  world.barrier();
  return final_dir.string();
}

}  // namespace

std::string save_sharded_checkpoint(const std::string& dir, FullyShardedDataParallel& root,
                                    const optim::Optimizer* optimizer,
                                    const TrainingProgress& progress, comm::ProcessGroup& world,
                                    const CheckpointOptions& options) {
  try {
    return save(dir, root, optimizer, progress, world, options);
  } catch (const fs::filesystem_error& e) {  // its what() is the library's text: say it our way
    throw RuntimeError(
        fmt::format("checkpoint: cannot write {}: {}", e.path1().string(), e.code().message()));
  }
}

CheckpointDirScan scan_checkpoint_dir(const std::string& dir) {
  CheckpointDirScan scan;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return scan;
  FSDP_CHECK(fs::is_directory(dir, ec), ValueError, "checkpoint: '{}' is not a directory", dir);
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(dir, ec)) entries.push_back(e.path());
  FSDP_CHECK(!ec, ValueError, "checkpoint: cannot list '{}': {}", dir, ec.message());
  std::sort(entries.begin(), entries.end());  // step-NNNNNNNN: oldest first
  for (const auto& path : entries) {
    const std::string name = path.filename().string();
    if (name == kCheckpointLockFile || is_tmp_step_name(name)) continue;
    auto ignore = [&](std::string why) {
      scan.ignored.emplace_back(path.string(), std::move(why));
    };
    if (!is_step_name(name) || !fs::is_directory(path, ec)) {
      ignore("not a checkpoint's name (step-NNNNNNNN, a directory)");
      continue;
    }
    json index;
    if (std::string problem = index_problem(path, index); !problem.empty()) {
      ignore(problem);
      continue;
    }
    const std::int64_t step = index.at("progress").at("step").get<std::int64_t>();
    if (checkpoint_name(step) != name) {
      ignore(fmt::format("its index.json is of step {} (a copy?)", step));
      continue;
    }
    scan.checkpoints.push_back(path.string());
  }
  return scan;
}

std::optional<std::string> latest_checkpoint(const std::string& dir) {
  auto steps = scan_checkpoint_dir(dir).checkpoints;
  if (steps.empty()) return std::nullopt;
  return steps.back();
}

JobIdentity read_checkpoint_job(const std::string& path) {
  const json index = read_index(path);
  JobIdentity job;
  if (index.contains("job"))
    for (const auto& [field, value] : index.at("job").items())
      job.emplace_back(field, value.get<std::string>());
  return job;
}

namespace {

// The pieces of `section` (model or optim tensors) that hold elements this rank needs,
// `needed(key)` giving the ranges [begin, end) of that key, read from their files.
PieceSet read_pieces(
    const fs::path& path, const json& section,
    const std::function<std::vector<std::pair<std::int64_t, std::int64_t>>(const std::string&)>&
        needed) {
  // Which files to open: those with a piece that overlaps a needed range.
  struct Wanted {
    std::string key;
    std::int64_t offset;
    std::string xxh3;  // as index.json records it
  };
  std::map<std::string, std::vector<Wanted>> wanted;  // by file
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
          wanted[p.at("file").get<std::string>()].push_back(
              {key, off, p.at("xxh3").get<std::string>()});
          break;
        }
    }
  }
  for (const auto& [file, keys] : wanted) {
    const std::string fpath = (path / file).string();
    // The file's own checksums are verified as it is read (a damaged tensor is named there).
    io::SafetensorsFile f = io::load_safetensors(fpath);
    std::map<std::string, Tensor> by_key(f.tensors.begin(), f.tensors.end());
    for (const auto& [key, offset, xxh3] : keys) {
      auto it = by_key.find(key);
      FSDP_CHECK(it != by_key.end(), ValueError,
                 "checkpoint: {} has no tensor '{}' (index.json lists a piece of it there)", fpath,
                 key);
      auto sum = f.metadata.find(io::checksum_key(key));
      FSDP_CHECK(sum != f.metadata.end() && sum->second == xxh3, ValueError,
                 "checkpoint: {}: tensor '{}' is not the piece index.json records (checksum {} in "
                 "the file, {} in the index): a file of another checkpoint?",
                 fpath, key, sum == f.metadata.end() ? "(none)" : sum->second, xxh3);
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

namespace {

TrainingProgress load(const std::string& path, FullyShardedDataParallel& root,
                      optim::Optimizer* optimizer) {
  const fs::path dir(path);
  const json index = read_index(dir);
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

}  // namespace

TrainingProgress load_sharded_checkpoint(const std::string& path, FullyShardedDataParallel& root,
                                         optim::Optimizer* optimizer) {
  try {
    return load(path, root, optimizer);
  } catch (const json::exception&) {  // a verified index of this format has every field
    throw ValueError(fmt::format("checkpoint: {} does not have the layout this version writes",
                                 (fs::path(path) / kIndexFile).string()));
  }
}

}  // namespace fsdp
