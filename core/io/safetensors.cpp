#include "core/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "core/error.h"
#include "core/io/checksum.h"
#include "core/io/posix_file.h"

namespace fsdp::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian bytes; a big-endian host would need swapping");

namespace {

constexpr const char* kMetadataKey = "__metadata__";
// The reference implementation's limit: a longer header is a damaged or hostile file.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

struct DTypeCode {
  DType dtype;
  std::string_view code;
};
constexpr DTypeCode kCodes[] = {{DType::Float32, "F32"}, {DType::Float64, "F64"},
                                {DType::Float16, "F16"}, {DType::BFloat16, "BF16"},
                                {DType::Int64, "I64"},   {DType::Int32, "I32"},
                                {DType::UInt8, "U8"},    {DType::Bool, "BOOL"}};

std::optional<DType> dtype_of_code(std::string_view code) {
  for (const auto& c : kCodes)
    if (c.code == code) return c.dtype;
  return std::nullopt;
}

// The rank of a dtype in the reference writer's order (safetensors' `prepare` sorts by its Dtype
// enum, descending: the widest alignment first), so every tensor starts aligned to its element.
int layout_rank(DType dtype) {
  constexpr DType kOrder[] = {DType::Int64,    DType::Float64, DType::Float32, DType::Int32,
                              DType::BFloat16, DType::Float16, DType::UInt8,   DType::Bool};
  return static_cast<int>(std::find(std::begin(kOrder), std::end(kOrder), dtype) -
                          std::begin(kOrder));
}

// The header JSON of `specs`, laid out as Python's safetensors writer does (by dtype rank, then
// name); `offsets` receives each spec's offset from the start of the data, by spec index.
std::string header_json(const std::vector<SafetensorsWriter::Spec>& specs,
                        const std::map<std::string, std::string>& metadata,
                        std::vector<std::uint64_t>& offsets) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    auto& m = header[kMetadataKey] = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
  }
  std::vector<std::size_t> order(specs.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const int ra = layout_rank(specs[a].dtype), rb = layout_rank(specs[b].dtype);
    return ra != rb ? ra < rb : specs[a].name < specs[b].name;
  });
  std::uint64_t offset = 0;
  offsets.assign(specs.size(), 0);
  for (std::size_t i : order) {
    const auto& spec = specs[i];
    const std::uint64_t bytes = std::uint64_t(shape_numel(spec.shape)) * dtype_size(spec.dtype);
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = safetensors_dtype_code(spec.dtype);
    entry["shape"] = spec.shape;
    entry["data_offsets"] = {offset, offset + bytes};
    offsets[i] = offset;
    offset += bytes;
    header[spec.name] = std::move(entry);
  }
  std::string json = header.dump();
  // Pad with spaces so that the data starts 8-byte aligned, as the reference writer does.
  json.append((8 - json.size() % 8) % 8, ' ');
  return json;
}

// Writes exactly n bytes at `offset`.
void write_at(int fd, const void* data, std::size_t n, std::uint64_t offset,
              const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    FSDP_CHECK(w > 0, RuntimeError, "save_safetensors: cannot write {}: {}", path,
               std::strerror(errno));
    p += w;
    n -= static_cast<std::size_t>(w);
    offset += static_cast<std::uint64_t>(w);
  }
}

void fsync_directory_of(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  FileDescriptor fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() >= 0) ::fsync(fd.get());  // best effort: some file systems refuse it
}

}  // namespace

