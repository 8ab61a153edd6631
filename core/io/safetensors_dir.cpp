#include "core/io/safetensors_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <unordered_set>

#include "core/dtype_convert.h"
#include "core/error.h"
#include "core/io/checksum.h"
#include "core/io/posix_file.h"

namespace fsdp::io {

namespace fs = std::filesystem;

namespace {

// Converts in pieces of this many bytes of the file, so a large range needs no second full copy.
constexpr std::uint64_t kConvertChunkBytes = 8 << 20;

// n elements from `src` (dtype sd) into `dst` (dtype dd): the fast paths of
// core/dtype_convert.h, else through tensors (integers, bool).
void convert(void* dst, DType dd, const void* src, DType sd, std::int64_t n) {
  if (convert_contiguous(dst, dd, src, sd, n)) return;
  Tensor s = empty({n}, sd);
  std::memcpy(s.data_ptr(), src, static_cast<std::size_t>(n) * dtype_size(sd));
  Tensor d = s.to(dd);
  std::memcpy(dst, d.data_ptr(), static_cast<std::size_t>(n) * dtype_size(dd));
}

nlohmann::json read_index(const std::string& index_path) {
  std::ifstream in(index_path, std::ios::binary);
  FSDP_CHECK(in.good(), ValueError, "load_safetensors: cannot open {}: {}", index_path,
             std::strerror(errno));
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw ValueError(
        fmt::format("load_safetensors: {} is not valid JSON (at byte {})", index_path, e.byte));
  } catch (const nlohmann::json::exception&) {
    throw ValueError(fmt::format("load_safetensors: {} is not valid JSON", index_path));
  }
}

}  // namespace

SafetensorsDir::~SafetensorsDir() {
  for (const File& f : files_)
    if (f.fd >= 0) ::close(f.fd);
}

void SafetensorsDir::add_file(const std::string& path, const std::vector<std::string>* wanted,
                              const std::string& index_path) {
  std::error_code ec;
  FSDP_CHECK(!fs::is_directory(path, ec), ValueError,
             "load_safetensors: {} is a directory, not a safetensors file", path);
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int err = errno;
    FSDP_CHECK(wanted == nullptr || err != ENOENT, ValueError,
               "load_safetensors: {} maps '{}' to {}, which does not exist", index_path,
               wanted->front(), path);
    throw ValueError(fmt::format("load_safetensors: cannot open {}: {}", path, std::strerror(err)));
  }
  SafetensorsHeader header = read_safetensors_header(fd.get(), path);
  const std::size_t k = files_.size();
  files_.push_back({path, fd.release(), std::move(header.metadata)});
  std::unordered_set<std::string> in_file;
  for (const SafetensorsEntry& e : header.entries) {
    in_file.insert(e.name);
    if (wanted && std::find(wanted->begin(), wanted->end(), e.name) == wanted->end()) continue;
    SafetensorsTensorInfo info{path, e.dtype, e.shape, header.data_start + e.begin,
                               e.end - e.begin};
    payload_bytes_ += info.nbytes;
    names_.push_back(e.name);
    index_.emplace(e.name, Located{k, std::move(info)});
  }
  if (wanted)
    for (const std::string& name : *wanted)
      FSDP_CHECK(in_file.count(name), ValueError,
                 "load_safetensors: {} maps '{}' to {}, which has no such tensor", index_path, name,
                 path);
}

