#include "models/load_weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <regex>
#include <set>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "core/autograd.h"
#include "core/error.h"
#include "core/input_error.h"
#include "core/ops.h"

namespace fsdp::models {

CheckpointNames checkpoint_names(const nn::Module& model, const io::SafetensorsDir& files) {
  CheckpointNames names;
  if (!model.has_child("transformer")) {  // Llama: the FQNs as they are
    // inv_freq was a persistent buffer of each layer once: transformers ignores those keys.
    names.ignore_unexpected = {R"(rotary_emb\.inv_freq$)"};
    return names;
  }
  names.name_in_file = [&files](const std::string& fqn) {
    constexpr std::string_view kPrefix = "transformer.";
    if (files.contains(fqn) || !std::string_view(fqn).starts_with(kPrefix)) return fqn;
    std::string bare = fqn.substr(kPrefix.size());
    return files.contains(bare) ? bare : fqn;
  };
  names.ignore_unexpected = {R"(attn\.masked_bias$)", R"(attn\.bias$)"};
  return names;
}

io::SafetensorsDir open_pretrained_weights(const std::string& path) {
  try {
    return io::SafetensorsDir::open(path);
  } catch (const Error& e) {  // the reader's message names the file and what is wrong
    throw InputError(e.what());
  }
}

void load_safetensors_weights(nn::Module& model, const std::string& path) {
  load_pretrained_weights(model, open_pretrained_weights(path));
}

std::optional<std::pair<std::string, std::string>> differing_tied_tensors(
    nn::Module& model, const io::SafetensorsDir& files) {
  const CheckpointNames names = checkpoint_names(model, files);
  std::map<const TensorImpl*, std::vector<std::string>> in_file;  // by the model's tensor
  for (const auto& [fqn, t] : model.state_dict()) {
    const std::string name = names.name_in_file ? names.name_in_file(fqn) : fqn;
    if (files.contains(name)) in_file[t.impl()].push_back(name);
  }
  autograd::NoGradGuard no_grad;
  for (const auto& [impl, group] : in_file) {
    if (group.size() < 2) continue;
    const Tensor first = files.read(group[0]);
    for (std::size_t i = 1; i < group.size(); ++i) {
      const Tensor other = to_dtype(files.read(group[i]), first.dtype()).contiguous();
      if (std::memcmp(first.data_ptr(), other.data_ptr(), first.nbytes()) != 0)
        return std::minmax(group[0], group[i]);
    }
  }
  return std::nullopt;
}

void load_pretrained_weights(nn::Module& model, const io::SafetensorsDir& files) {
  const std::string& path = files.path();
  if (const auto tied = differing_tied_tensors(model, files))
    throw InputError(fmt::format(
        "{}: tensors '{}' and '{}' fill one tied parameter of {} but hold different values "
        "(transformers unties them: set tie_word_embeddings to false)",
        path, tied->first, tied->second, model.type_name()));
  // The model's tensors by their names in the file, with their FQNs.
  std::unordered_map<std::string, std::pair<std::string, Tensor>> slots;
  const CheckpointNames names = checkpoint_names(model, files);
  for (const auto& [fqn, t] : model.state_dict())
    slots.emplace(names.name_in_file ? names.name_in_file(fqn) : fqn, std::make_pair(fqn, t));
  std::vector<std::regex> ignored;
  for (const auto& pattern : names.ignore_unexpected) ignored.emplace_back(pattern);
  std::unordered_set<const TensorImpl*> loaded;
  autograd::NoGradGuard no_grad;
  files.will_read_all();
  for (const std::string& name : files.names()) {
    const auto it = slots.find(name);
    if (it == slots.end()) {
      if (std::any_of(ignored.begin(), ignored.end(),
                      [&](const std::regex& r) { return std::regex_search(name, r); }))
        continue;
      throw InputError(fmt::format("{}: tensor '{}' is not a parameter or buffer of {}", path, name,
                                   model.type_name()));
    }
    const auto& [fqn, slot] = it->second;
    Tensor dst = slot;
    const io::SafetensorsTensorInfo& info = files.info(name);
    if (dst.shape() != info.shape)
      throw InputError(fmt::format("{}: tensor '{}' has shape {}, the model's {} has {}", path,
                                   name, shape_str(info.shape), fqn, shape_str(dst.shape())));
    if (dst.device() == kCPU && dst.is_contiguous())
      files.read_into(name, dst);  // the file's bytes straight into the parameter's storage
    else
      dst.copy_(files.read(name));
    loaded.insert(dst.impl());
  }
  std::set<std::string> missing;
  for (const auto& [name, slot] : slots)
    if (!loaded.count(slot.second.impl())) missing.insert(slot.first);
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    throw InputError(fmt::format("{}: missing {} of {}: {}", path,
                                 missing.size() == 1 ? "tensor" : "tensors", model.type_name(),
                                 list));
  }
}

}  // namespace fsdp::models
