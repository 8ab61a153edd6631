#include "policies/mixed_precision_override.h"

#include <any>
#include <map>

#include "core/traversal/pre_order.h"
#include "core/warnings.h"
#include "policies/wrapper_fn.h"

namespace fsdp::policies {

namespace {
// Upstream keeps "the last input dtype" in a module-keyed WeakKeyDictionary shared by every hook
// registration; a module attribute is the same thing, owned by the module.
constexpr const char* kInputDtypeAttr = "_mp_override_input_dtype";

// Upstream's cast_fn: cast floating tensors to `dtype`, recording the dtype each cast one had.
// The post hook uses it too, so after a forward the recorded dtype is the output's (float32):
// upstream's behaviour, kept so hook interplay (e.g. hooks registered twice) matches.
Tensor cast_recording(nn::Module& module, DType dtype, const Tensor& x) {
  if (!x.defined() || !x.is_floating_point() || x.dtype() == dtype) return x;
  module.set_attr(kInputDtypeAttr, x.dtype());
  return x.to(dtype);
}

nn::Value cast_value(nn::Module& module, DType dtype, const nn::Value& v) {
  return nn::map_tensors(v, [&](const Tensor& t) { return cast_recording(module, dtype, t); });
}
}  // namespace

std::set<std::string> override_module_mixed_precision(const nn::ModulePtr& root,
                                                      const nn::ClassSet& classes) {
  std::set<std::string> overridden;
  WrapperOptions no_mixed_precision;
  no_mixed_precision.mixed_precision = Setting<MixedPrecision>::none();
  for (const auto& mod : traversal::modules_of(root)) {
    if (!mod->isinstance(classes)) continue;
    overridden.insert(mod->type_name());
    mod->set_attr(kWrapOverridesAttr, no_mixed_precision);
    // Appended (not prepended) so they run after every other hook, as upstream.
    mod->register_forward_pre_hook(
        [](nn::Module& m, const nn::Args& args) -> std::optional<nn::Args> {
          nn::Args out;
          for (const auto& v : args.positional)
            out.positional.push_back(cast_value(m, DType::Float32, v));
          for (const auto& [k, v] : args.kwargs) out.kwargs[k] = cast_value(m, DType::Float32, v);
          return out;
        });
    mod->register_forward_hook(
        [](nn::Module& m, const nn::Args&, const nn::Value& output) -> std::optional<nn::Value> {
          // No floating input was cast: nothing recorded, the output stays as it is.
          if (!m.has_attr(kInputDtypeAttr)) return std::nullopt;
          DType old_dtype = std::any_cast<DType>(m.attr(kInputDtypeAttr));
          return cast_value(m, old_dtype, output);
        });
  }
  return overridden;
}

void run_mixed_precision_override_policy(const nn::ModulePtr& root, const nn::ClassSet& classes,
                                         const traversal::ModuleSet& ignored_modules,
                                         const WrapperOptions& root_options,
                                         TargetModules& targets) {
  for (const auto& module : traversal::modules_of(root)) {
    if (traversal::contains(ignored_modules, module.get())) continue;
    if (!module->isinstance(classes)) continue;
    // This policy overrides any existing one; inherit the root options only if not a target yet.
    if (!targets.contains(module.get())) targets.set(module, root_options);
    targets.find(module.get())->mixed_precision = Setting<MixedPrecision>::none();
  }
}

std::string python_class_repr(const std::string& name) {
  static const std::map<std::string, std::string> kTorchModules = {
      {"BatchNorm1d", "batchnorm"},
      {"BatchNorm2d", "batchnorm"},
      {"BatchNorm3d", "batchnorm"},
      {"SyncBatchNorm", "batchnorm"},
      {"_BatchNorm", "batchnorm"},
      {"_NormBase", "batchnorm"},
      {"LayerNorm", "normalization"},
      {"GroupNorm", "normalization"},
      {"Linear", "linear"},
      {"Identity", "linear"},
      {"NonDynamicallyQuantizableLinear", "linear"},
      {"Embedding", "sparse"},
      {"Dropout", "dropout"},
      {"Sequential", "container"},
      {"ModuleList", "container"},
      {"ModuleDict", "container"},
      {"MultiheadAttention", "activation"},
      {"ReLU", "activation"},
      {"GELU", "activation"},
      {"Transformer", "transformer"},
      {"TransformerEncoder", "transformer"},
      {"TransformerDecoder", "transformer"},
      {"TransformerEncoderLayer", "transformer"},
      {"TransformerDecoderLayer", "transformer"},
      {"Module", "module"}};
  auto it = kTorchModules.find(name);
  if (it == kTorchModules.end()) return "<class '" + name + "'>";
  return "<class 'torch.nn.modules." + it->second + "." + name + "'>";
}

void warn_on_overridden_mixed_precision(const std::set<std::string>& overridden_classes) {
  if (overridden_classes.empty()) return;
  // Python prints a set of classes; its order is arbitrary there, sorted by name here.
  std::string classes = "{";
  for (const auto& c : overridden_classes)
    classes += (classes.size() > 1 ? ", " : "") + python_class_repr(c);
  classes += "}";
  warn(
      "Both mixed precision and an auto_wrap_policy were specified to FSDP, where the wrapped "
      "module has submodules of type:\n" +
          classes +
          "\nThese modules will be wrapped as separate FSDP instacnes with mixed precision "
          "disabled.",
      "UserWarning");
}

}  // namespace fsdp::policies