SafetensorsDir SafetensorsDir::open(const std::string& path) {
  SafetensorsDir dir;
  dir.path_ = path;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    FSDP_CHECK(fs::exists(path, ec), ValueError,
               "load_safetensors: {} does not exist (expected a directory with {} or {}, or a "
               ".safetensors file)",
               path, kSafetensorsFile, kSafetensorsIndexFile);
    dir.add_file(path, nullptr, "");
    return dir;
  }
  // As transformers' from_pretrained: model.safetensors first, else the index.
  const fs::path base(path);
  const std::string single = (base / kSafetensorsFile).string();
  if (fs::exists(single, ec)) {
    dir.add_file(single, nullptr, "");
    return dir;
  }
  const std::string index_path = (base / kSafetensorsIndexFile).string();
  FSDP_CHECK(fs::exists(index_path, ec), ValueError, "load_safetensors: {} has neither {} nor {}",
             path, kSafetensorsFile, kSafetensorsIndexFile);
  const nlohmann::json index = read_index(index_path);
  FSDP_CHECK(index.is_object(), ValueError, "load_safetensors: {} must hold a JSON object, got {}",
             index_path, index.type_name());
  // transformers requires "metadata" (KeyError without it); any object, {} included, is accepted
  // here, and its absence too: nothing in it is needed to read the tensors.
  FSDP_CHECK(!index.contains("metadata") || index.at("metadata").is_object(), ValueError,
             "load_safetensors: {}: \"metadata\" must be an object, got {}", index_path,
             index.contains("metadata") ? index.at("metadata").type_name() : "");
  FSDP_CHECK(index.contains("weight_map") && index.at("weight_map").is_object(), ValueError,
             "load_safetensors: {} has no \"weight_map\" object (tensor name -> file)", index_path);
  std::map<std::string, std::vector<std::string>> by_file;  // in file-name order
  for (const auto& [name, file] : index.at("weight_map").items()) {
    FSDP_CHECK(file.is_string(), ValueError,
               "load_safetensors: {}: weight_map['{}'] must be a file name, got {}", index_path,
               name, file.dump());
    const std::string f = file.get<std::string>();
    FSDP_CHECK(!f.empty() && f.find('/') == std::string::npos && f != "." && f != "..", ValueError,
               "load_safetensors: {}: weight_map['{}'] is '{}', not the name of a file beside "
               "the index",
               index_path, name, f);
    by_file[f].push_back(name);
  }
  for (const auto& [file, names] : by_file)
    dir.add_file((base / file).string(), &names, index_path);
  return dir;
}

const SafetensorsDir::Located& SafetensorsDir::locate(const std::string& name) const {
  auto it = index_.find(name);
  FSDP_CHECK(it != index_.end(), KeyError, "load_safetensors: {} has no tensor '{}'", path_, name);
  return it->second;
}

const SafetensorsTensorInfo& SafetensorsDir::info(const std::string& name) const {
  return locate(name).info;
}

std::vector<std::string> SafetensorsDir::files() const {
  std::vector<std::string> out;
  for (const File& f : files_) out.push_back(f.path);
  return out;
}

const std::map<std::string, std::string>& SafetensorsDir::metadata() const {
  static const std::map<std::string, std::string> kNone;
  return files_.empty() ? kNone : files_.front().metadata;
}

void SafetensorsDir::pread_bytes(const std::string& name, const Located& t,
                                 std::uint64_t byte_begin, std::uint64_t n, void* dst) const {
  if (n == 0) return;
  FSDP_CHECK(read_at(files_[t.file].fd, dst, n, t.info.offset + byte_begin), ValueError,
             "load_safetensors: {}: tensor '{}': cannot read bytes [{}, {}) of the file "
             "(truncated since it was opened?)",
             t.info.file, name, t.info.offset + byte_begin, t.info.offset + byte_begin + n);
  bytes_read_->fetch_add(n);
}

void SafetensorsDir::will_read_all() const {
  for (const File& f : files_) ::posix_fadvise(f.fd, 0, 0, POSIX_FADV_WILLNEED);  // a hint only
}

void SafetensorsDir::will_read(const std::string& name, std::int64_t first,
                               std::int64_t count) const {
  const Located& t = locate(name);
  if (first < 0 || count <= 0 || first > t.info.numel() || count > t.info.numel() - first) return;
  const std::uint64_t isz = dtype_size(t.info.dtype);
  ::posix_fadvise(files_[t.file].fd, static_cast<off_t>(t.info.offset + std::uint64_t(first) * isz),
                  static_cast<off_t>(std::uint64_t(count) * isz), POSIX_FADV_WILLNEED);
}

Tensor SafetensorsDir::read(const std::string& name) const {
  const Located& t = locate(name);
  Tensor out = empty(t.info.shape, t.info.dtype);
  read_into(name, out);
  return out;
}

void SafetensorsDir::read_into(const std::string& name, const Tensor& dst) const {
  const Located& t = locate(name);
  FSDP_CHECK(
      dst.defined() && dst.device() == kCPU && dst.is_contiguous() && dst.shape() == t.info.shape,
      ValueError, "load_safetensors: {}: tensor '{}' has shape {}; cannot read it into {}",
      t.info.file, name, shape_str(t.info.shape),
      dst.defined()
          ? fmt::format("a {} tensor of shape {}{}", dst.device().str(), shape_str(dst.shape()),
                        dst.is_contiguous() ? "" : " (not contiguous)")
          : std::string("an undefined tensor"));
  const auto& meta = files_[t.file].metadata;
  const auto sum = meta.find(checksum_key(name));
  if (dst.dtype() != t.info.dtype && sum != meta.end()) {
    Tensor(dst).copy_(read(name));  // the checksum is of the file's bytes
    return;
  }
  if (t.info.numel() == 0) return;
  read_range(name, 0, t.info.numel(), dst.dtype(), dst.data_ptr());
  if (sum != meta.end()) {
    const std::string actual = xxh3_hex(dst);
    FSDP_CHECK(actual == sum->second, ValueError,
               "load_safetensors: {}: tensor '{}' is damaged: its bytes hash to {}, the header "
               "records {} (xxh3)",
               t.info.file, name, actual, sum->second);
  }
}

