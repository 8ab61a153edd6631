#define BOOST_TEST_MODULE core_io
#include <unistd.h>

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "core/error.h"
#include "core/io/checksum.h"
#include "core/io/safetensors.h"
#include "core/ops.h"

#ifndef FSDP_IO_TEST_DIR
#error "FSDP_IO_TEST_DIR must be defined by the build"
#endif

namespace fs = std::filesystem;
using namespace fsdp;

namespace {

// A fresh directory per test case, removed afterwards.
struct TempDir {
  fs::path dir;
  TempDir() {
    static int counter = 0;
    dir = fs::temp_directory_path() /
          ("fsdp_io_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(dir);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string path(const std::string& name) const { return (dir / name).string(); }
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A file with the given header text and data bytes; header_len overrides the length field.
std::string raw_file(const std::string& header, const std::string& data,
                     std::uint64_t header_len = ~0ULL) {
  if (header_len == ~0ULL) header_len = header.size();
  std::string out(reinterpret_cast<const char*>(&header_len), 8);
  return out + header + data;
}

// Throws ValueError whose message contains every part.
template <typename F>
void expect_value_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    BOOST_ERROR("no ValueError; expected one containing '" << parts.front() << "'");
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) BOOST_TEST(msg.find(p) != std::string::npos, msg << " lacks " << p);
  }
}

// The tensors of gen_safetensors_fixture.py, in its order.
std::vector<std::pair<std::string, Tensor>> python_fixture_tensors() {
  return {
      {"f32", from_vector({0.0, 1.5, -2.25, 3.0e-8, 1.0e30, -0.0}, {2, 3}, DType::Float32)},
      {"f64", from_vector({1.0 / 3.0, -1.0e-300, 2.5}, {3}, DType::Float64)},
      {"f16", from_vector({1.0, -2.5, 6.103515625e-05, 65504.0}, {2, 2}, DType::Float16)},
      {"bf16", from_vector({1.0, -3.140625}, {2}, DType::BFloat16)},
      {"i64", from_vector(std::vector<std::int64_t>{-1, 1LL << 40, 0, 7}, {2, 2})},
      {"i32", from_vector(std::vector<std::int64_t>{-5, 2147483647, 0}, {3}, DType::Int32)},
      {"u8", from_vector(std::vector<std::int64_t>{0, 1, 128, 255}, {4}, DType::UInt8)},
      {"bool", from_vector({1.0, 0.0, 1.0}, {3}, DType::Bool)},
      {"empty", zeros({0, 4})},
      {"scalar", from_vector({42.0}, {}, DType::Float32)},
  };
}
const std::map<std::string, std::string> kPythonMetadata = {{"format", "pt"}};

// The same names, dtypes, shapes and values, in any order (files lay tensors out by dtype).
void check_same_tensors(std::vector<std::pair<std::string, Tensor>> got,
                        std::vector<std::pair<std::string, Tensor>> want) {
  auto by_name = [](const auto& a, const auto& b) { return a.first < b.first; };
  std::sort(got.begin(), got.end(), by_name);
  std::sort(want.begin(), want.end(), by_name);
  BOOST_REQUIRE_EQUAL(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    BOOST_TEST_CONTEXT("tensor " << want[i].first) {
      BOOST_TEST(got[i].first == want[i].first);
      BOOST_TEST(got[i].second.dtype() == want[i].second.dtype());
      BOOST_TEST(got[i].second.shape() == want[i].second.shape());
      BOOST_TEST(got[i].second.to_vector() == want[i].second.to_vector(),
                 boost::test_tools::per_element());
    }
  }
}

// The tensor named `name` of a file's list.
const Tensor& tensor_named(const std::vector<std::pair<std::string, Tensor>>& tensors,
                           const std::string& name) {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  throw std::runtime_error("no tensor " + name);
}

const std::string kPythonFile = std::string(FSDP_IO_TEST_DIR) + "/python_written.safetensors";

}  // namespace