std::string_view safetensors_dtype_code(DType dtype) {
  for (const auto& c : kCodes)
    if (c.dtype == dtype) return c.code;
  throw ValueError(fmt::format("safetensors has no code for dtype {}", dtype_name(dtype)));
}

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<Spec> specs,
                                     const std::map<std::string, std::string>& metadata,
                                     Checksums checksums)
    : path_(std::move(path)),
      tmp_(path_ + ".tmp"),
      specs_(std::move(specs)),
      metadata_(metadata),
      checksums_(checksums) {
  std::set<std::string> names;
  for (const auto& spec : specs_) {
    FSDP_CHECK(spec.name != kMetadataKey, ValueError,
               "save_safetensors: {}: '{}' is reserved for the metadata", path_, kMetadataKey);
    FSDP_CHECK(names.insert(spec.name).second, ValueError,
               "save_safetensors: {}: tensor '{}' is given twice", path_, spec.name);
  }
  if (checksums_ == Checksums::xxh3)
    for (const auto& spec : specs_) metadata_[checksum_key(spec.name)] = std::string(16, '0');
  const std::string json = header_json(specs_, metadata_, offsets_);
  const std::uint64_t data_start = sizeof(std::uint64_t) + json.size();
  for (auto& o : offsets_) o += data_start;
  written_.assign(specs_.size(), false);
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  FSDP_CHECK(fd_ >= 0, RuntimeError, "save_safetensors: cannot create {}: {}", tmp_,
             std::strerror(errno));
  try {
    std::uint64_t n = json.size();  // little-endian on this host (static_assert above)
    write_at(fd_, &n, sizeof n, 0, tmp_);
    write_at(fd_, json.data(), json.size(), sizeof n, tmp_);
  } catch (...) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
    throw;
  }
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(tmp_.c_str());
}

void SafetensorsWriter::write(std::size_t index, const Tensor& t) {
  FSDP_CHECK(index < specs_.size(), ValueError,
             "save_safetensors: {}: tensor index {} out of range ({} tensors)", path_, index,
             specs_.size());
  const Spec& spec = specs_[index];
  FSDP_CHECK(fd_ >= 0, RuntimeError, "save_safetensors: {}: written to after finish()", path_);
  FSDP_CHECK(!written_[index], ValueError, "save_safetensors: {}: tensor '{}' is written twice",
             path_, spec.name);
  FSDP_CHECK(t.defined(), ValueError, "save_safetensors: {}: tensor '{}' is undefined", path_,
             spec.name);
  FSDP_CHECK(!t.is_meta(), ValueError,
             "save_safetensors: {}: tensor '{}' is on the meta device (no data to write)", path_,
             spec.name);
  FSDP_CHECK(t.dtype() == spec.dtype && t.shape() == spec.shape, ValueError,
             "save_safetensors: {}: tensor '{}' is {} {} but the header says {} {}", path_,
             spec.name, dtype_name(t.dtype()), shape_str(t.shape()), dtype_name(spec.dtype),
             shape_str(spec.shape));
  Tensor c = t.detach();
  if (!c.device().is_cpu()) c = c.to(kCPU);
  c = c.contiguous();
  if (c.nbytes() > 0) write_at(fd_, c.data_ptr(), c.nbytes(), offsets_[index], tmp_);
  if (checksums_ == Checksums::xxh3) metadata_[checksum_key(spec.name)] = xxh3_hex(c);
  written_[index] = true;
}

void SafetensorsWriter::finish() {
  FSDP_CHECK(fd_ >= 0, RuntimeError, "save_safetensors: {}: finish() called twice", path_);
  for (std::size_t i = 0; i < specs_.size(); ++i)
    FSDP_CHECK(written_[i], RuntimeError, "save_safetensors: {}: tensor '{}' was never written",
               path_, specs_[i].name);
  if (checksums_ == Checksums::xxh3) {
    // The same header with the checksums in place of the placeholders: the same length.
    std::vector<std::uint64_t> offsets;
    const std::string json = header_json(specs_, metadata_, offsets);
    write_at(fd_, json.data(), json.size(), sizeof(std::uint64_t), tmp_);
  }
  FSDP_CHECK(::fsync(fd_) == 0, RuntimeError, "save_safetensors: cannot sync {}: {}", tmp_,
             std::strerror(errno));
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0 || ::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    throw RuntimeError(fmt::format("save_safetensors: cannot close {} or rename it to {}: {}", tmp_,
                                   path_, std::strerror(err)));
  }
  fsync_directory_of(path_);
}

