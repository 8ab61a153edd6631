#include "models/tokenizer/token_file.h"

#include <fmt/format.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/input_error.h"

namespace fsdp::models {

static_assert(std::endian::native == std::endian::little,
              "llm.c's token files are little-endian; a big-endian host would need swapping");

namespace {

constexpr std::size_t kHeaderInts = 256, kHeaderBytes = kHeaderInts * 4;

struct FormatInfo {
  TokenFormat format;
  std::string_view name;
  std::int32_t magic, version;
  std::size_t token_bytes;
};
constexpr FormatInfo kFormats[] = {{TokenFormat::gpt2, "gpt2", 20240520, 1, 2},
                                   {TokenFormat::llama3, "llama3", 20240801, 7, 4}};

const FormatInfo& info(TokenFormat format) {
  return kFormats[format == TokenFormat::gpt2 ? 0 : 1];
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

}  // namespace

std::string_view token_format_name(TokenFormat format) {
  return info(format).name;
}

std::optional<TokenFormat> token_format_from_name(std::string_view name) {
  for (const FormatInfo& f : kFormats)
    if (f.name == name) return f.format;
  return std::nullopt;
}

TokenFormat token_format_for_vocab(std::uint32_t vocab_size) {
  return vocab_size <= 65536 ? TokenFormat::gpt2 : TokenFormat::llama3;
}

TokenFile read_token_file(const std::string& path, std::optional<std::uint32_t> vocab_size) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    throw InputError(fmt::format("{}: not a regular file", path));
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) throw InputError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  auto fail = [&](const std::string& what) -> InputError {
    return InputError(fmt::format("{}: {}", path, what));
  };
  if (std::fseek(f.get(), 0, SEEK_END) != 0) throw fail(std::strerror(errno));
  const long size = std::ftell(f.get());
  if (size < 0) throw fail(fmt::format("cannot tell its size: {}", std::strerror(errno)));
  std::rewind(f.get());
  if (std::size_t(size) < kHeaderBytes)
    throw fail(fmt::format("{} bytes, shorter than the {}-byte header of an llm.c token file", size,
                           kHeaderBytes));
  std::int32_t header[kHeaderInts];
  if (std::fread(header, 4, kHeaderInts, f.get()) != kHeaderInts)
    throw fail("cannot read the header");
  const FormatInfo* format = nullptr;
  for (const FormatInfo& candidate : kFormats)
    if (header[0] == candidate.magic) format = &candidate;
  if (!format)
    throw fail(fmt::format(
        "magic number {} is not an llm.c token file's (20240520 for gpt2, 20240801 for llama3)",
        header[0]));
  if (header[1] != format->version)
    throw fail(fmt::format("version {} with magic {} ({}); expected version {}", header[1],
                           format->magic, format->name, format->version));
  if (header[2] < 0) throw fail(fmt::format("token count {} in the header is negative", header[2]));
  const std::size_t count = std::size_t(header[2]);
  const std::size_t expected = kHeaderBytes + count * format->token_bytes;
  if (std::size_t(size) != expected)
    throw fail(fmt::format("{} bytes, expected {} (the header and {} tokens of {} bytes)", size,
                           expected, count, format->token_bytes));

  TokenFile out{std::vector<std::uint32_t>(count), format->format};
  if (count == 0) {
    // No tokens to read (and fread may not be given an empty vector's null pointer).
  } else if (format->token_bytes == 4) {
    if (std::fread(out.tokens.data(), 4, count, f.get()) != count)
      throw fail("cannot read the tokens");
  } else {
    std::vector<std::uint16_t> narrow(count);
    if (std::fread(narrow.data(), 2, count, f.get()) != count) throw fail("cannot read the tokens");
    std::copy(narrow.begin(), narrow.end(), out.tokens.begin());
  }
  if (vocab_size)
    for (std::size_t i = 0; i < count; ++i)
      if (out.tokens[i] >= *vocab_size)
        throw fail(fmt::format("token {} at index {} is not below the vocabulary size {}",
                               out.tokens[i], i, *vocab_size));
  return out;
}

void write_token_file(const std::string& path, std::span<const std::uint32_t> tokens,
                      TokenFormat format) {
  const FormatInfo& fi = info(format);
  auto fail = [&](const std::string& what) -> InputError {
    return InputError(fmt::format("{}: {}", path, what));
  };
  if (tokens.size() > 0x7FFFFFFFu)
    throw fail(fmt::format("{} tokens; an llm.c token file holds at most 2^31 - 1", tokens.size()));
  if (fi.token_bytes == 2)
    for (std::size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] > 0xFFFF)
        throw fail(fmt::format("token {} at index {} does not fit the gpt2 format's uint16 tokens",
                               tokens[i], i));
  std::int32_t header[kHeaderInts] = {};
  header[0] = fi.magic;
  header[1] = fi.version;
  header[2] = std::int32_t(tokens.size());
  File f(std::fopen(path.c_str(), "wb"));
  if (!f) throw fail(fmt::format("cannot write: {}", std::strerror(errno)));
  bool ok = std::fwrite(header, 4, kHeaderInts, f.get()) == kHeaderInts;
  if (tokens.empty()) {
    // Nothing after the header (and fwrite may not be given an empty span's null pointer).
  } else if (fi.token_bytes == 4) {
    ok = ok && std::fwrite(tokens.data(), 4, tokens.size(), f.get()) == tokens.size();
  } else {
    std::vector<std::uint16_t> narrow(tokens.begin(), tokens.end());
    ok = ok && std::fwrite(narrow.data(), 2, narrow.size(), f.get()) == narrow.size();
  }
  ok = std::fflush(f.get()) == 0 && ok;
  if (!ok) throw fail(fmt::format("cannot write: {}", std::strerror(errno)));
  if (std::fclose(f.release()) != 0)
    throw fail(fmt::format("cannot write: {}", std::strerror(errno)));
}

}  // namespace fsdp::models
