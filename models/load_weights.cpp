#include "models/load_weights.h"

#include <fmt/format.h>

#include <set>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "core/autograd.h"
#include "core/input_error.h"
#include "core/io/safetensors.h"

namespace fsdp::models {

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

void load_safetensors_weights(nn::Module& model, const std::string& path) {
  std::unordered_map<std::string, Tensor> slots;
  for (const auto& [fqn, t] : model.state_dict()) slots.emplace(fqn, t);
  const bool gpt2 = model.has_child("transformer");
  io::SafetensorsFile file = [&] {
    try {
      return io::load_safetensors(path);
    } catch (const Error& e) {  // the reader's message names the file and what is wrong
      throw InputError(e.what());
    }
  }();
  std::unordered_set<const TensorImpl*> loaded;
  autograd::NoGradGuard no_grad;
  for (auto& [name, value] : file.tensors) {
    std::string fqn = name;
    if (gpt2 && !slots.count(fqn) && slots.count("transformer." + fqn)) fqn = "transformer." + fqn;
    if (gpt2 && (ends_with(fqn, ".attn.bias") || ends_with(fqn, ".attn.masked_bias"))) continue;
    const auto it = slots.find(fqn);
    if (it == slots.end())
      throw InputError(fmt::format("{}: tensor '{}' is not a parameter or buffer of {}", path, name,
                                   model.type_name()));
    Tensor dst = it->second;
    if (dst.shape() != value.shape())
      throw InputError(fmt::format("{}: tensor '{}' has shape {}, the model's {} has {}", path,
                                   name, shape_str(value.shape()), fqn, shape_str(dst.shape())));
    dst.copy_(value);
    loaded.insert(dst.impl());
  }
  std::set<std::string> missing;
  for (const auto& [fqn, t] : slots)
    if (!loaded.count(t.impl())) missing.insert(fqn);
  if (!missing.empty()) {
    std::string names;
    for (const auto& m : missing) names += (names.empty() ? "" : ", ") + m;
    throw InputError(fmt::format("{}: missing {} of {}: {}", path,
                                 missing.size() == 1 ? "tensor" : "tensors", model.type_name(),
                                 names));
  }
}

}  // namespace fsdp::models
