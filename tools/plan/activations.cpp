#include "tools/plan/activations.h"

#include <fmt/format.h>

#include <any>
#include <optional>
#include <set>

#include "tools/plan/checked_math.h"
#include "tools/plan/model_export.h"
#include "tools/plan/model_file.h"

namespace fsdp::plan {
namespace {

// From a model file's "attributes", or, for a module built in C++ (a Hugging Face config's), its
// own fields as the exporter writes them.
template <typename T>
std::optional<T> hyperparameter(const nn::Module& m, const std::string& name) {
  const std::string key = kHyperparameterPrefix + name;
  if (!m.has_attr(key)) {
    const nlohmann::json own = module_hyperparameters(m);
    const auto it = own.find(name);
    if (it == own.end()) return std::nullopt;
    if constexpr (std::is_same_v<T, double>) {
      if (it->is_number()) return it->get<double>();
    } else if constexpr (std::is_same_v<T, std::int64_t>) {
      if (it->is_number_integer()) return it->get<std::int64_t>();
    } else if constexpr (std::is_same_v<T, bool>) {
      if (it->is_boolean()) return it->get<bool>();
    } else if (it->is_string()) {
      return it->get<std::string>();
    }
    return std::nullopt;
  }
  const std::any& v = m.attr(key);
  if (const T* x = std::any_cast<T>(&v)) return *x;
  if constexpr (std::is_same_v<T, double>)
    if (const auto* i = std::any_cast<std::int64_t>(&v)) return static_cast<double>(*i);
  return std::nullopt;
}

// The size of dimension `dim` of parameter `name`, when the module has it.
std::optional<std::int64_t> param_dim(const nn::Module& m, const std::string& name, int dim) {
  if (!m.has_parameter(name)) return std::nullopt;
  const Tensor& p = m.param(name);
  if (!p.defined() || p.dim() <= dim) return std::nullopt;
  return p.size(dim);
}

bool is_container(const nn::Module& m) {
  return m.isinstance("Sequential") || m.isinstance("ModuleList") || m.isinstance("ModuleDict") ||
         m.isinstance("TransformerEncoder") || m.type_name() == "Module";
}

bool is_pointwise(const nn::Module& m) {
  return m.isinstance("ReLU") || m.isinstance("GELU") || m.isinstance("Tanh") ||
         m.isinstance("Sigmoid");
}

bool is_dropout(const nn::Module& m) {
  return m.isinstance("_DropoutNd") || m.isinstance("Dropout");
}

class Estimator {
 public:
  Estimator(std::int64_t batch, std::int64_t seq, std::int64_t elem)
      : seq_(seq), elem_(elem), rows_(checked_mul(batch, seq, "the activation rows")) {
    est_.batch = batch;
    est_.seq = seq;
  }

  ActivationEstimate run(const nn::Module& root) {
    visit(root, false);
    if (last_width_ > 0) add("loss", 2, last_width_, elem_);  // output kept + its gradient
    return std::move(est_);
  }

 private:
  // `in_layer`: inside a TransformerEncoderLayer, whose rule counts its dropouts.
  void visit(const nn::Module& m, bool in_layer) {
    const std::string& type = m.type_name();
    if (m.isinstance("Linear")) {
      if (auto in = param_dim(m, "weight", 1)) add(type, 1, *in, elem_);
      if (auto out = param_dim(m, "weight", 0)) last_width_ = *out;
    } else if (m.isinstance("LayerNorm")) {
      if (auto d = param_dim(m, "weight", 0)) {
        add(type, 1, *d, elem_);
        add(type, 1, 2, 4);  // mean and 1/std in float32
        last_width_ = *d;
      } else {
        assume(type, "no weight (elementwise_affine=False): its width is the previous module's");
        add(type, 1, last_width_, elem_);
        add(type, 1, 2, 4);
      }
    } else if (m.isinstance("Embedding")) {
      if (auto d = param_dim(m, "weight", 1)) last_width_ = *d;
    } else if (m.isinstance("MultiheadAttention")) {
      attention(m);
    } else if (m.isinstance("TransformerEncoderLayer")) {
      layer(m);
    } else if (is_pointwise(m)) {
      add(type, 1, last_width_, elem_);
    } else if (is_dropout(m)) {
      const double p = hyperparameter<double>(m, "p").value_or(0.0);
      if (p > 0 && !in_layer) add(type, 1, last_width_, 1);
    } else if (!is_container(m)) {
      if (unknown_.insert(type).second) est_.not_estimated.push_back(type);
    }
    const bool layer_children = in_layer || m.isinstance("TransformerEncoderLayer");
    for (const auto& [name, child] : m.named_children())
      if (!m.isinstance("MultiheadAttention") || name == "out_proj") visit(*child, layer_children);
  }

  void attention(const nn::Module& m) {
    const std::string& type = m.type_name();
    const std::int64_t e =
        param_dim(m, "in_proj_weight", 1).value_or(param_dim(m, "q_proj_weight", 1).value_or(0));
    std::int64_t heads = hyperparameter<std::int64_t>(m, "num_heads").value_or(0);
    if (heads <= 0) {
      heads = std::max<std::int64_t>(1, e / 64);
      assume(type, fmt::format("num_heads not in the model file: {} assumed (head_dim 64)", heads));
    }
    add(type, 4, e, elem_);  // the in-projection's input; q, k and v
    const std::int64_t probs = checked_mul(heads, seq_, "the attention probabilities");
    add(type, 1, probs, elem_);
    if (hyperparameter<double>(m, "dropout").value_or(0.0) > 0) add(type, 1, probs, 1);
    last_width_ = e;
  }

  void layer(const nn::Module& m) {
    const std::string& type = m.type_name();
    std::int64_t ff = 0, d = 0;
    for (const auto& [name, child] : m.named_children()) {
      if (name == "linear1") ff = param_dim(*child, "weight", 0).value_or(0);
      if (name == "linear2") d = param_dim(*child, "weight", 0).value_or(0);
    }
    const auto activation = hyperparameter<std::string>(m, "activation");
    if (!activation)
      assume(type, "activation not in the model file: relu assumed (PyTorch's default)");
    if (activation.value_or("relu") == "gelu") add(type, 1, ff, elem_);  // GELU saves its input
    for (const auto& [name, child] : m.named_children()) {
      if (!is_dropout(*child) || hyperparameter<double>(*child, "p").value_or(0.0) <= 0) continue;
      add(type, 1, name == "dropout" ? ff : d, 1);  // byte masks
    }
  }

  void add(const std::string& type, std::int64_t count, std::int64_t width, std::int64_t bytes) {
    const char* what = "the activation estimate";
    const std::int64_t b =
        checked_mul(checked_mul(checked_mul(rows_, width, what), count, what), bytes, what);
    add_to(est_.by_type[type], b, what);
    add_to(est_.bytes, b, what);
  }

  void assume(const std::string& type, const std::string& what) {
    const std::string line = type + ": " + what;
    if (assumed_.insert(line).second) est_.assumed.push_back(line);
  }

  std::int64_t seq_, elem_, rows_;
  std::int64_t last_width_ = 0;
  ActivationEstimate est_;
  std::set<std::string> unknown_, assumed_;
};

}  // namespace

ActivationEstimate estimate_activations(const nn::Module& root, std::int64_t batch,
                                        std::int64_t seq, std::int64_t elem_bytes) {
  if (batch <= 0 || seq <= 0)
    throw InputError(fmt::format("--batch and --seq must be positive (got {} and {})", batch, seq));
  return Estimator(batch, seq, elem_bytes).run(root);
}

}  // namespace fsdp::plan
