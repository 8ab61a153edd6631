// Hugging Face checkpoint directories (core/io/safetensors_dir.h): against a directory that
// transformers' save_pretrained wrote (fixtures/hf_sharded/, gen_safetensors_fixture.py), sharding
// boundaries, element ranges of every dtype, malformed indexes and files, size strings.
#define BOOST_TEST_MODULE core_io_dir
#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "core/io/safetensors.h"
#include "core/io/safetensors_dir.h"
#include "core/ops.h"
#include "tests/support/error_message.h"
#include "tests/support/temp_dir.h"

#ifndef FSDP_IO_TEST_DIR
#error "FSDP_IO_TEST_DIR must be defined by the build"
#endif

namespace fs = std::filesystem;
using namespace fsdp;
using testing::error_message;
using testing::TempDir;
using Named = std::vector<std::pair<std::string, Tensor>>;

namespace {

const std::string kFixture = std::string(FSDP_IO_TEST_DIR) + "/fixtures/hf_sharded";

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::vector<std::string> fixture_state_dict_order() {
  std::ifstream in(kFixture + "/state_dict_order.txt");
  std::vector<std::string> names;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) names.push_back(line);
  return names;
}

// float32 [n]: start, start + 1, ...
Tensor ramp(std::int64_t n, double start) {
  std::vector<double> v;
  for (std::int64_t k = 0; k < n; ++k) v.push_back(start + double(k));
  return from_vector(v, {n});
}

// Tensors of `bytes` bytes each (float32), named t0, t1, ...
Named float_tensors(const std::vector<std::int64_t>& bytes) {
  Named out;
  for (std::size_t i = 0; i < bytes.size(); ++i)
    out.emplace_back("t" + std::to_string(i), ramp(bytes[i] / 4, double(i)));
  return out;
}

// The weight map of the index under `dir`.
std::map<std::string, std::string> weight_map(const TempDir& tmp) {
  std::ifstream in(tmp.path(io::kSafetensorsIndexFile));
  return nlohmann::json::parse(in).at("weight_map").get<std::map<std::string, std::string>>();
}

}  // namespace

BOOST_AUTO_TEST_CASE(reads_a_directory_transformers_wrote) {
  const auto src = io::SafetensorsDir::open(kFixture);
  const auto order = fixture_state_dict_order();
  BOOST_REQUIRE_EQUAL(order.size(), 21u);
  BOOST_TEST(src.names().size() == order.size());
  BOOST_TEST(src.files().size() == 5u);
  BOOST_TEST(src.payload_bytes() == 8864u);  // the index's total_size
  BOOST_TEST(src.metadata() == (std::map<std::string, std::string>{{"format", "pt"}}));
  const auto& head = src.info("lm_head.weight");
  BOOST_TEST(head.file == kFixture + "/model-00004-of-00005.safetensors");
  BOOST_TEST(head.dtype == DType::Float32);
  BOOST_TEST(head.shape == (Shape{64, 8}));
  BOOST_TEST(head.nbytes == 2048u);
  BOOST_TEST(src.bytes_read() == 0u);  // opening reads headers only
  // Every tensor equals what the whole-file reader finds in its file.
  for (const std::string& file : src.files())
    for (const auto& [name, t] : io::load_safetensors(file).tensors) {
      BOOST_TEST_CONTEXT(name) {
        BOOST_TEST(src.info(name).file == file);
        BOOST_TEST(src.read(name).to_vector() == t.to_vector(), boost::test_tools::per_element());
      }
    }
  BOOST_TEST(src.bytes_read() == src.payload_bytes());
}

// save_safetensors_dir on the same tensors in the same state-dict order writes every file and
// the index byte for byte as transformers did.
BOOST_AUTO_TEST_CASE(writes_the_bytes_transformers_writes) {
  const auto src = io::SafetensorsDir::open(kFixture);
  Named tensors;
  for (const auto& name : fixture_state_dict_order()) tensors.emplace_back(name, src.read(name));
  TempDir tmp;
  const auto files = io::save_safetensors_dir(tmp.dir.string(), tensors, io::parse_size("2KB"));
  BOOST_TEST(files == (std::vector<std::string>{
                          "model-00001-of-00005.safetensors", "model-00002-of-00005.safetensors",
                          "model-00003-of-00005.safetensors", "model-00004-of-00005.safetensors",
                          "model-00005-of-00005.safetensors"}),
             boost::test_tools::per_element());
  for (const std::string& f : files)
    BOOST_TEST((read_bytes(tmp.path(f)) == read_bytes(kFixture + "/" + f)), f);
  BOOST_TEST(read_bytes(tmp.path(io::kSafetensorsIndexFile)) ==
             read_bytes(kFixture + "/" + io::kSafetensorsIndexFile));
  BOOST_TEST(!fs::exists(tmp.path(io::kSafetensorsFile)));
}