BOOST_AUTO_TEST_CASE(round_trip_every_dtype) {
  TempDir tmp;
  const std::string path = tmp.path("all.safetensors");
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (DType d : kAllDTypes) {
    Tensor t = d == DType::Bool ? from_vector({1.0, 0.0, 0.0, 1.0, 1.0, 0.0}, {2, 3}, d)
                                : from_vector({-1.0, 0.0, 1.0, 2.0, 3.5, 100.0}, {2, 3}, d);
    if (d == DType::UInt8 || d == DType::Int64 || d == DType::Int32)
      t = from_vector({4.0, 0.0, 1.0, 2.0, 3.0, 100.0}, {2, 3}, d);
    tensors.emplace_back(std::string(dtype_name(d)), t);
  }
  io::save_safetensors(path, tensors, {{"step", "7"}});
  BOOST_TEST(!fs::exists(path + ".tmp"));
  auto f = io::load_safetensors(path);
  check_same_tensors(f.tensors, tensors);
  BOOST_TEST(f.metadata == (std::map<std::string, std::string>{{"step", "7"}}));
}

BOOST_AUTO_TEST_CASE(non_contiguous_written_contiguous_and_overwrite) {
  TempDir tmp;
  const std::string path = tmp.path("t.safetensors");
  write_bytes(path, "old contents");
  Tensor base = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor t = base.t();  // [3, 2], strides [1, 3]
  BOOST_REQUIRE(!t.is_contiguous());
  io::save_safetensors(path, {{"t", t}, {"row", base.select(0, 1)}});
  auto f = io::load_safetensors(path);
  BOOST_REQUIRE_EQUAL(f.tensors.size(), 2u);
  const Tensor& got_t = tensor_named(f.tensors, "t");
  BOOST_TEST(got_t.shape() == (Shape{3, 2}));
  BOOST_TEST(got_t.to_vector() == (std::vector<double>{1, 4, 2, 5, 3, 6}),
             boost::test_tools::per_element());
  BOOST_TEST(tensor_named(f.tensors, "row").to_vector() == (std::vector<double>{4, 5, 6}),
             boost::test_tools::per_element());
  BOOST_TEST(f.metadata.empty());
  // The data section starts 8-byte aligned (the header is padded with spaces).
  std::uint64_t header_len = 0;
  std::memcpy(&header_len, read_bytes(path).data(), 8);
  BOOST_TEST(header_len % 8 == 0u);
}

BOOST_AUTO_TEST_CASE(file_written_by_python_loads) {
  auto f = io::load_safetensors(kPythonFile);
  check_same_tensors(f.tensors, python_fixture_tensors());
  BOOST_TEST(f.metadata == kPythonMetadata);
  BOOST_TEST(tensor_named(f.tensors, "bf16").to_vector()[1] == -3.140625);
  BOOST_TEST(tensor_named(f.tensors, "i64").to_int_vector()[1] == (1LL << 40));
  // Laid out by dtype (8-byte elements first), then by name, as the reference writer does.
  std::vector<std::string> order;
  for (const auto& [n, t] : f.tensors) order.push_back(n);
  BOOST_TEST(order == (std::vector<std::string>{"i64", "f64", "empty", "f32", "scalar", "i32",
                                                "bf16", "f16", "u8", "bool"}),
             boost::test_tools::per_element());
}

// Same tensors, same bytes as Python's safetensors.torch.save_file (gen_safetensors_fixture.py),
// whatever order they are given in. FSDP_SAFETENSORS_WRITE_TO=PATH keeps our file for
// gen_safetensors_fixture.py --check.
BOOST_AUTO_TEST_CASE(we_write_the_bytes_python_writes) {
  TempDir tmp;
  std::string path = tmp.path("ours.safetensors");
  if (const char* keep = std::getenv("FSDP_SAFETENSORS_WRITE_TO")) path = keep;
  io::save_safetensors(path, python_fixture_tensors(), kPythonMetadata);
  const std::string ours = read_bytes(path), theirs = read_bytes(kPythonFile);
  BOOST_TEST(ours.size() == theirs.size());
  BOOST_TEST((ours == theirs));
  auto reversed = python_fixture_tensors();
  std::reverse(reversed.begin(), reversed.end());
  io::save_safetensors(path, reversed, kPythonMetadata);
  BOOST_TEST((read_bytes(path) == theirs));
}