void SafetensorsDir::read_range(const std::string& name, std::int64_t first, std::int64_t count,
                                DType out_dtype, void* dst) const {
  const Located& t = locate(name);
  const std::int64_t numel = t.info.numel();
  FSDP_CHECK(first >= 0 && count >= 0 && first <= numel && count <= numel - first, ValueError,
             "load_safetensors: {}: tensor '{}' has {} elements; [{}, {}) lies outside it",
             t.info.file, name, numel, first, first + count);
  if (count == 0) return;
  FSDP_CHECK(dst != nullptr, ValueError,
             "load_safetensors: {}: tensor '{}': read_range into a null destination", t.info.file,
             name);
  const std::uint64_t isz = dtype_size(t.info.dtype);
  if (out_dtype == t.info.dtype) {
    pread_bytes(name, t, std::uint64_t(first) * isz, std::uint64_t(count) * isz, dst);
    return;
  }
  const std::int64_t per_chunk = std::max<std::int64_t>(1, kConvertChunkBytes / isz);
  std::vector<char> buf(std::size_t(std::min(count, per_chunk)) * isz);
  char* out = static_cast<char*>(dst);
  for (std::int64_t done = 0; done < count;) {
    const std::int64_t n = std::min(per_chunk, count - done);
    pread_bytes(name, t, std::uint64_t(first + done) * isz, std::uint64_t(n) * isz, buf.data());
    convert(out, out_dtype, buf.data(), t.info.dtype, n);
    out += std::size_t(n) * dtype_size(out_dtype);
    done += n;
  }
}

namespace {

// Writes `text` to `path` through a temporary file, fsynced, then renamed.
void write_atomically(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    FSDP_CHECK(out.good(), RuntimeError, "save_safetensors: cannot write {}", tmp.string());
  }
  FileDescriptor fd(::open(tmp.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() >= 0) ::fsync(fd.get());
  std::error_code ec;
  fs::rename(tmp, path, ec);
  FSDP_CHECK(!ec, RuntimeError, "save_safetensors: cannot rename {} to {}: {}", tmp.string(),
             path.string(), ec.message());
}

using Named = std::vector<std::pair<std::string, Tensor>>;

// huggingface_hub's split_state_dict_into_shards_factory, for tensors that share no storage.
std::vector<Named> split_into_shards(const Named& tensors, std::int64_t max_shard_bytes) {
  std::vector<Named> shards;
  Named current;
  std::int64_t current_bytes = 0;
  for (const auto& [name, t] : tensors) {
    const auto bytes = static_cast<std::int64_t>(t.nbytes());
    if (bytes > max_shard_bytes) {
      shards.push_back({{name, t}});
      continue;
    }
    if (current_bytes + bytes > max_shard_bytes) {
      shards.push_back(std::move(current));
      current.clear();
      current_bytes = 0;
    }
    current.emplace_back(name, t);
    current_bytes += bytes;
  }
  if (!current.empty() || shards.empty()) shards.push_back(std::move(current));
  return shards;
}

// model-00001-of-00003.safetensors and the like: the names a sharded save uses.
bool is_shard_file_name(const std::string& name) {
  static const std::regex pattern(R"(model-\d{5}-of-\d{5}\.safetensors)");
  return std::regex_match(name, pattern);
}

}  // namespace