BOOST_AUTO_TEST_CASE(single_file_round_trip_and_switching_layouts) {
  TempDir tmp;
  Named tensors;
  for (DType d : kAllDTypes)
    tensors.emplace_back(std::string(dtype_name(d)), from_vector({1, 0, 1, 1, 0, 1}, {2, 3}, d));
  tensors.emplace_back("empty", zeros({0, 3}));
  tensors.emplace_back("scalar", from_vector({7.5}, {}));
  const std::string dir = tmp.dir.string();
  BOOST_TEST(io::save_safetensors_dir(dir, tensors) ==
             (std::vector<std::string>{io::kSafetensorsFile}));
  for (const std::string& path : {dir, tmp.path(io::kSafetensorsFile)}) {
    const auto src = io::SafetensorsDir::open(path);
    BOOST_TEST(src.names().size() == tensors.size());
    for (const auto& [name, t] : tensors) {
      const Tensor got = src.read(name);
      BOOST_TEST(got.dtype() == t.dtype(), name);
      BOOST_TEST(got.shape() == t.shape(), name);
      BOOST_TEST(got.to_vector() == t.to_vector(), boost::test_tools::per_element());
    }
  }
  // A sharded save replaces the single file; a single save removes the index and the shards.
  const std::int64_t limit = 48;  // 6 float64 elements
  const auto sharded = io::save_safetensors_dir(dir, tensors, limit);
  BOOST_TEST(sharded.size() > 1u);
  BOOST_TEST(!fs::exists(tmp.path(io::kSafetensorsFile)));
  BOOST_TEST(io::SafetensorsDir::open(dir).names().size() == tensors.size());
  // Both present (a directory written by hand): model.safetensors wins, as in transformers.
  fs::copy_file(tmp.path(io::kSafetensorsIndexFile), tmp.path("index.keep"));
  io::save_safetensors_dir(dir, {{"only", zeros({2})}});
  fs::rename(tmp.path("index.keep"), tmp.path(io::kSafetensorsIndexFile));
  BOOST_TEST(io::SafetensorsDir::open(dir).names() == (std::vector<std::string>{"only"}),
             boost::test_tools::per_element());
  io::save_safetensors_dir(dir, tensors);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(tmp.dir)) left.push_back(e.path().filename());
  BOOST_TEST(left == (std::vector<std::string>{io::kSafetensorsFile}),
             boost::test_tools::per_element());
}