std::map<std::string, std::string> save_safetensors(
    const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
    const std::map<std::string, std::string>& metadata, Checksums checksums) {
  std::vector<SafetensorsWriter::Spec> specs;
  specs.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    FSDP_CHECK(t.defined(), ValueError, "save_safetensors: {}: tensor '{}' is undefined", path,
               name);
    specs.push_back({name, t.dtype(), t.shape()});
  }
  SafetensorsWriter writer(path, std::move(specs), metadata, checksums);
  for (std::size_t i = 0; i < tensors.size(); ++i) writer.write(i, tensors[i].second);
  writer.finish();
  return writer.metadata();
}

namespace {

using Entry = SafetensorsEntry;

// One header entry, checked against the data section's size.
Entry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& v,
                  std::uint64_t data_size) {
  const std::string where = fmt::format("load_safetensors: {}: tensor '{}'", path, name);
  FSDP_CHECK(v.is_object(), ValueError, "{}: expected an object {{dtype, shape, data_offsets}}",
             where);
  for (const char* key : {"dtype", "shape", "data_offsets"})
    FSDP_CHECK(v.contains(key), ValueError, "{}: no '{}'", where, key);
  const auto& dt = v["dtype"];
  FSDP_CHECK(dt.is_string(), ValueError, "{}: dtype must be a string", where);
  auto dtype = dtype_of_code(dt.get<std::string>());
  FSDP_CHECK(dtype.has_value(), ValueError,
             "{}: unknown dtype '{}' (expected F32, F64, F16, BF16, I64, I32, U8 or BOOL)", where,
             dt.get<std::string>());

  Entry e{name, *dtype, {}, 0, 0};
  const auto& shape = v["shape"];
  FSDP_CHECK(shape.is_array(), ValueError, "{}: shape must be a list of sizes", where);
  std::uint64_t numel = 1;
  bool overflow = false;
  for (const auto& d : shape) {
    FSDP_CHECK(d.is_number_unsigned(), ValueError, "{}: shape {} must hold non-negative integers",
               where, shape.dump());
    const auto size = d.get<std::uint64_t>();
    overflow = overflow || size > static_cast<std::uint64_t>(INT64_MAX) ||
               __builtin_mul_overflow(numel, size, &numel);
    e.shape.push_back(static_cast<std::int64_t>(size));
  }
  const auto& off = v["data_offsets"];
  FSDP_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() &&
                 off[1].is_number_unsigned(),
             ValueError, "{}: data_offsets must be two non-negative integers, got {}", where,
             off.dump());
  e.begin = off[0].get<std::uint64_t>();
  e.end = off[1].get<std::uint64_t>();
  FSDP_CHECK(e.begin <= e.end, ValueError, "{}: data_offsets [{}, {}) end before they begin", where,
             e.begin, e.end);
  FSDP_CHECK(e.end <= data_size, ValueError,
             "{}: data_offsets [{}, {}) lie outside the {} bytes of data (truncated file?)", where,
             e.begin, e.end, data_size);
  std::uint64_t nbytes = 0;
  overflow = overflow || __builtin_mul_overflow(numel, dtype_size(*dtype), &nbytes);
  FSDP_CHECK(!overflow && nbytes == e.end - e.begin, ValueError,
             "{}: dtype {} and shape {} need {} bytes, but data_offsets [{}, {}) hold {}", where,
             dt.get<std::string>(), shape.dump(),
             overflow ? std::string("too many") : std::to_string(nbytes), e.begin, e.end,
             e.end - e.begin);
  return e;
}

