// HF tokenizers' \p{L}, \p{N}, \s and \S for PCRE2: tokenizers 0.23 matches with Oniguruma's
// Unicode 16 tables, Debian 12's PCRE2 10.42 has Unicode 14's, so letters of CJK Ext. H and I
// and of newer scripts, 120 digits, and U+180E (a space only to PCRE2) would split differently.
// The ranges come from tools/torch_reference/make_unicode_class_delta.py.
#pragma once

#include <string>
#include <string_view>

namespace fsdp::models {

// `pattern` with each \p{L}, \p{N}, \P{L}, \P{N}, \s and \S written as a class of the code
// points Oniguruma's match (PCRE2's own class plus the ranges its tables lack; \s as Oniguruma's
// list). Inside a character class \S and \P{..} stay as they are (a negation cannot join a
// class's union there); escapes, \Q...\E and every other construct are copied unchanged.
std::string with_oniguruma_classes(std::string_view pattern);

}  // namespace fsdp::models