// huggingface_hub's split: a file takes tensors while they fit (a tensor of exactly the limit
// fits an empty file); one larger than the limit gets a file of its own, placed before the file
// being filled; fewer shards on a later save remove the extra files.
BOOST_AUTO_TEST_CASE(sharding_boundaries) {
  TempDir tmp;
  const std::string dir = tmp.dir.string();
  // 40 + 60 = 100 = the limit: one file.
  BOOST_TEST(io::save_safetensors_dir(dir, float_tensors({40, 60}), 100).size() == 1u);
  // 40 + 64 > 100: two files.
  BOOST_TEST(io::save_safetensors_dir(dir, float_tensors({40, 64}), 100).size() == 2u);
  BOOST_TEST(weight_map(tmp) ==
             (std::map<std::string, std::string>{{"t0", "model-00001-of-00002.safetensors"},
                                                 {"t1", "model-00002-of-00002.safetensors"}}));
  // 40, 104 (over the limit: a file of its own, first), 20 (joins 40), 100 (exactly the limit:
  // starts a file), 8 (starts another).
  const auto files = io::save_safetensors_dir(dir, float_tensors({40, 104, 20, 100, 8}), 100);
  BOOST_TEST(files.size() == 4u);
  BOOST_TEST(weight_map(tmp) ==
             (std::map<std::string, std::string>{{"t0", "model-00002-of-00004.safetensors"},
                                                 {"t1", "model-00001-of-00004.safetensors"},
                                                 {"t2", "model-00002-of-00004.safetensors"},
                                                 {"t3", "model-00003-of-00004.safetensors"},
                                                 {"t4", "model-00004-of-00004.safetensors"}}));
  BOOST_TEST(!fs::exists(tmp.path("model-00001-of-00002.safetensors")));
  BOOST_TEST(!fs::exists(tmp.path("model-00002-of-00002.safetensors")));
  BOOST_TEST(read_bytes(tmp.path(io::kSafetensorsIndexFile)) ==
             "{\n  \"metadata\": {\n    \"total_parameters\": 68,\n    \"total_size\": 272\n  },\n"
             "  \"weight_map\": {\n"
             "    \"t0\": \"model-00002-of-00004.safetensors\",\n"
             "    \"t1\": \"model-00001-of-00004.safetensors\",\n"
             "    \"t2\": \"model-00002-of-00004.safetensors\",\n"
             "    \"t3\": \"model-00003-of-00004.safetensors\",\n"
             "    \"t4\": \"model-00004-of-00004.safetensors\"\n  }\n}\n");
  // Names outside ASCII: escaped in the index as json.dumps does, raw UTF-8 in the headers.
  io::save_safetensors_dir(
      dir, {{"b", ramp(20, 0)}, {"t\u00f6", ramp(20, 1)}, {"z\u20ac", ramp(2, 2)}}, 100);
  BOOST_TEST(read_bytes(tmp.path(io::kSafetensorsIndexFile)) ==
             "{\n  \"metadata\": {\n    \"total_parameters\": 42,\n    \"total_size\": 168\n  "
             "},\n  \"weight_map\": {\n"
             "    \"b\": \"model-00001-of-00002.safetensors\",\n"
             "    \"t\\u00f6\": \"model-00002-of-00002.safetensors\",\n"
             "    \"z\\u20ac\": \"model-00002-of-00002.safetensors\"\n  }\n}\n");
  BOOST_TEST(io::SafetensorsDir::open(dir).read("z\u20ac").to_vector() == ramp(2, 2).to_vector(),
             boost::test_tools::per_element());
  io::save_safetensors_dir(dir, float_tensors({40, 104, 20, 100, 8}), 100);
  const auto src = io::SafetensorsDir::open(dir);
  BOOST_TEST(src.read("t3").to_vector() == ramp(25, 3.0).to_vector(),
             boost::test_tools::per_element());
  BOOST_TEST(error_message<ValueError>([&] { io::save_safetensors_dir(dir, {}, 0); }) ==
             "save_safetensors: " + dir + ": the shard size limit must be positive, got 0");
  BOOST_TEST(error_message<ValueError>([&] {
               io::save_safetensors_dir(dir, {{"a", zeros({1})}, {"a", zeros({1})}});
             }) == "save_safetensors: " + dir + ": tensor 'a' is given twice");
}

// read_range reads exactly the bytes of the elements asked for, converting to the dtype asked.
BOOST_AUTO_TEST_CASE(read_range_every_dtype) {
  TempDir tmp;
  Named tensors;
  std::vector<double> values;
  for (int i = 0; i < 21; ++i) values.push_back(i % 2 ? i : (i % 4 ? 0 : 1));
  for (DType d : kAllDTypes)
    tensors.emplace_back(std::string(dtype_name(d)), from_vector(values, {7, 3}, d));
  io::save_safetensors_dir(tmp.dir.string(), tensors, 100);  // several files
  const auto src = io::SafetensorsDir::open(tmp.dir.string());
  const std::vector<std::pair<std::int64_t, std::int64_t>> ranges = {{0, 21}, {0, 1},  {5, 7},
                                                                     {20, 1}, {21, 0}, {3, 0}};
  for (const auto& [name, t] : tensors) {
    const Tensor flat = t.reshape({21});
    for (DType out : kAllDTypes) {
      for (const auto& [first, count] : ranges) {
        BOOST_TEST_CONTEXT(name << " as " << dtype_name(out) << " [" << first << ", +" << count
                                << ")") {
          Tensor dst = full({count + 1}, -7.0, TensorOptions(out));  // one guard element
          const std::uint64_t before = src.bytes_read();
          src.read_range(name, first, count, out, dst.data_ptr());
          BOOST_TEST(src.bytes_read() - before == std::uint64_t(count) * dtype_size(t.dtype()));
          const Tensor want = flat.narrow(0, first, count).to(out);
          BOOST_TEST(dst.narrow(0, 0, count).to_vector() == want.to_vector(),
                     boost::test_tools::per_element());
          BOOST_TEST(dst.to_vector().back() == full({1}, -7.0, TensorOptions(out)).item());
        }
      }
    }
  }
  float buf[4];
  BOOST_TEST(error_message<ValueError>([&] {
               src.read_range("float32", 19, 3, DType::Float32, buf);
             }) == "load_safetensors: " + src.info("float32").file +
                       ": tensor 'float32' has 21 elements; [19, 22) lies outside it");
  BOOST_TEST(error_message<ValueError>([&] {
               src.read_range("float32", -1, 1, DType::Float32, buf);
             }) == "load_safetensors: " + src.info("float32").file +
                       ": tensor 'float32' has 21 elements; [-1, 0) lies outside it");
  BOOST_TEST(error_message<KeyError>([&] { src.info("nope"); }) ==
             "load_safetensors: " + tmp.dir.string() + " has no tensor 'nope'");
}

