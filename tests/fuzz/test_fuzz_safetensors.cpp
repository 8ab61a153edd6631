// The safetensors reader against damaged input, deterministically: a small valid file cut at every
// offset, its header bytes flipped, offsets outside the file, overlapping tensors, dtype/shape
// mismatches, huge header lengths, deeply nested JSON, and seeded random mutations. Each is a
// ValueError naming the file (and the tensor involved), or a file that reads consistently; never
// another exception or a crash. The libFuzzer target (fuzz_safetensors.cpp) explores further.
#define BOOST_TEST_MODULE fuzz_safetensors
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "core/error.h"
#include "core/io/safetensors.h"
#include "tests/fuzz/safetensors_seed.h"

using namespace fsdp;
namespace fs = std::filesystem;

namespace {

const std::string kName = "seed.safetensors";

// The outcome of reading `bytes`: "" when it read, else the error's message. Any exception other
// than fsdp::ValueError fails the test.
std::string outcome(const std::string& bytes, const std::string& name = kName) {
  try {
    io::SafetensorsFile f = io::parse_safetensors(bytes, name);
    for (const auto& [n, t] : f.tensors)  // what it read is consistent
      BOOST_TEST(t.nbytes() <= bytes.size(), n << ": " << t.nbytes() << " bytes");
    return "";
  } catch (const ValueError& e) {
    return e.what();
  } catch (const std::exception& e) {
    BOOST_ERROR("not a ValueError: " << e.what());
    return e.what();
  }
}

// `bytes` is refused with a message that names the file and holds each of `parts`.
void expect_error(const std::string& bytes, const std::vector<std::string>& parts) {
  const std::string msg = outcome(bytes);
  BOOST_TEST_REQUIRE(!msg.empty(), "read without error; expected '" << parts.front() << "'");
  BOOST_TEST(msg.find(kName) != std::string::npos, msg << " does not name the file");
  for (const auto& p : parts) BOOST_TEST(msg.find(p) != std::string::npos, msg << " lacks " << p);
}

// A file of one header and `data_bytes` zero bytes of data.
std::string file_of(const std::string& header, std::size_t data_bytes) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + std::string(data_bytes, '\0');
}

std::uint64_t header_len(const std::string& bytes) {
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::uint64_t(static_cast<unsigned char>(bytes[i])) << (8 * i);
  return n;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_seed_reads) {
  const auto f = io::parse_safetensors(fuzz::safetensors_seed(), kName);
  BOOST_REQUIRE_EQUAL(f.tensors.size(), 3u);
  BOOST_TEST(f.tensors[0].first == "w");
  BOOST_TEST(f.tensors[1].first == "ids");
  BOOST_TEST(f.tensors[2].first == "h");
  BOOST_TEST(f.metadata.at("format") == "pt");
}

// Cut at every offset, in memory and as a file on disk: the error says where the file ended,
// naming the first tensor (in the header's key order) whose bytes are gone.
BOOST_AUTO_TEST_CASE(truncated_at_every_offset) {
  const std::string seed = fuzz::safetensors_seed();
  const std::uint64_t hlen = header_len(seed), data_start = 8 + hlen;
  const fs::path dir = fs::temp_directory_path() / ("fsdp_fuzz_st_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (std::size_t cut = 0; cut < seed.size(); ++cut) {
    BOOST_TEST_CONTEXT("cut at " << cut) {
      const std::string bytes = seed.substr(0, cut);
      std::string want;
      if (cut < 8) {
        want = "too few for the 8-byte header length";
      } else if (cut < data_start) {
        want = "header length " + std::to_string(hlen) + " runs past the end of the file";
      } else {
        // Entries are checked in key order ("h" first), and h's bytes [40, 42) end the file.
        want = "tensor 'h': data_offsets [40, 42) lie outside the " +
               std::to_string(cut - data_start) + " bytes of data";
      }
      expect_error(bytes, {want});
      const std::string path = (dir / kName).string();
      std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
      try {
        io::load_safetensors(path);
        BOOST_ERROR("the truncated file read");
      } catch (const ValueError& e) {
        const std::string msg = e.what();
        BOOST_TEST(msg.find(path) != std::string::npos, msg);
        BOOST_TEST(msg.find(want) != std::string::npos, msg << " lacks " << want);
      }
    }
  }
  fs::remove_all(dir);
}

// Every header byte (and the length field) XOR 0x01, 0x20, 0x80 and 0xff: a clear error or a
// file that still reads, never a crash or a foreign exception.
BOOST_AUTO_TEST_CASE(header_bytes_flipped) {
  const std::string seed = fuzz::safetensors_seed();
  const std::uint64_t end = 8 + header_len(seed);
  int errors = 0, reads = 0;
  for (std::uint64_t i = 0; i < end; ++i)
    for (unsigned mask : {0x01u, 0x20u, 0x80u, 0xffu}) {
      std::string bytes = seed;
      bytes[i] = static_cast<char>(static_cast<unsigned char>(bytes[i]) ^ mask);
      const std::string msg = outcome(bytes);
      if (msg.empty()) {
        ++reads;
      } else {
        ++errors;
        BOOST_TEST(msg.find(kName) != std::string::npos, "flip " << i << ": " << msg);
      }
    }
  BOOST_TEST_MESSAGE(errors << " errors, " << reads << " files that still read");
  BOOST_TEST(errors > 0);
  BOOST_TEST(reads > 0);  // e.g. a letter of a name, or the padding
}

