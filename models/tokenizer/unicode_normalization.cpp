#include "models/tokenizer/unicode_normalization.h"

#include <fmt/format.h>
#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "core/input_error.h"

namespace fsdp::models {

namespace {
// Dives Akuru's U+11938 and its parts U+11935 U+11930, in UTF-8.
constexpr std::string_view kComposed = "\xF0\x91\xA4\xB8";
constexpr std::string_view kParts = "\xF0\x91\xA4\xB5\xF0\x91\xA4\xB0";
}  // namespace

std::string normalize_unicode(std::string_view text, UnicodeForm form) {
  // tokenizers' tables predate this decomposition: it keeps U+11938 in NFD and the parts apart
  // in NFC (U+11930 is a starter, so only the adjacent pair composes).
  const std::string_view differs = form == UnicodeForm::nfc ? kParts : kComposed;
  if (text.find(differs) != std::string_view::npos)
    throw InputError(fmt::format(
        "the text has {} (Dives Akuru), which Hugging Face tokenizers' {} (tables before "
        "Unicode 12.1) leaves as it is and Unicode 13 and later change: refused rather than "
        "encoded otherwise",
        form == UnicodeForm::nfc ? "U+11935 U+11930" : "U+11938",
        form == UnicodeForm::nfc ? "NFC" : "NFD"));
  // utf8proc_NFC's and utf8proc_NFD's options, with the length instead of NULTERM: a NUL in the
  // text is a character like any other.
  const int options =
      UTF8PROC_STABLE | (form == UnicodeForm::nfc ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE);
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &out,
                                          static_cast<utf8proc_option_t>(options));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  if (n < 0)  // the text was checked as UTF-8 before; only memory can fail here
    throw InputError(fmt::format("Unicode normalization failed: {}", utf8proc_errmsg(n)));
  return std::string(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
}

}  // namespace fsdp::models
