// The module tree: ordered named children, parameters and buffers; PyTorch's traversal
// semantics (named_modules, named_parameters, ...); class identity with isinstance semantics;
// child slots that wrapping can replace; forward hooks; train/eval.
#pragma once

#include <any>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "core/value.h"

namespace fsdp::nn {

// A module class: its name and its ancestors, nearest first (Python's MRO without `object`),
// e.g. BatchNorm1d: {"BatchNorm1d", "_BatchNorm", "_NormBase", "Module"}.
class ModuleClass {
 public:
  // Interned: one object per (name, ancestry). `bases` are the direct bases' classes.
  static const ModuleClass& get(const std::string& name,
                                std::initializer_list<const ModuleClass*> bases);
  // For classes described by data (model files): the full ancestor list, nearest first.
  static const ModuleClass& from_names(const std::string& name,
                                       const std::vector<std::string>& mro);
  static const ModuleClass& module();  // "Module"

  const std::string& name() const { return mro_.front(); }
  const std::vector<std::string>& mro() const { return mro_; }  // name first
  bool is_subclass_of(std::string_view cls) const;

  explicit ModuleClass(std::vector<std::string> mro) : mro_(std::move(mro)) {}

 private:
  std::vector<std::string> mro_;
};

// A set of classes, matched with isinstance semantics (a module matches when its class or one
// of its ancestors is in the set).
class ClassSet {
 public:
  ClassSet() = default;
  ClassSet(std::initializer_list<std::string> names) : names_(names) {}
  explicit ClassSet(std::set<std::string> names) : names_(std::move(names)) {}
  template <typename... M>
  static ClassSet of() {
    return ClassSet({M::static_class().name()...});
  }
  void insert(const std::string& name) { names_.insert(name); }
  ClassSet united(const ClassSet& other) const;  // union, like Python's set.union
  bool contains(const std::string& name) const { return names_.count(name) > 0; }
  bool matches(const ModuleClass& cls) const;
  const std::set<std::string>& names() const { return names_; }
  bool empty() const { return names_.empty(); }
  std::string str() const;  // "{BatchNorm1d, Linear}"
  friend bool operator==(const ClassSet&, const ClassSet&) = default;

 private:
  std::set<std::string> names_;
};

class Module;
using ModulePtr = std::shared_ptr<Module>;

class Module : public std::enable_shared_from_this<Module> {
 public:
  static const ModuleClass& static_class() { return ModuleClass::module(); }

  explicit Module(const ModuleClass& cls = ModuleClass::module());
  virtual ~Module();  // iterative: a chain 100 000 modules deep is freed without deep recursion
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // --- class identity
  const ModuleClass& module_class() const { return *class_; }
  const std::string& type_name() const { return class_->name(); }
  bool isinstance(const ClassSet& classes) const { return classes.matches(*class_); }
  bool isinstance(std::string_view cls) const { return class_->is_subclass_of(cls); }

  // --- children: ordered slots; parents call children through their slot, so a child replaced
  // in its slot (wrapping) is called through its replacement.
  ModulePtr register_module(const std::string& name, ModulePtr child);  // child may be null
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> child) {
    register_module(name, ModulePtr(child));
    return child;
  }
  // Python's setattr(parent, name, child) for an existing child slot.
  void replace_child(const std::string& name, ModulePtr child);
  // The same for the slot at `index` of child_slots() (wrapping engines know the index).
  void replace_child_at(std::size_t index, ModulePtr child);
  bool has_child(const std::string& name) const;
  // The module in slot `name`; throws KeyError listing the children when absent.
  const ModulePtr& child(const std::string& name) const;
  // Typed access to the current occupant (null if it is not an M, e.g. after wrapping).
  template <typename M>
  std::shared_ptr<M> child_as(const std::string& name) const {
    return std::dynamic_pointer_cast<M>(child(name));
  }
  // All slots in registration order, including empty ones and repeated objects.
  const std::vector<std::pair<std::string, ModulePtr>>& child_slots() const { return children_; }

  // PyTorch traversals. named_children skips empty slots and repeats of one object.
  std::vector<std::pair<std::string, ModulePtr>> named_children() const;
  std::vector<ModulePtr> children() const;
  // Pre-order; shared modules once (unless remove_duplicate is false); names joined with '.'.
  std::vector<std::pair<std::string, ModulePtr>> named_modules(const std::string& prefix = "",
                                                               bool remove_duplicate = true);
  std::vector<ModulePtr> modules();
  // named_modules without materialising the names: fn(name, module) in the same order, where
  // `name` is valid only during the call. Memory O(depth), time linear in the tree (a chain
  // 100 000 deep has names totalling 10^10 characters, which named_modules would hold at once).
  void visit_named_modules(const std::function<void(const std::string&, const ModulePtr&)>& fn,
                           const std::string& prefix = "", bool remove_duplicate = true);
  // The module at a dotted path ("layers.0.attn"); "" is this module. KeyError when absent.
  ModulePtr get_submodule(const std::string& path);