BOOST_AUTO_TEST_CASE(writer_errors) {
  TempDir tmp;
  const std::string path = tmp.path("w.safetensors");
  Tensor a = zeros({2});
  expect_value_error(
      [&] {
        io::save_safetensors(path, {{"a", a}, {"a", a}});
      },
      {"save_safetensors: " + path + ": tensor 'a' is given twice"});
  expect_value_error(
      [&] {
        io::save_safetensors(path, {{"__metadata__", a}});
      },
      {path, "'__metadata__' is reserved for the metadata"});
  expect_value_error(
      [&] {
        io::save_safetensors(path, {{"m", zeros({2}, TensorOptions(DType::Float32, kMeta))}});
      },
      {path, "tensor 'm' is on the meta device"});
  BOOST_TEST(!fs::exists(path));
  BOOST_TEST(!fs::exists(path + ".tmp"));
}

BOOST_AUTO_TEST_CASE(malformed_files) {
  TempDir tmp;
  auto file = [&](const std::string& name, const std::string& bytes) {
    const std::string p = tmp.path(name);
    write_bytes(p, bytes);
    return p;
  };
  auto load = [](const std::string& p) { return [p] { io::load_safetensors(p); }; };
  const std::string entry_a = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";

  std::string p = file("short", "abc");
  expect_value_error(load(p), {p, "the file has 3 bytes, too few for the 8-byte header length"});

  p = file("long_header", raw_file("{}", std::string(40, ' '), 1000));
  expect_value_error(load(p), {p, "header length 1000 runs past the end of the file (50 bytes)"});

  p = file("bad_json", raw_file(R"({"a":{"dtype":)", ""));
  expect_value_error(load(p), {p, "the header is not valid JSON"});

  p = file("not_object", raw_file("[1,2]", ""));
  expect_value_error(load(p), {p, "the header must be a JSON object, got array"});

  p = file("outside", raw_file("{" + entry_a + "}", std::string(4, '\0')));
  expect_value_error(load(p),
                     {p, "tensor 'a': data_offsets [0, 8) lie outside the 4 bytes of data"});

  p = file("overlap",
           raw_file("{" + entry_a + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                    std::string(12, '\0')));
  expect_value_error(load(p), {p, "tensors 'a' [0, 8) and 'b' [4, 12) overlap"});

  // The reference's coverage rule: no hole between tensors, no bytes after the last one.
  p = file("hole",
           raw_file("{" + entry_a + R"(,"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
                    std::string(16, '\0')));
  expect_value_error(load(p), {p,
                               "tensor 'b' starts at byte 12 of the data, but the tensors before "
                               "it end at 8 (a hole)"});
  p = file("trailing", raw_file("{" + entry_a + "}", std::string(10, '\0')));
  expect_value_error(load(p), {p,
                               "the tensors end at byte 8 of the data, but it has 10 bytes "
                               "(trailing bytes)"});
  p = file("repeated", raw_file("{" + entry_a + "," + entry_a + "}", std::string(8, '\0')));
  expect_value_error(load(p), {p, "the header names 'a' twice"});
  p = file("leading_space", raw_file(" {" + entry_a + "}", std::string(8, '\0')));
  expect_value_error(load(p), {p, "the header must start with '{'"});

  p = file("mismatch", raw_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
                                std::string(8, '\0')));
  expect_value_error(load(p),
                     {p,
                      "tensor 'a': dtype F32 and shape [3] need 12 bytes, but data_offsets [0, 8) "
                      "hold 8"});

  p = file("dtype", raw_file(R"({"a":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})",
                             std::string(2, '\0')));
  expect_value_error(load(p), {p, "tensor 'a': unknown dtype 'F8_E4M3'"});

  p = file("negative", raw_file(R"({"a":{"dtype":"U8","shape":[-2],"data_offsets":[0,2]}})",
                                std::string(2, '\0')));
  expect_value_error(load(p), {p, "tensor 'a': shape [-2] must hold non-negative integers"});

  p = file("no_offsets", raw_file(R"({"a":{"dtype":"U8","shape":[2]}})", ""));
  expect_value_error(load(p), {p, "tensor 'a': no 'data_offsets'"});

  p = file("metadata", raw_file(R"({"__metadata__":{"step":7}})", ""));
  expect_value_error(load(p), {p, "__metadata__ value of 'step' is not a string"});

  // A good file cut short: the last tensor's bytes are missing.
  const std::string good = tmp.path("good");
  io::save_safetensors(good, {{"x", zeros({4})}, {"y", ones({3})}});
  const std::string bytes = read_bytes(good);
  p = file("truncated", bytes.substr(0, bytes.size() - 3));
  expect_value_error(load(p), {p,
                               "tensor 'y': data_offsets [16, 28) lie outside the 25 bytes of data "
                               "(truncated file?)"});

  expect_value_error(load(tmp.dir.string()), {tmp.dir.string(), "is a directory"});
  p = tmp.path("missing.safetensors");
  expect_value_error(load(p), {"cannot open " + p});
}

