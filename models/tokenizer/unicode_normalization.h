// Unicode's canonical normalization forms through utf8proc: tokenizers' NFC and NFD normalizers
// (Qwen2's, Qwen2.5's and Qwen3's tokenizer.json have NFC). tokenizers 0.23's tables are older
// than Unicode 12.1: for NFC and NFD they differ from utf8proc 2.8's (Unicode 15.0) only on
// Dives Akuru's U+11938 = U+11935 U+11930 (Unicode 13), refused here; for NFKC and NFKD on 134
// characters (U+32FF, U+A7F2..., U+10781...), so those two are not offered (every code point
// compared: tools/torch_reference/make_tokenizer_fixtures.py --compare-normalizers).
#pragma once

#include <string>
#include <string_view>

namespace fsdp::models {

enum class UnicodeForm { nfc, nfd };

// `text` (valid UTF-8: the tokenizer checks it first) in normalization form `form`; a text that
// HF tokenizers would normalize differently (above) is an InputError.
std::string normalize_unicode(std::string_view text, UnicodeForm form);

}  // namespace fsdp::models
