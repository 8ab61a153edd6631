#include "models/tokenizer/split_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <fmt/format.h>
#include <pcre2.h>

#include "core/error.h"
#include "models/tokenizer/json_place.h"
#include "models/tokenizer/unicode_classes.h"

namespace fsdp::models {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

// The JIT's stack grows up to this; its default 32 KiB is too small for some long runs.
constexpr std::size_t kJitStackMax = 8u << 20;

}  // namespace

struct RegexScratch::Parts {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32u << 10, kJitStackMax, nullptr);
  Parts() {
    if (!data || !context || !jit_stack) throw RuntimeError("PCRE2: out of memory");
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~Parts() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

RegexScratch::RegexScratch() : parts_(std::make_unique<Parts>()) {}
RegexScratch::~RegexScratch() = default;

struct SplitRegex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

SplitRegex::SplitRegex(const std::string& pattern, const JsonPlace& place)
    : pattern_(pattern), code_(std::make_unique<Code>()) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  const auto compile = [&](const std::string& text) {
    return pcre2_compile(reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(),
                         PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  };
  code_->code = compile(with_oniguruma_classes(pattern));
  if (!code_->code) {  // the error and its offset as in the file's own text
    const std::string rewritten_error = pcre2_message(error);
    if (pcre2_code* plain = compile(pattern)) {
      pcre2_code_free(plain);
      place.malformed("PCRE2 cannot compile the regex with Oniguruma's classes written out: " +
                      rewritten_error);
    }
    place.malformed(fmt::format("PCRE2 cannot compile the regex at offset {}: {}", offset,
                                pcre2_message(error)));
  }
  // The JIT is an optimisation: where it is unavailable, pcre2_match interprets the pattern.
  pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE);
}

SplitRegex::~SplitRegex() = default;
SplitRegex::SplitRegex(SplitRegex&&) noexcept = default;
SplitRegex& SplitRegex::operator=(SplitRegex&&) noexcept = default;

void SplitRegex::split(std::string_view text, RegexScratch& scratch,
                       const std::function<void(std::string_view)>& emit) const {
  auto& parts = scratch.parts();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t gap = 0, from = 0;  // the unmatched stretch starts at gap; search from `from`
  while (from < text.size()) {
    // The text was checked as UTF-8 once, before it was split (Tokenizer::encode).
    const int rc = pcre2_match(code_->code, subject, text.size(), from, PCRE2_NO_UTF_CHECK,
                               parts.data, parts.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0)
      throw RuntimeError(fmt::format("PCRE2 failed matching the pre-tokenizer regex at byte {}: {}",
                                     from, pcre2_message(rc)));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(parts.data);
    const std::size_t begin = ov[0], end = ov[1];
    if (end == begin) {  // an empty match splits nothing: look again one character on
      from = begin + 1;
      while (from < text.size() && (static_cast<unsigned char>(text[from]) & 0xC0) == 0x80) ++from;
      continue;
    }
    if (begin > gap) emit(text.substr(gap, begin - gap));
    emit(text.substr(begin, end - begin));
    gap = from = end;
  }
  if (gap < text.size()) emit(text.substr(gap));
}

}  // namespace fsdp::models