  // --- parameters and buffers (slots may hold an undefined tensor, like bias=None)
  Tensor register_parameter(const std::string& name, Tensor param, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor buffer, bool persistent = true);
  bool has_parameter(const std::string& name) const;
  bool has_buffer(const std::string& name) const;
  // False for a buffer registered with persistent=false (state_dict leaves it out).
  bool is_persistent_buffer(const std::string& name) const { return !non_persistent_.count(name); }
  // The tensor in a slot (KeyError listing the names when absent).
  const Tensor& param(const std::string& name) const;
  const Tensor& buffer(const std::string& name) const;
  // Replace a slot's tensor (tied weights: child->set_parameter("weight", other->param("weight"))).
  void set_parameter(const std::string& name, Tensor param);
  void set_buffer(const std::string& name, Tensor buffer);
  // Remove a parameter slot, returning its tensor (FSDP moves parameters into flat parameters).
  Tensor remove_parameter(const std::string& name);
  const std::vector<std::pair<std::string, Tensor>>& parameter_slots() const { return params_; }
  // Plain (non-parameter) tensor attributes, Python's `module.weight = some_tensor`: not listed
  // by named_parameters, named_buffers or state_dict. param(name) falls back to them, so a layer
  // whose Parameter was replaced by a plain view (FSDP with use_orig_params=False) finds it.
  // A name held by a child, parameter or buffer slot is a KeyError.
  void set_tensor_attribute(const std::string& name, Tensor t);
  bool has_tensor_attribute(const std::string& name) const;
  const Tensor& tensor_attribute(const std::string& name) const;  // KeyError when absent
  Tensor remove_tensor_attribute(const std::string& name);        // KeyError when absent
  const std::vector<std::pair<std::string, Tensor>>& buffer_slots() const { return buffers_; }

  // Tied parameters once (unless remove_duplicate is false), first name wins; undefined skipped.
  std::vector<std::pair<std::string, Tensor>> named_parameters(const std::string& prefix = "",
                                                               bool recurse = true,
                                                               bool remove_duplicate = true);
  std::vector<Tensor> parameters(bool recurse = true);
  std::vector<std::pair<std::string, Tensor>> named_buffers(const std::string& prefix = "",
                                                            bool recurse = true,
                                                            bool remove_duplicate = true);
  std::vector<Tensor> buffers(bool recurse = true);
  // named_buffers() without the non-persistent ones (those state_dict leaves out).
  std::vector<std::pair<std::string, Tensor>> named_persistent_buffers();
  // Parameters and persistent buffers by FQN, PyTorch's state_dict order (no de-duplication).
  std::vector<std::pair<std::string, Tensor>> state_dict(const std::string& prefix = "");
  // Copies values into parameters/buffers by FQN. strict: missing or unexpected keys throw.
  void load_state_dict(const std::vector<std::pair<std::string, Tensor>>& state,
                       bool strict = true);
  std::int64_t num_parameters();  // unique parameter elements

  // --- calling
  // Runs forward pre-hooks, forward(), then forward hooks.
  Value operator()(const Args& args);
  Value operator()(const Tensor& x) { return (*this)(Args{Value(x)}); }
  template <typename A, typename B, typename... Rest>
  Value operator()(const A& a, const B& b, const Rest&... rest) {
    return (*this)(Args{Value(a), Value(b), Value(rest)...});
  }
  // Override in subclasses. The default throws as PyTorch does for containers without forward.
  virtual Value forward(const Args& args);
  // Calls the module currently in slot `name`.
  Value call_child(const std::string& name, const Args& args) { return (*child(name))(args); }
  Tensor call_child(const std::string& name, const Tensor& x) {
    return (*child(name))(Args{Value(x)}).tensor();
  }

  // Forward hooks. A pre-hook may return replacement args; a hook may return a replacement
  // output. prepend=true runs before the already registered hooks.
  using ForwardPreHook = std::function<std::optional<Args>(Module&, const Args&)>;
  using ForwardHook = std::function<std::optional<Value>(Module&, const Args&, const Value&)>;
  HookHandle register_forward_pre_hook(ForwardPreHook hook, bool prepend = false);
  HookHandle register_forward_hook(ForwardHook hook, bool prepend = false);

