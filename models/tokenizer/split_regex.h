// A pre-tokenizer's regex through PCRE2 (UTF + UCP: \p{L}, \p{N}, (?!\S), (?i:...) as Oniguruma
// reads them in HF tokenizers), split "Isolated": every match and every stretch between matches
// becomes a piece, in order.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace fsdp::models {

class JsonPlace;

// What one matching call needs for itself (match data, JIT stack): one per thread and call,
// while the compiled pattern is shared.
class RegexScratch {
 public:
  RegexScratch();
  ~RegexScratch();
  RegexScratch(const RegexScratch&) = delete;
  RegexScratch& operator=(const RegexScratch&) = delete;
  struct Parts;
  Parts& parts() { return *parts_; }

 private:
  std::unique_ptr<Parts> parts_;
};

class SplitRegex {
 public:
  // Compiles `pattern`; an error names `place` (the JSON field it came from) and PCRE2's reason.
  SplitRegex(const std::string& pattern, const JsonPlace& place);
  ~SplitRegex();
  SplitRegex(SplitRegex&&) noexcept;
  SplitRegex& operator=(SplitRegex&&) noexcept;

  // Calls emit on each non-empty piece of `text` (valid UTF-8), matches and gaps alike.
  void split(std::string_view text, RegexScratch& scratch,
             const std::function<void(std::string_view)>& emit) const;
  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::string pattern_;
  std::unique_ptr<Code> code_;
};

}  // namespace fsdp::models