// read_into: the whole tensor into a given tensor, straight into its storage when the dtypes
// match (the bytes read are the tensor's, once), converted otherwise, checksums verified either
// way; a destination that does not fit is one line naming the tensor.
BOOST_AUTO_TEST_CASE(read_into_a_given_tensor) {
  TempDir tmp;
  const Tensor a = from_vector({1.5, -2.0, 3.25, 4.0, 0.5, -6.0}, {2, 3});
  io::save_safetensors_dir(tmp.dir.string(), {{"a", a}, {"e", zeros({0, 4})}}, 100, {},
                           io::Checksums::xxh3);
  const auto src = io::SafetensorsDir::open(tmp.dir.string());
  Tensor same = full({2, 3}, 9.0);
  const void* storage = same.data_ptr();
  src.read_into("a", same);
  BOOST_TEST(same.data_ptr() == storage);
  BOOST_TEST(same.to_vector() == a.to_vector(), boost::test_tools::per_element());
  BOOST_TEST(src.bytes_read() == 24u);
  // will_read is a hint: nothing is read, a range outside the tensor is ignored.
  src.will_read("a", 0, 6);
  src.will_read("a", 4, 9);
  src.will_read("a", -1, 2);
  src.will_read_all();
  BOOST_TEST(src.bytes_read() == 24u);
  for (DType out : {DType::Float64, DType::BFloat16}) {
    Tensor converted = full({2, 3}, 9.0, TensorOptions(out));
    src.read_into("a", converted);
    BOOST_TEST(converted.to_vector() == a.to(out).to_vector(), boost::test_tools::per_element());
  }
  Tensor empty_dst = zeros({0, 4});
  src.read_into("e", empty_dst);
  const std::string file = src.info("a").file;
  BOOST_TEST(error_message<ValueError>([&] {
               src.read_into("a", zeros({3, 2}));
             }) ==
             "load_safetensors: " + file +
                 ": tensor 'a' has shape [2, 3]; cannot read it into a cpu tensor of shape [3, 2]");
  BOOST_TEST(error_message<ValueError>([&] {
               src.read_into("a", zeros({3, 2}).t());
             }) ==
             "load_safetensors: " + file +
                 ": tensor 'a' has shape [2, 3]; cannot read it into a cpu tensor of shape [2, 3] "
                 "(not contiguous)");
  // A damaged tensor is found whether read directly or converted.
  std::string damaged = read_bytes(file);
  damaged[damaged.size() - 1] = static_cast<char>(damaged.back() ^ 1);
  write_bytes(file, damaged);
  const auto bad = io::SafetensorsDir::open(tmp.dir.string());
  for (DType out : {DType::Float32, DType::Float64}) {
    BOOST_TEST_CONTEXT(dtype_name(out)) {
      const std::string msg = error_message<ValueError>([&] {
        bad.read_into("a", zeros({2, 3}, TensorOptions(out)));
      });
      BOOST_TEST(msg.starts_with("load_safetensors: " + file + ": tensor 'a' is damaged"), msg);
    }
  }
}