  // --- modes and conversions
  Module& train(bool mode = true);  // recursive
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }
  Module& to(DType dtype);    // floating parameters and buffers, in place (identity kept)
  Module& to(Device device);  // parameters and buffers, in place (identity kept)
  // Gives every parameter and buffer (this module's only, unless recurse) fresh uninitialised
  // storage on `device`, in place: tensors keep their identity, so tied weights stay tied and
  // optimizers and hooks keep seeing them (torch's to_empty). Materialises a meta-device model.
  Module& to_empty(Device device, bool recurse = true);
  // Re-initialises this module's parameters and buffers as its constructor does, drawing from
  // this thread's default generator (torch's per-layer reset_parameters). Modules without
  // parameters of their own do nothing.
  virtual void reset_parameters() {}
  void zero_grad(bool set_to_none = true);
  // Applies fn to every module (children first, like PyTorch's Module.apply).
  Module& apply(const std::function<void(Module&)>& fn);

  // --- attributes: named values that code above core attaches to modules (e.g. policies'
  // wrap overrides). Python code does this with setattr.
  bool has_attr(const std::string& name) const { return attrs_.count(name) > 0; }
  std::any& attr(const std::string& name);  // KeyError when absent
  const std::any& attr(const std::string& name) const;
  void set_attr(const std::string& name, std::any value) { attrs_[name] = std::move(value); }
  void erase_attr(const std::string& name) { attrs_.erase(name); }

  // --- the wrapper mark (see core/traversal/wrapper_marker.h): an interned wrapper class name,
  // null for a module that is not a wrapper. A field, not an attribute: every traversal asks.
  const std::string* wrapper_mark() const { return wrapper_mark_; }
  void set_wrapper_mark(const std::string* interned_name) { wrapper_mark_ = interned_name; }

  // --- printing, like PyTorch's repr: "Linear(in_features=5, out_features=5, bias=True)" and
  // containers with "(name): child" lines.
  std::string repr() const;
  virtual std::string extra_repr() const { return ""; }

 protected:
  bool training_ = true;

 private:
  void check_new_name(const std::string& name, const char* what) const;
  // Slot lookup by name: linear for the usual few slots; a hash index once a module has many
  // (a ModuleList of 100 000 layers must not make registration or lookup quadratic).
  enum class SlotKind : std::uint8_t { Child, Param, Buffer };
  const std::pair<SlotKind, std::size_t>* find_slot(const std::string& name) const;
  void index_slot(const std::string& name, SlotKind kind, std::size_t index);
  void rebuild_index();
  // What every whole-tree traversal reads comes first, to share the object's first cache lines.
  const ModuleClass* class_;
  const std::string* wrapper_mark_ = nullptr;
  std::vector<std::pair<std::string, ModulePtr>> children_;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::unique_ptr<std::unordered_map<std::string, std::pair<SlotKind, std::size_t>>> index_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::set<std::string> non_persistent_;
  std::vector<std::pair<std::shared_ptr<bool>, ForwardPreHook>> pre_hooks_;
  std::vector<std::pair<std::shared_ptr<bool>, ForwardHook>> hooks_;
  std::map<std::string, std::any> attrs_;
  std::vector<std::pair<std::string, Tensor>> tensor_attrs_;
};

// Defines static_class() for a module class with the given direct bases, e.g.
//   class Linear : public Module { public: FSDP_MODULE_CLASS(Linear, Module) ... };
#define FSDP_MODULE_CLASS(NAME, ...)                                            \
  static const ::fsdp::nn::ModuleClass& static_class() {                        \
    static const ::fsdp::nn::ModuleClass& cls =                                 \
        ::fsdp::nn::ModuleClass::get(#NAME, {FSDP_MODULE_BASES_(__VA_ARGS__)}); \
    return cls;                                                                 \
  }
#define FSDP_MODULE_BASES_(...) FSDP_MODULE_BASES_N_(__VA_ARGS__, 3, 2, 1)(__VA_ARGS__)
#define FSDP_MODULE_BASES_N_(a, b, c, N, ...) FSDP_MODULE_BASES_##N
#define FSDP_MODULE_BASES_1(A) &A::static_class()
#define FSDP_MODULE_BASES_2(A, B) &A::static_class(), &B::static_class()
#define FSDP_MODULE_BASES_3(A, B, C) &A::static_class(), &B::static_class(), &C::static_class()

// A module class known only by name (e.g. a Python base like "_BatchNorm"), for use as a base.
const ModuleClass& named_class(const std::string& name,
                               std::initializer_list<const ModuleClass*> bases);

}  // namespace fsdp::nn
