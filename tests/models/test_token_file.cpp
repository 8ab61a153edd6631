// models/tokenizer/token_file.h: llm.c's token files written and read back in both formats, the
// bytes as llm.c's write_datafile lays them out, and every malformed file's exact message.
#define BOOST_TEST_MODULE models_token_file
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/input_error.h"
#include "models/tokenizer/token_file.h"

using namespace fsdp::models;
using fsdp::InputError;
using Ids = std::vector<std::uint32_t>;
namespace fs = std::filesystem;

namespace {

template <typename F>
std::string error_message(F&& fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

// A fresh directory for one test, removed after it.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("fsdp_token_file_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
  static inline int counter = 0;
};

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A file of a header (magic, version, count) and `payload` bytes.
void write_raw(const std::string& path, std::int32_t magic, std::int32_t version,
               std::int32_t count, std::size_t payload) {
  std::vector<std::int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  out << std::string(payload, '\0');
}

std::int32_t int_at(const std::string& bytes, std::size_t i) {
  std::int32_t v;
  std::memcpy(&v, bytes.data() + 4 * i, 4);
  return v;
}

}  // namespace

BOOST_AUTO_TEST_CASE(gpt2_round_trip_and_layout) {
  TempDir dir;
  const Ids tokens{0, 1, 50256, 65535, 7};
  write_token_file(dir / "a.bin", tokens, TokenFormat::gpt2);
  const std::string bytes = bytes_of(dir / "a.bin");
  BOOST_TEST(bytes.size() == 1024u + 5 * 2);
  BOOST_TEST(int_at(bytes, 0) == 20240520);
  BOOST_TEST(int_at(bytes, 1) == 1);
  BOOST_TEST(int_at(bytes, 2) == 5);
  for (std::size_t i = 3; i < 256; ++i) BOOST_TEST(int_at(bytes, i) == 0);
  std::uint16_t third;
  std::memcpy(&third, bytes.data() + 1024 + 2 * 2, 2);
  BOOST_TEST(third == 50256);
  const TokenFile back = read_token_file(dir / "a.bin");
  BOOST_TEST(back.tokens == tokens);
  BOOST_TEST((back.format == TokenFormat::gpt2));
}

BOOST_AUTO_TEST_CASE(llama3_round_trip_and_layout) {
  TempDir dir;
  const Ids tokens{128000, 9906, 0, 128255, 4294967295u};
  write_token_file(dir / "b.bin", tokens, TokenFormat::llama3);
  const std::string bytes = bytes_of(dir / "b.bin");
  BOOST_TEST(bytes.size() == 1024u + 5 * 4);
  BOOST_TEST(int_at(bytes, 0) == 20240801);
  BOOST_TEST(int_at(bytes, 1) == 7);
  BOOST_TEST(int_at(bytes, 2) == 5);
  const TokenFile back = read_token_file(dir / "b.bin");
  BOOST_TEST(back.tokens == tokens);
  BOOST_TEST((back.format == TokenFormat::llama3));
  write_token_file(dir / "empty.bin", Ids{}, TokenFormat::llama3);
  BOOST_TEST(read_token_file(dir / "empty.bin").tokens.empty());
  BOOST_TEST(bytes_of(dir / "empty.bin").size() == 1024u);
}

BOOST_AUTO_TEST_CASE(format_names_and_default_for_a_vocabulary) {
  BOOST_TEST(token_format_name(TokenFormat::gpt2) == "gpt2");
  BOOST_TEST(token_format_name(TokenFormat::llama3) == "llama3");
  BOOST_TEST((token_format_from_name("llama3") == TokenFormat::llama3));
  BOOST_TEST(!token_format_from_name("gpt3").has_value());
  BOOST_TEST((token_format_for_vocab(50257) == TokenFormat::gpt2));
  BOOST_TEST((token_format_for_vocab(65536) == TokenFormat::gpt2));
  BOOST_TEST((token_format_for_vocab(65537) == TokenFormat::llama3));
  BOOST_TEST((token_format_for_vocab(128256) == TokenFormat::llama3));
}