std::vector<std::string> save_safetensors_dir(
    const std::string& dir, const std::vector<std::pair<std::string, Tensor>>& tensors,
    std::int64_t max_shard_bytes, const std::map<std::string, std::string>& metadata,
    Checksums checksums) {
  FSDP_CHECK(max_shard_bytes > 0, ValueError,
             "save_safetensors: {}: the shard size limit must be positive, got {}", dir,
             max_shard_bytes);
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    FSDP_CHECK(seen.insert(name).second, ValueError,
               "save_safetensors: {}: tensor '{}' is given twice", dir, name);
    FSDP_CHECK(t.defined(), ValueError, "save_safetensors: {}: tensor '{}' is undefined", dir,
               name);
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  FSDP_CHECK(!ec, RuntimeError, "save_safetensors: cannot create the directory {}: {}", dir,
             ec.message());
  const fs::path base(dir);
  const std::vector<Named> shards = split_into_shards(tensors, max_shard_bytes);
  std::vector<std::string> names;
  if (shards.size() == 1) {
    names.push_back(kSafetensorsFile);
    save_safetensors((base / kSafetensorsFile).string(), shards.front(), metadata, checksums);
    fs::remove(base / kSafetensorsIndexFile, ec);  // a sharded save of earlier would shadow it
  } else {
    // nlohmann::json keeps keys sorted, as json.dumps(sort_keys=True).
    nlohmann::json weight_map = nlohmann::json::object();
    std::int64_t total_size = 0, total_parameters = 0;
    std::unordered_set<const TensorImpl*> counted;
    const std::size_t n = shards.size();
    for (std::size_t k = 0; k < n; ++k) {
      names.push_back(fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, n));
      save_safetensors((base / names.back()).string(), shards[k], metadata, checksums);
      for (const auto& [name, t] : shards[k]) {
        weight_map[name] = names.back();
        total_size += static_cast<std::int64_t>(t.nbytes());
        if (counted.insert(t.impl()).second) total_parameters += t.numel();
      }
    }
    nlohmann::json index = {
        {"metadata", {{"total_parameters", total_parameters}, {"total_size", total_size}}},
        {"weight_map", std::move(weight_map)}};
    // As json.dumps (ensure_ascii): a name outside ASCII is written with backslash-u escapes.
    write_atomically(base / kSafetensorsIndexFile, index.dump(2, ' ', true) + "\n");
    fs::remove(base / kSafetensorsFile, ec);
  }
  // Shard files of an earlier save with another split would lie beside the new ones.
  const std::set<std::string> written(names.begin(), names.end());
  for (const auto& entry : fs::directory_iterator(base, ec)) {
    const std::string file = entry.path().filename().string();
    if (is_shard_file_name(file) && !written.count(file)) fs::remove(entry.path(), ec);
  }
  return names;
}

std::int64_t parse_size(std::string_view text) {
  const std::string shown(text);
  auto fail = [&]() -> ValueError {
    return ValueError(fmt::format(
        "invalid size '{}': expected a number and a unit among B, KB, MB, GB, TB (powers of "
        "1000) and KiB, MiB, GiB, TiB (powers of 1024), e.g. 5GB",
        shown));
  };
  auto trim = [](std::string_view s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return s;
  };
  std::string_view s = trim(text);
  std::size_t i = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  const std::string_view whole = s.substr(0, i);
  std::string_view frac;
  if (i < s.size() && s[i] == '.') {
    const std::size_t start = ++i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    frac = s.substr(start, i - start);
  }
  if (whole.empty() && frac.empty()) throw fail();
  std::string unit(trim(s.substr(i)));
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  static const std::map<std::string, unsigned __int128> kUnits = {{"", 1},
                                                                  {"B", 1},
                                                                  {"KB", 1'000},
                                                                  {"MB", 1'000'000},
                                                                  {"GB", 1'000'000'000},
                                                                  {"TB", 1'000'000'000'000},
                                                                  {"KIB", 1ULL << 10},
                                                                  {"MIB", 1ULL << 20},
                                                                  {"GIB", 1ULL << 30},
                                                                  {"TIB", 1ULL << 40}};
  auto u = kUnits.find(unit);
  if (u == kUnits.end()) throw fail();
  // Exact: (whole + frac / 10^digits) * unit, truncated, in 128-bit integers.
  const unsigned __int128 limit = static_cast<unsigned __int128>(INT64_MAX);
  unsigned __int128 w = 0;
  for (char c : whole) {
    w = w * 10 + static_cast<unsigned>(c - '0');
    if (w > limit) throw fail();
  }
  unsigned __int128 value = w * u->second;
  if (value > limit) throw fail();
  unsigned __int128 f = 0, scale = 1;
  for (char c : frac.substr(0, 18)) {  // digits past 10^-18 change no byte count
    f = f * 10 + static_cast<unsigned>(c - '0');
    scale *= 10;
  }
  value += f * u->second / scale;
  if (value > limit) throw fail();
  return static_cast<std::int64_t>(value);
}

}  // namespace fsdp::io
