// Hugging Face's checkpoint directories (transformers' save_pretrained / from_pretrained): the
// tensors in model.safetensors, or, above a size limit, in model-0000k-of-0000n.safetensors
// files with model.safetensors.index.json mapping each tensor to its file:
//   {"metadata": {"total_parameters": N, "total_size": bytes}, "weight_map": {name: file}}
// The reader parses only the headers and reads any element range of a tensor on demand, so a
// rank of a sharded job reads the bytes of its own shards and no others.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/io/safetensors.h"
#include "core/tensor.h"

namespace fsdp::io {

inline constexpr const char* kSafetensorsFile = "model.safetensors";
inline constexpr const char* kSafetensorsIndexFile = "model.safetensors.index.json";
// transformers 5's save_pretrained default, "50GB" (decimal: huggingface_hub's units).
inline constexpr std::int64_t kDefaultMaxShardBytes = 50'000'000'000;

// Where one tensor of a directory lies.
struct SafetensorsTensorInfo {
  std::string file;  // the path of its file
  DType dtype;
  Shape shape;
  std::uint64_t offset = 0;  // of its first byte in the file
  std::uint64_t nbytes = 0;
  std::int64_t numel() const { return shape_numel(shape); }
};

class SafetensorsDir {
 public:
  // Opens a directory (model.safetensors, else model.safetensors.index.json and its files, as
  // transformers looks for them) or one .safetensors file, reading the headers only; each file is
  // opened once and stays open. Every malformation is a ValueError naming the file (the index, the
  // tensor).
  static SafetensorsDir open(const std::string& path);
  SafetensorsDir(SafetensorsDir&&) = default;
  SafetensorsDir& operator=(SafetensorsDir&&) = delete;
  ~SafetensorsDir();  // closes the files

  const std::string& path() const { return path_; }
  // The tensors, by file (in name order) then by offset in the file.
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const { return index_.count(name) > 0; }
  // KeyError naming the tensor and the directory when absent.
  const SafetensorsTensorInfo& info(const std::string& name) const;
  // The files, in name order, and the first one's __metadata__.
  std::vector<std::string> files() const;
  const std::map<std::string, std::string>& metadata() const;

  // The whole tensor on the CPU; a checksum recorded in its file's metadata ("xxh3:<name>") is
  // verified.
  Tensor read(const std::string& name) const;
  // The whole tensor into `dst` (contiguous, on the CPU, the tensor's shape, any dtype): read
  // straight into dst's storage where the dtypes match (no intermediate copy), converted in
  // chunks otherwise; the checksum as read() verifies it. ValueError naming the tensor when dst
  // does not fit.
  void read_into(const std::string& name, const Tensor& dst) const;
  // Elements [first, first + count) of the tensor (row-major) into `dst` as `out_dtype`, reading
  // exactly their bytes (pread, safe from several threads). ValueError when the range lies
  // outside the tensor.
  void read_range(const std::string& name, std::int64_t first, std::int64_t count, DType out_dtype,
                  void* dst) const;

  // Tells the kernel that every file will be read whole soon (posix_fadvise WILLNEED): it reads
  // ahead while the caller allocates and copies. For a reader of everything; a rank reading its
  // own shards would pull in the others' bytes.
  void will_read_all() const;
  // The same hint for elements [first, first + count) of one tensor (a rank's own shard): queued
  // before the reads, the kernel reads the rank's ranges ahead. Ignores ranges outside the tensor
  // (read_range reports them).
  void will_read(const std::string& name, std::int64_t first, std::int64_t count) const;

  // Tensor bytes read from the files so far (read and read_range, every thread).
  std::uint64_t bytes_read() const { return bytes_read_->load(); }
  // The tensors' bytes in all files.
  std::uint64_t payload_bytes() const { return payload_bytes_; }

 private:
  SafetensorsDir() = default;
  struct File {
    std::string path;
    int fd = -1;  // owned: closed by the destructor
    std::map<std::string, std::string> metadata;
  };
  struct Located {
    std::size_t file;
    SafetensorsTensorInfo info;
  };
  void add_file(const std::string& path, const std::vector<std::string>* wanted,
                const std::string& index_path);
  const Located& locate(const std::string& name) const;
  void pread_bytes(const std::string& name, const Located& t, std::uint64_t byte_begin,
                   std::uint64_t n, void* dst) const;

  std::string path_;
  std::vector<File> files_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, Located> index_;
  std::uint64_t payload_bytes_ = 0;
  std::unique_ptr<std::atomic<std::uint64_t>> bytes_read_ =
      std::make_unique<std::atomic<std::uint64_t>>(0);
};

// Writes `tensors` under `dir` (created) as transformers' save_pretrained does: split by
// huggingface_hub's split_torch_state_dict_into_shards (greedy in order: a tensor that would tip
// the current file over max_shard_bytes starts a new one; a tensor larger than the limit gets a
// file of its own, placed before the file being filled); one file is model.safetensors with no
// index, several are model-0000k-of-0000n.safetensors plus the index (json.dumps(indent=2,
// sort_keys=True) + "\n"; total_parameters counts the elements of the distinct tensors given).
// Each file is written atomically, the index last; files of an earlier save that this one does
// not use are removed. `metadata` goes into every file's header. Returns the files' names.
std::vector<std::string> save_safetensors_dir(
    const std::string& dir, const std::vector<std::pair<std::string, Tensor>>& tensors,
    std::int64_t max_shard_bytes = kDefaultMaxShardBytes,
    const std::map<std::string, std::string>& metadata = {{"format", "pt"}},
    Checksums checksums = Checksums::none);

// A size for --max-shard-size: an integer or decimal number and an optional unit, spaces allowed
// between, units case-insensitive: none or B (bytes); KB MB GB TB (10^3 ... 10^12, as
// huggingface_hub's parse_size_to_int); KiB MiB GiB TiB (2^10 ... 2^40). A fraction is truncated
// to whole bytes ("1.5KB" is 1500). ValueError naming the text otherwise.
std::int64_t parse_size(std::string_view text);

}  // namespace fsdp::io
