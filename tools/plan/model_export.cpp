#include "tools/plan/model_export.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/error.h"
#include "core/nn/dropout.h"
#include "core/nn/multihead_attention.h"
#include "core/nn/transformer.h"

namespace fsdp::plan {

namespace {

using nlohmann::json;

// Ids are written only for what occupies more than one slot (shared modules, tied parameters),
// as tools/export_torch_model.py does: the reader then keeps no table of a million ids.
class Exporter {
 public:
  explicit Exporter(const nn::Module& root) {
    std::vector<const nn::Module*> stack{&root};
    ++module_slots_[&root];
    while (!stack.empty()) {
      const nn::Module* m = stack.back();
      stack.pop_back();
      for (const auto& [name, p] : m->parameter_slots())
        if (p.defined()) ++param_slots_[p.impl()];
      for (const auto& [name, child] : m->child_slots())
        if (child && ++module_slots_[child.get()] == 1) stack.push_back(child.get());
    }
  }

  json module(const nn::Module& m) {
    auto known = module_ids_.find(&m);
    if (known != module_ids_.end()) return json{{"ref", known->second}};
    json out{{"type", m.type_name()}};
    if (module_slots_.at(&m) > 1) {
      const std::string id = "m" + std::to_string(module_ids_.size());
      module_ids_.emplace(&m, id);
      out["id"] = id;
    }
    json bases = json::array();
    const auto& mro = m.module_class().mro();
    for (std::size_t i = 1; i < mro.size(); ++i) bases.push_back(mro[i]);
    out["bases"] = bases;
    json params = json::array();
    for (const auto& [name, p] : m.parameter_slots()) {
      if (!p.defined()) continue;
      auto tied = param_ids_.find(p.impl());
      if (tied != param_ids_.end()) {
        params.push_back({{"name", name}, {"ref", tied->second}});
        continue;
      }
      json param{{"name", name},
                 {"shape", p.shape()},
                 {"dtype", std::string(dtype_name(p.dtype()))},
                 {"requires_grad", p.requires_grad()}};
      if (param_slots_.at(p.impl()) > 1) {
        const std::string pid = "p" + std::to_string(param_ids_.size());
        param_ids_.emplace(p.impl(), pid);
        param["id"] = pid;
      }
      params.push_back(std::move(param));
    }
    out["params"] = params;
    json buffers = json::array();
    for (const auto& [name, b] : m.buffer_slots()) {
      if (!b.defined()) continue;
      json buffer{
          {"name", name}, {"shape", b.shape()}, {"dtype", std::string(dtype_name(b.dtype()))}};
      if (!m.is_persistent_buffer(name)) buffer["persistent"] = false;
      buffers.push_back(std::move(buffer));
    }
    out["buffers"] = buffers;
    json children = json::array();
    for (const auto& [name, child] : m.child_slots())
      if (child) children.push_back({{"name", name}, {"module", module(*child)}});
    out["children"] = children;
    json attrs = module_hyperparameters(m);
    if (!attrs.empty()) out["attributes"] = attrs;
    return out;
  }

 private:
  std::unordered_map<const nn::Module*, std::size_t> module_slots_;
  std::unordered_map<const TensorImpl*, std::size_t> param_slots_;
  std::unordered_map<const nn::Module*, std::string> module_ids_;
  std::unordered_map<const TensorImpl*, std::string> param_ids_;
};

}  // namespace

nlohmann::json module_hyperparameters(const nn::Module& m) {
  nlohmann::json a = nlohmann::json::object();
  if (const auto* mha = dynamic_cast<const nn::MultiheadAttention*>(&m)) {
    a["num_heads"] = mha->num_heads;
    a["dropout"] = mha->dropout;
  } else if (const auto* d = dynamic_cast<const nn::DropoutBase*>(&m)) {
    a["p"] = d->p;
  } else if (const auto* t = dynamic_cast<const nn::TransformerEncoderLayer*>(&m)) {
    a["activation"] = t->options.activation;
    a["norm_first"] = t->options.norm_first;
  }
  return a;
}

std::string model_to_json(nn::Module& root) {
  Exporter e(root);
  json doc{{"format", "fsdp-model/1"}, {"module", e.module(root)}};
  return doc.dump();
}

void write_model_file(nn::Module& root, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  FSDP_CHECK(out.good(), ValueError, "cannot write the model file '{}'", path);
  out << model_to_json(root) << '\n';
  out.flush();
  FSDP_CHECK(out.good(), ValueError, "writing the model file '{}' failed", path);
}

}  // namespace fsdp::plan