std::map<std::string, std::string> parse_metadata(const std::string& path,
                                                  const nlohmann::json& v) {
  FSDP_CHECK(v.is_object(), ValueError,
             "load_safetensors: {}: __metadata__ must be an object of strings", path);
  std::map<std::string, std::string> out;
  for (const auto& [k, s] : v.items()) {
    FSDP_CHECK(s.is_string(), ValueError,
               "load_safetensors: {}: __metadata__ value of '{}' is not a string", path, k);
    out[k] = s.get<std::string>();
  }
  return out;
}

// Each "xxh3:<name>" of the metadata against tensor <name>'s bytes.
void verify_checksums(const std::string& path, const SafetensorsFile& file) {
  for (const auto& [key, recorded] : file.metadata) {
    if (!key.starts_with(kChecksumKeyPrefix)) continue;
    const std::string name = key.substr(kChecksumKeyPrefix.size());
    auto it = std::find_if(file.tensors.begin(), file.tensors.end(),
                           [&](const auto& nt) { return nt.first == name; });
    FSDP_CHECK(it != file.tensors.end(), ValueError,
               "load_safetensors: {}: the metadata has a checksum of tensor '{}', which the file "
               "lacks (damaged header?)",
               path, name);
    const std::string actual = xxh3_hex(it->second);
    FSDP_CHECK(actual == recorded, ValueError,
               "load_safetensors: {}: tensor '{}' is damaged: its bytes hash to {}, the header "
               "records {} (xxh3)",
               path, name, actual, recorded);
  }
}

}  // namespace

namespace {

// Where a reader's bytes come from: a file (pread) or memory. read(dst, n, offset) is false when
// the bytes end first.
struct ByteSource {
  std::uint64_t size;
  std::function<bool(void*, std::size_t, std::uint64_t)> read;
};

ByteSource file_source(int fd, std::uint64_t size) {
  return {size, [fd](void* dst, std::size_t n, std::uint64_t offset) {
            return read_at(fd, dst, n, offset);
          }};
}

// The one header parser behind load_safetensors, parse_safetensors and read_safetensors_header;
// `name` names the file in errors.
SafetensorsHeader parse_header(const std::string& name, const ByteSource& src) {
  const std::uint64_t size = src.size;
  std::uint64_t header_len = 0;
  FSDP_CHECK(size >= 8 && src.read(&header_len, 8, 0), ValueError,
             "load_safetensors: {}: the file has {} bytes, too few for the 8-byte header length",
             name, size);
  FSDP_CHECK(header_len <= size - 8, ValueError,
             "load_safetensors: {}: header length {} runs past the end of the file ({} bytes)",
             name, header_len, size);
  FSDP_CHECK(header_len <= kMaxHeaderBytes, ValueError,
             "load_safetensors: {}: header length {} exceeds the limit of {} bytes", name,
             header_len, kMaxHeaderBytes);
  std::string text(header_len, '\0');
  FSDP_CHECK(src.read(text.data(), text.size(), 8), ValueError,
             "load_safetensors: {}: cannot read the {}-byte header", name, header_len);
  nlohmann::json header;
  // The parser keeps the last of repeated keys; the reference refuses them, and so do we.
  std::set<std::string> keys;
  std::optional<std::string> repeated;
  auto note_keys = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (depth == 1 && event == nlohmann::json::parse_event_t::key && !repeated &&
        !keys.insert(parsed.get<std::string>()).second)
      repeated = parsed.get<std::string>();
    return true;
  };
  try {
    header = nlohmann::json::parse(text, note_keys);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range: 1e999
    throw ValueError(
        fmt::format("load_safetensors: {}: the header is not valid JSON: {}", name, e.what()));
  }
  FSDP_CHECK(!repeated, ValueError, "load_safetensors: {}: the header names '{}' twice", name,
             repeated.value_or(""));
  FSDP_CHECK(header.is_object(), ValueError,
             "load_safetensors: {}: the header must be a JSON object, got {}", name,
             header.type_name());
  // The reference refuses what it would not have written: a header not starting with '{'.
  FSDP_CHECK(text.starts_with('{'), ValueError,
             "load_safetensors: {}: the header must start with '{{'", name);

