// The transformers fixtures of tests/fixtures/hf_models/ (tools/torch_reference/
// make_hf_model_fixtures.py): each model's directory and its expected tensors.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/io/safetensors.h"
#include "models/pretrained.h"
#include "tests/support/fixture.h"

namespace fsdp::testing {

inline const std::vector<std::string>& hf_fixture_models() {
  static const std::vector<std::string> names = {"gpt2_tied",
                                                 "gpt2_gelu_untied",
                                                 "llama_gqa",
                                                 "llama_tied_bias_llama3",
                                                 "llama_linear_head_dim",
                                                 "mistral_sliding_window",
                                                 "qwen2_tied_window",
                                                 "qwen3_qk_norm",
                                                 "gemma3_sliding_rope",
                                                 "gemma3_softcap_untied",
                                                 "gemma2_softcap"};
  return names;
}

inline std::string hf_fixture_dir(const std::string& model) {
  return fixture_path("hf_models/" + model);
}

// The fixture model with its weights (from_pretrained), in eval mode (no dropout).
inline std::shared_ptr<models::CausalLM> load_hf_fixture(const std::string& model) {
  auto m = models::from_pretrained(hf_fixture_dir(model));
  m->eval();
  return m;
}

// The tensors of a safetensors file by name.
inline std::map<std::string, Tensor> tensors_by_name(const std::string& path) {
  std::map<std::string, Tensor> out;
  for (auto& [name, t] : io::load_safetensors(path).tensors) out.emplace(name, t);
  return out;
}

// expected.safetensors: input_ids, logits, prompt_ids, greedy_ids (and inv_freq for Llama;
// full_attention_inv_freq and sliding_attention_inv_freq for Gemma 3; inv_freq for Gemma 2).
inline std::map<std::string, Tensor> hf_expected(const std::string& model) {
  return tensors_by_name(hf_fixture_dir(model) + "/expected.safetensors");
}

}  // namespace fsdp::testing