BOOST_AUTO_TEST_CASE(malformed_directories_and_indexes) {
  TempDir tmp;
  const std::string dir = tmp.dir.string();
  const std::string index = tmp.path(io::kSafetensorsIndexFile);
  auto open_error = [&] {
    return error_message<ValueError>([&] { io::SafetensorsDir::open(dir); });
  };
  BOOST_TEST(open_error() == "load_safetensors: " + dir + " has neither model.safetensors nor " +
                                 "model.safetensors.index.json");
  BOOST_TEST(error_message<ValueError>([&] { io::SafetensorsDir::open(tmp.path("none")); }) ==
             "load_safetensors: " + tmp.path("none") +
                 " does not exist (expected a directory with model.safetensors or "
                 "model.safetensors.index.json, or a .safetensors file)");

  io::save_safetensors_dir(dir, float_tensors({40, 64}), 100);
  const std::string good = read_bytes(index);
  nlohmann::json j = nlohmann::json::parse(good);

  // No "metadata" key (transformers would raise KeyError): read all the same.
  nlohmann::json no_metadata = j;
  no_metadata.erase("metadata");
  write_bytes(index, no_metadata.dump());
  BOOST_TEST(io::SafetensorsDir::open(dir).names() == (std::vector<std::string>{"t0", "t1"}),
             boost::test_tools::per_element());
  nlohmann::json bad = j;
  bad["metadata"] = 3;
  write_bytes(index, bad.dump());
  BOOST_TEST(open_error() ==
             "load_safetensors: " + index + ": \"metadata\" must be an object, got number");

  write_bytes(index, good.substr(0, 30));
  BOOST_TEST(open_error() == "load_safetensors: " + index + " is not valid JSON (at byte 31)");
  write_bytes(index, "[]");
  BOOST_TEST(open_error() == "load_safetensors: " + index + " must hold a JSON object, got array");
  write_bytes(index, R"({"metadata": {}})");
  BOOST_TEST(open_error() ==
             "load_safetensors: " + index + " has no \"weight_map\" object (tensor name -> file)");
  bad = j;
  bad["weight_map"]["t1"] = 5;
  write_bytes(index, bad.dump());
  BOOST_TEST(open_error() ==
             "load_safetensors: " + index + ": weight_map['t1'] must be a file name, got 5");
  bad = j;
  bad["weight_map"]["t1"] = "../x.safetensors";
  write_bytes(index, bad.dump());
  BOOST_TEST(open_error() == "load_safetensors: " + index +
                                 ": weight_map['t1'] is '../x.safetensors', not the name of a "
                                 "file beside the index");
  // An index naming a missing file, and a file without the tensor the index puts there.
  bad = j;
  bad["weight_map"]["t1"] = "model-00009-of-00009.safetensors";
  write_bytes(index, bad.dump());
  BOOST_TEST(open_error() == "load_safetensors: " + index + " maps 't1' to " +
                                 tmp.path("model-00009-of-00009.safetensors") +
                                 ", which does not exist");
  bad = j;
  bad["weight_map"]["t1"] = "model-00001-of-00002.safetensors";
  write_bytes(index, bad.dump());
  BOOST_TEST(open_error() == "load_safetensors: " + index + " maps 't1' to " +
                                 tmp.path("model-00001-of-00002.safetensors") +
                                 ", which has no such tensor");
  // A damaged file the index names: the file's own message.
  write_bytes(index, good);
  const std::string shard = tmp.path("model-00002-of-00002.safetensors");
  const std::string bytes = read_bytes(shard);
  write_bytes(shard, bytes + "xx");
  BOOST_TEST(open_error() == "load_safetensors: " + shard +
                                 ": the tensors end at byte 64 of the data, but it has 66 bytes "
                                 "(trailing bytes)");
  write_bytes(shard, bytes);
  // A tensor whose bytes changed after it was written (checksums recorded).
  io::save_safetensors_dir(dir, float_tensors({40, 64}), 100, {}, io::Checksums::xxh3);
  std::string damaged = read_bytes(shard);
  damaged.back() = static_cast<char>(damaged.back() ^ 1);
  write_bytes(shard, damaged);
  const auto src = io::SafetensorsDir::open(dir);
  const std::string msg = error_message<ValueError>([&] { src.read("t1"); });
  BOOST_TEST(msg.starts_with("load_safetensors: " + shard + ": tensor 't1' is damaged"), msg);
  BOOST_TEST(src.read("t0").numel() == 10);
}

BOOST_AUTO_TEST_CASE(size_strings) {
  const std::vector<std::pair<std::string, std::int64_t>> good = {
      {"5GB", 5'000'000'000},
      {"50gb", 50'000'000'000},
      {"1KB", 1000},
      {"2MB", 2'000'000},
      {"3TB", 3'000'000'000'000},
      {"1KiB", 1024},
      {"2 MiB", 2 << 20},
      {"1GiB", 1 << 30},
      {"1TiB", 1LL << 40},
      {"1.5KB", 1500},
      {"0.5GiB", 1 << 29},
      {".25KB", 250},
      {"1.0009KB", 1000},  // truncated to whole bytes, as int(float * unit)
      {" 7 tb ", 7'000'000'000'000},
      {"123", 123},
      {"10B", 10},
  };
  for (const auto& [text, bytes] : good) BOOST_TEST(io::parse_size(text) == bytes, text);
  for (const char* text : {"", "GB", "5XB", "-1GB", "1e3KB", "5 G B", "1.2.3KB", "9999999999TB",
                           "99999999999999999999"})
    BOOST_TEST(error_message<ValueError>([&] { io::parse_size(text); }) ==
                   fmt::format("invalid size '{}': expected a number and a unit among B, KB, MB, "
                               "GB, TB (powers of 1000) and KiB, MiB, GiB, TiB (powers of 1024), "
                               "e.g. 5GB",
                               text),
               text);
}