BOOST_AUTO_TEST_CASE(malformed_files_are_refused_by_name) {
  TempDir dir;
  const std::string p = dir / "t.bin";
  BOOST_TEST(error_message([&] { read_token_file(dir / "missing.bin"); }) ==
             dir / "missing.bin" + ": cannot open: No such file or directory");
  BOOST_TEST(error_message([&] { read_token_file(dir.path.string()); }) ==
             dir.path.string() + ": not a regular file");
  std::ofstream(p, std::ios::binary) << std::string(100, '\0');
  BOOST_TEST(error_message([&] { read_token_file(p); }) ==
             p + ": 100 bytes, shorter than the 1024-byte header of an llm.c token file");
  write_raw(p, 20240522, 1, 0, 0);  // llm.c's eval files (HellaSwag) are another format
  BOOST_TEST(error_message([&] { read_token_file(p); }) ==
             p + ": magic number 20240522 is not an llm.c token file's (20240520 for gpt2, "
                 "20240801 for llama3)");
  write_raw(p, 20240520, 7, 0, 0);
  BOOST_TEST(error_message([&] { read_token_file(p); }) ==
             p + ": version 7 with magic 20240520 (gpt2); expected version 1");
  write_raw(p, 20240801, 1, 0, 0);
  BOOST_TEST(error_message([&] { read_token_file(p); }) ==
             p + ": version 1 with magic 20240801 (llama3); expected version 7");
  write_raw(p, 20240520, 1, -3, 0);
  BOOST_TEST(error_message([&] { read_token_file(p); }) ==
             p + ": token count -3 in the header is negative");
  write_raw(p, 20240520, 1, 4, 6);  // 3 tokens' bytes for 4
  BOOST_TEST(error_message([&] { read_token_file(p); }) ==
             p + ": 1030 bytes, expected 1032 (the header and 4 tokens of 2 bytes)");
  write_raw(p, 20240801, 1 + 6, 2, 12);  // one token too many
  BOOST_TEST(error_message([&] { read_token_file(p); }) ==
             p + ": 1036 bytes, expected 1032 (the header and 2 tokens of 4 bytes)");
  write_token_file(p, Ids{5, 99, 100}, TokenFormat::gpt2);
  BOOST_TEST(read_token_file(p, 101).tokens.size() == 3u);
  BOOST_TEST(error_message([&] { read_token_file(p, 100); }) ==
             p + ": token 100 at index 2 is not below the vocabulary size 100");
}

BOOST_AUTO_TEST_CASE(writing_refuses_what_the_format_cannot_hold) {
  TempDir dir;
  const std::string p = dir / "w.bin";
  BOOST_TEST(error_message([&] {
               write_token_file(p, Ids{1, 65536}, TokenFormat::gpt2);
             }) == p + ": token 65536 at index 1 does not fit the gpt2 format's uint16 tokens");
  BOOST_TEST(!fs::exists(p));  // nothing written
  BOOST_TEST(error_message([&] {
               write_token_file(dir / "no/such/dir.bin", Ids{1}, TokenFormat::gpt2);
             }) == dir / "no/such/dir.bin" + ": cannot write: No such file or directory");
}

// Mutants of a valid file (a fixed seed: bytes changed in the header and the tokens, the file cut
// or extended) are read or refused with an InputError naming the file; nothing else happens.
BOOST_AUTO_TEST_CASE(mutated_files_are_read_or_refused) {
  TempDir dir;
  const std::string good = dir / "good.bin", p = dir / "m.bin";
  write_token_file(good, Ids{1, 2, 3, 500, 65535}, TokenFormat::gpt2);
  const std::string bytes = bytes_of(good);
  std::mt19937 rng(26);
  int read = 0, refused = 0;
  for (int i = 0; i < 500; ++i) {
    std::string m = bytes;
    switch (rng() % 3) {
      case 0:  // a byte of the first 12 (magic, version, count) or of the tokens
        m[rng() % 2 ? rng() % 12 : 1024 + rng() % 10] = char(rng());
        break;
      case 1:
        m.resize(rng() % m.size());
        break;
      default:
        m += std::string(1 + rng() % 8, char(rng()));
    }
    std::ofstream(p, std::ios::binary | std::ios::trunc) << m;
    try {
      read_token_file(p, 65536);
      ++read;
    } catch (const InputError& e) {
      BOOST_TEST(std::string(e.what()).starts_with(p + ": "));
      ++refused;
    }
  }
  BOOST_TEST(read > 10);
  BOOST_TEST(refused > 100);
}