BOOST_AUTO_TEST_CASE(offsets_outside_the_file) {
  expect_error(file_of(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", 4),
               {"tensor 'a': data_offsets [0, 8) lie outside the 4 bytes of data"});
  expect_error(file_of(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":)"
                       R"([18446744073709551615,18446744073709551615]}})",
                       4),
               {"tensor 'a'", "lie outside the 4 bytes of data"});
  expect_error(file_of(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[6,4]}})", 8),
               {"tensor 'a': data_offsets [6, 4) end before they begin"});
  expect_error(file_of(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[-2,0]}})", 8),
               {"tensor 'a': data_offsets must be two non-negative integers, got [-2,0]"});
  expect_error(file_of(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0.5,2]}})", 8),
               {"tensor 'a': data_offsets must be two non-negative integers"});
  expect_error(file_of(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2,4]}})", 8),
               {"tensor 'a': data_offsets must be two non-negative integers"});
}

BOOST_AUTO_TEST_CASE(overlapping_tensors) {
  expect_error(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                       12),
               {"tensors 'a' [0, 8) and 'b' [4, 12) overlap"});
  expect_error(file_of(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})",
                       8),
               {"tensors 'a' [0, 8) and 'b' [0, 8) overlap"});
}

BOOST_AUTO_TEST_CASE(dtype_and_shape_mismatch) {
  expect_error(file_of(R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}})", 8),
               {"tensor 'a': dtype F64 and shape [2] need 16 bytes, but data_offsets [0, 8) "
                "hold 8"});
  // numel overflows 64 bits: no allocation is attempted.
  expect_error(file_of(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],)"
                       R"("data_offsets":[0,8]}})",
                       8),
               {"tensor 'a': dtype F32 and shape [4294967296,4294967296,16] need too many bytes"});
  expect_error(file_of(R"({"a":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", 8),
               {"tensor 'a': shape must be a list of sizes"});
  expect_error(file_of(R"({"a":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", 8),
               {"tensor 'a': dtype must be a string"});
  expect_error(file_of(R"({"a":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}})", 8),
               {"tensor 'a': unknown dtype 'C64'"});
}

BOOST_AUTO_TEST_CASE(huge_header_lengths) {
  std::string bytes = fuzz::safetensors_seed();
  for (int i = 0; i < 8; ++i) bytes[i] = '\xff';
  expect_error(bytes, {"header length 18446744073709551615 runs past the end of the file"});
  // A header within the file but above the reference's 100 MB limit: refused before parsing.
  const std::string big = file_of(std::string(100'000'001, ' '), 0);
  expect_error(big, {"header length 100000001 exceeds the limit of 100000000 bytes"});
}

BOOST_AUTO_TEST_CASE(nested_json) {
  const int depth = 100'000;  // deep enough to overflow a recursive parser's stack
  const std::string arrays = std::string(depth, '[') + std::string(depth, ']');
  expect_error(file_of(arrays, 0), {"the header must be a JSON object, got array"});
  expect_error(file_of(R"({"a":)" + arrays + "}", 0),
               {"tensor 'a': expected an object {dtype, shape, data_offsets}"});
  std::string objects;
  for (int i = 0; i < depth; ++i) objects += R"({"x":)";
  objects += "1" + std::string(depth, '}');
  expect_error(file_of(R"({"a":{"dtype":)" + objects + R"(,"shape":[1],"data_offsets":[0,1]}})", 1),
               {"tensor 'a': dtype must be a string"});
  expect_error(file_of(R"({"__metadata__":)" + objects + "}", 0),
               {"__metadata__ value of 'x' is not a string"});
  expect_error(file_of(std::string(depth, '['), 0), {"the header is not valid JSON"});
  // A number beyond double's range is nlohmann's out_of_range, not a parse_error (found by
  // the libFuzzer target).
  expect_error(file_of(R"({"__metadata__":1e999})", 0),
               {"the header is not valid JSON", "number overflow"});
}

// Seeded random edits anywhere in the file (overwrite, insert, delete, cut), 20 000 of them.
BOOST_AUTO_TEST_CASE(random_mutations) {
  const std::string seed = fuzz::safetensors_seed();
  std::mt19937_64 rng(13);
  int errors = 0;
  for (int i = 0; i < 20'000; ++i) {
    std::string bytes = seed;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !bytes.empty(); ++e) {
      const std::size_t at = rng() % bytes.size();
      const char c = static_cast<char>(rng() % 256);
      switch (rng() % 4) {
        case 0:
          bytes[at] = c;
          break;
        case 1:
          bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(at), c);
          break;
        case 2:
          bytes.erase(at, 1 + rng() % 8);
          break;
        default:
          bytes.resize(at);
          break;
      }
    }
    const std::string msg = outcome(bytes);
    if (!msg.empty()) {
      ++errors;
      if (msg.find(kName) == std::string::npos) BOOST_ERROR("mutation " << i << ": " << msg);
    }
  }
  BOOST_TEST_MESSAGE(errors << " of 20000 mutations refused");
  BOOST_TEST(errors > 10'000);
}
