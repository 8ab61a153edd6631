// The safetensors checkpoint format: an 8-byte little-endian header length N, N bytes of JSON
// {name: {"dtype", "shape", "data_offsets": [begin, end)}, "__metadata__": {string: string}},
// then the tensors' raw little-endian bytes. PyTorch, JAX and the Hugging Face tools read it,
// so a checkpoint written here loads there (docs/design.md, decision 2).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace fsdp::io {

// Checksums::xxh3: the metadata also records each tensor's XXH3-64 ("xxh3:<name>": 16 hex digits,
// core/io/checksum.h), which load_safetensors verifies. Off by default: the bytes then equal
// Python's safetensors writer's.
enum class Checksums { none, xxh3 };

// Writes the tensors, contiguous, to `path` atomically (a temporary file beside it, fsynced, then
// renamed), laid out as Python's safetensors writer does: by dtype (8-byte elements first, so
// each starts aligned to its element size), then by name; the header padded with spaces to a
// multiple of 8. With Checksums::none and at most one metadata entry the bytes equal Python's
// `safetensors.torch.save_file` for the same dict (it orders several metadata entries by hash).
// ValueError for duplicate or reserved names and meta tensors. Returns the metadata written
// (with the checksums, when recorded).
std::map<std::string, std::string> save_safetensors(
    const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
    const std::map<std::string, std::string>& metadata = {}, Checksums checksums = Checksums::none);

// A safetensors file written as its tensors become available, in any order: the header (names,
// dtypes, shapes, hence every offset, in save_safetensors' layout) first, each tensor's bytes
// straight from its buffer to its place in the file (pwrite, no copy), then fsync and an atomic
// rename in finish(). The bytes equal save_safetensors' for the same tensors in the same order
// (save_safetensors is this writer). Destroyed without finish(), it removes its temporary file.
class SafetensorsWriter {
 public:
  struct Spec {
    std::string name;
    DType dtype;
    Shape shape;
  };
  SafetensorsWriter(std::string path, std::vector<Spec> specs,
                    const std::map<std::string, std::string>& metadata = {},
                    Checksums checksums = Checksums::none);
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Writes tensor `index` of the specs; ValueError when its dtype or shape differs from the
  // spec's or it was written before.
  void write(std::size_t index, const Tensor& t);
  // RuntimeError naming the first tensor never written; else syncs and renames into place.
  void finish();
  // The header's metadata: after finish(), with every checksum.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::string path_, tmp_;
  std::vector<Spec> specs_;
  std::vector<std::uint64_t> offsets_;  // of each tensor's bytes in the file
  std::vector<bool> written_;
  // Checksums::xxh3: the header is written with placeholders of the same width and rewritten
  // in finish(), once every tensor's checksum is known.
  std::map<std::string, std::string> metadata_;
  Checksums checksums_;
  int fd_ = -1;
};

struct SafetensorsFile {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in the order of their bytes in the file
  std::map<std::string, std::string> metadata;
};

// Reads a whole file into CPU tensors, in the order of their bytes. Every malformation is a
// ValueError naming the file (and
// the tensor, where one is involved); a header above 100 MB is refused, as the reference does.
// Checksums in the metadata ("xxh3:<name>") are verified: a tensor whose bytes differ is a
// ValueError naming the file and the tensor.
SafetensorsFile load_safetensors(const std::string& path);

// The same reader over bytes in memory; `name` stands for the file in errors (tests, fuzzing).
SafetensorsFile parse_safetensors(std::string_view bytes, const std::string& name);

// One tensor of a file's header: offsets [begin, end) from the start of the data section.
struct SafetensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;
  std::uint64_t begin = 0, end = 0;
};
struct SafetensorsHeader {
  std::uint64_t data_start = 0;           // the data section's offset in the file
  std::vector<SafetensorsEntry> entries;  // by offset
  std::map<std::string, std::string> metadata;
};

// Reads and validates only the header of the file open as `fd` (named `path` in errors), with
// load_safetensors' checks and messages: the tensors must cover the data exactly (no overlap,
// hole or trailing bytes), as the reference requires.
SafetensorsHeader read_safetensors_header(int fd, const std::string& path);

// The format's dtype codes: "F32", "F64", "F16", "BF16", "I64", "I32", "U8", "BOOL".
std::string_view safetensors_dtype_code(DType dtype);

}  // namespace fsdp::io