// Issue 22: with Checksums::xxh3 the header records each tensor's XXH3-64, the streamed writer's
// bytes (tensors in any order) equal save_safetensors', and a flipped bit is named on load.
BOOST_AUTO_TEST_CASE(checksums_are_recorded_and_verified) {
  TempDir tmp;
  const std::string path = tmp.path("c.safetensors"), streamed = tmp.path("s.safetensors");
  const Tensor a = from_vector({1, 2, 3}, {3}), b = from_vector({-1, 0.5}, {2}, DType::Float64);
  io::save_safetensors(path, {{"a", a}, {"b", b}}, {{"format", "pt"}}, io::Checksums::xxh3);
  auto f = io::load_safetensors(path);
  BOOST_TEST(f.metadata ==
             (std::map<std::string, std::string>{
                 {"format", "pt"}, {"xxh3:a", io::xxh3_hex(a)}, {"xxh3:b", io::xxh3_hex(b)}}));
  BOOST_TEST(io::xxh3_hex(a).size() == 16u);
  BOOST_TEST(io::xxh3_hex(a) != io::xxh3_hex(from_vector({1, 2, 4}, {3})));
  {
    io::SafetensorsWriter w(streamed, {{"a", DType::Float32, {3}}, {"b", DType::Float64, {2}}},
                            {{"format", "pt"}}, io::Checksums::xxh3);
    w.write(1, b);
    w.write(0, a);
    w.finish();
  }
  BOOST_TEST(read_bytes(streamed) == read_bytes(path));
  // The last byte belongs to a (float64 b is laid out first).
  std::string bytes = read_bytes(path);
  bytes.back() = static_cast<char>(bytes.back() ^ 1);
  write_bytes(path, bytes);
  Tensor damaged = from_vector({1, 2, 3}, {3});
  reinterpret_cast<char*>(damaged.data_ptr())[11] ^= 1;
  try {
    io::load_safetensors(path);
    BOOST_FAIL("a damaged file loaded");
  } catch (const ValueError& e) {
    BOOST_TEST(std::string(e.what()) ==
               "load_safetensors: " + path + ": tensor 'a' is damaged: its bytes hash to " +
                   io::xxh3_hex(damaged) + ", the header records " + io::xxh3_hex(a) + " (xxh3)");
  }
  // A checksum of a tensor the file lacks: the header is damaged.
  const std::string lacking = tmp.path("l.safetensors");
  io::save_safetensors(lacking, {{"a", a}}, {{"xxh3:z", "0000000000000000"}});
  try {
    io::load_safetensors(lacking);
    BOOST_FAIL("a checksum of a missing tensor loaded");
  } catch (const ValueError& e) {
    BOOST_TEST(std::string(e.what()) ==
               "load_safetensors: " + lacking +
                   ": the metadata has a checksum of tensor 'z', which the file lacks (damaged "
                   "header?)");
  }
}