  SafetensorsHeader out;
  out.data_start = 8 + header_len;
  const std::uint64_t data_size = size - out.data_start;
  for (const auto& [key, v] : header.items()) {
    if (key == kMetadataKey)
      out.metadata = parse_metadata(name, v);
    else
      out.entries.push_back(parse_entry(name, key, v, data_size));
  }
  auto& entries = out.entries;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // As the reference: the tensors cover the data exactly, from 0, with no hole and nothing after.
  std::uint64_t covered = 0;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Entry& b = entries[i];
    if (i > 0) {
      const Entry& a = entries[i - 1];
      FSDP_CHECK(b.begin >= a.end, ValueError,
                 "load_safetensors: {}: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", name,
                 a.name, a.begin, a.end, b.name, b.begin, b.end);
    }
    FSDP_CHECK(b.begin == covered, ValueError,
               "load_safetensors: {}: tensor '{}' starts at byte {} of the data, but the tensors "
               "before it end at {} (a hole)",
               name, b.name, b.begin, covered);
    covered = b.end;
  }
  FSDP_CHECK(covered == data_size, ValueError,
             "load_safetensors: {}: the tensors end at byte {} of the data, but it has {} bytes "
             "(trailing bytes)",
             name, covered, data_size);
  return out;
}

// The whole file: the header, then every tensor's bytes.
SafetensorsFile parse(const std::string& name, const ByteSource& src) {
  SafetensorsHeader header = parse_header(name, src);
  SafetensorsFile out;
  out.metadata = std::move(header.metadata);
  for (const Entry& e : header.entries) {
    Tensor t = empty(e.shape, e.dtype);
    const std::uint64_t n = e.end - e.begin;
    FSDP_CHECK(n == 0 || src.read(t.data_ptr(), n, header.data_start + e.begin), ValueError,
               "load_safetensors: {}: tensor '{}': cannot read bytes [{}, {}) (truncated file?)",
               name, e.name, e.begin, e.end);
    out.tensors.emplace_back(e.name, std::move(t));
  }
  verify_checksums(name, out);
  return out;
}

// Opens `path` for reading; ValueError naming it when it is a directory or cannot be opened.
FileDescriptor open_for_reading(const std::string& path, std::uint64_t& size) {
  std::error_code ec;
  FSDP_CHECK(!std::filesystem::is_directory(path, ec), ValueError,
             "load_safetensors: {} is a directory, not a safetensors file", path);
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  FSDP_CHECK(fd.get() >= 0, ValueError, "load_safetensors: cannot open {}: {}", path,
             std::strerror(errno));
  struct stat st {};
  FSDP_CHECK(::fstat(fd.get(), &st) == 0, ValueError, "load_safetensors: cannot stat {}: {}", path,
             std::strerror(errno));
  size = static_cast<std::uint64_t>(st.st_size);
  return fd;
}

}  // namespace

SafetensorsFile load_safetensors(const std::string& path) {
  std::uint64_t size = 0;
  FileDescriptor fd = open_for_reading(path, size);
  return parse(path, file_source(fd.get(), size));
}

SafetensorsFile parse_safetensors(std::string_view bytes, const std::string& name) {
  return parse(name, {bytes.size(), [bytes](void* dst, std::size_t n, std::uint64_t offset) {
                        if (offset > bytes.size() || n > bytes.size() - offset) return false;
                        if (n > 0) std::memcpy(dst, bytes.data() + offset, n);
                        return true;
                      }});
}

SafetensorsHeader read_safetensors_header(int fd, const std::string& path) {
  struct stat st {};
  FSDP_CHECK(::fstat(fd, &st) == 0, ValueError, "load_safetensors: cannot stat {}: {}", path,
             std::strerror(errno));
  return parse_header(path, file_source(fd, static_cast<std::uint64_t>(st.st_size)));
}

}  // namespace fsdp::io
