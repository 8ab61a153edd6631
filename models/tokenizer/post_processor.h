// The post_processor of a tokenizer.json, for one sequence: TemplateProcessing's "single" template
// (Llama 3: "<|begin_of_text|> $A") as the ids before and after the encoded text, applied when
// add_special_tokens. ByteLevel as a post-processor changes only offsets, so it adds nothing.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <vector>

namespace fsdp::models {

class JsonPlace;

class PostProcessor {
 public:
  // From the "post_processor" field at `place` (null, ByteLevel, TemplateProcessing, or a
  // Sequence of them); any other processor is an InputError naming the field and its value.
  static PostProcessor from_json(const nlohmann::json& value, const JsonPlace& place);

  // ids with the template's special tokens around them.
  std::vector<std::uint32_t> apply(std::vector<std::uint32_t> ids) const;
  // The template's ids before and after the text.
  const std::vector<std::uint32_t>& prefix() const { return prefix_; }
  const std::vector<std::uint32_t>& suffix() const { return suffix_; }

 private:
  void add(const nlohmann::json& value, const JsonPlace& place);
  void add_template(const nlohmann::json& value, const JsonPlace& place);
  std::vector<std::uint32_t> prefix_, suffix_;
  bool has_template_ = false;
};

}  // namespace fsdp::models
