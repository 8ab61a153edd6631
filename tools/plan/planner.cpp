#include "tools/plan/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <set>
#include <unordered_set>

#include "core/env.h"
#include "core/error.h"
#include "core/suggest.h"
#include "core/traversal/module_sets.h"
#include "core/traversal/pre_order.h"
#include "core/warnings.h"
#include "fsdp/flat_param_layout.h"
#include "fsdp/memory_bound.h"
#include "fsdp/sharding.h"
#include "policies/auto_wrap.h"
#include "policies/ignored.h"
#include "policies/policy_build.h"
#include "tools/plan/checked_math.h"
#include "tools/plan/model_file.h"

namespace fsdp::plan {

using traversal::ModuleSet;
using traversal::ParamSet;

namespace {

// FSDP's own rules throw fsdp::ValueError when a sum overflows; to fsdp-plan that is bad input.
template <typename F>
std::int64_t as_input_error(F fn) {
  try {
    return fn();
  } catch (const fsdp::ValueError& e) {
    throw InputError(e.what());
  }
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return a / b + (a % b != 0 ? 1 : 0);
}

struct Ignored {
  ModuleSet modules;  // closed under descendants, as FSDP's _get_ignored_modules
  ParamSet params;
  std::int64_t numel = 0;
};

// `--ignore` paths to FSDP's ignored modules (closed under descendants) and their parameters.
Ignored resolve_ignored(const nn::ModulePtr& root, const std::vector<std::string>& paths) {
  std::vector<nn::ModulePtr> roots;
  for (const auto& path : paths) {
    try {
      roots.push_back(root->get_submodule(path));
    } catch (const fsdp::Error&) {
      std::vector<std::string> names;
      for (auto& [n, mod] : root->named_modules())
        if (!n.empty()) names.push_back(n);
      throw InputError(fmt::format("--ignore '{}': the model has no module at that path{}", path,
                                   did_you_mean(path, names)));
    }
  }
  Ignored ig;
  if (roots.empty()) return ig;
  ig.modules = policies::close_ignored_modules(root, roots);
  ig.params = policies::ignored_params_of(root, ig.modules);
  for (auto& p : root->parameters())
    if (traversal::contains(ig.params, p)) add_to(ig.numel, p.numel(), "the ignored numel");
  return ig;
}

struct Recorded {
  nn::ModulePtr module;
  policies::WrapperOptions options;
};

policies::WrapperOptions root_options(const PlanOptions& o) {
  policies::WrapperOptions w;
  w.process_group = policies::Setting<std::shared_ptr<comm::ProcessGroup>>::none();
  w.sharding_strategy = o.sharding;
  w.cpu_offload = policies::Setting<policies::CPUOffload>::none();
  w.backward_prefetch = policies::BackwardPrefetch::BACKWARD_PRE;
  if (o.mixed_precision) {
    policies::MixedPrecision mp;
    mp.param_dtype = o.mp_dtype;
    mp.reduce_dtype = o.mp_dtype;
    w.mixed_precision = mp;
  } else {
    w.mixed_precision = policies::Setting<policies::MixedPrecision>::none();
  }
  w.device_id = policies::Setting<Device>::none();
  w.sync_module_states = false;
  w.forward_prefetch = false;
  w.limit_all_gathers = true;
  w.use_orig_params = o.use_orig_params;
  return w;
}

// Every class name the model's modules are instances of (types and their bases).
std::vector<std::string> model_class_names(const std::vector<const nn::Module*>& modules) {
  std::set<const nn::ModuleClass*> classes;
  for (const auto& m : modules) classes.insert(&m->module_class());
  std::set<std::string> names;
  for (const auto* c : classes) names.insert(c->mro().begin(), c->mro().end());
  return {names.begin(), names.end()};
}

class Planner {
 public:
  Planner(const nn::ModulePtr& root, const PlanOptions& o) : root_(root), o_(o) {
    plan_.options = o;
    plan_.root = root;
  }

  Plan run() {
    // Pre-order (named_modules' order), remembering the slot each module is first reached
    // through: the first nodes of the plan's name table. Paths are spelled out on demand.
    std::vector<const nn::Module*> modules;
    auto& paths = plan_.paths;
    std::size_t slots = 1;  // the root's
    {
      traversal::PreOrderModules order(root_);
      modules.reserve(order.size());
      paths.reserve(order.size());
      for (std::size_t i = 0; i < order.size(); ++i) {
        const nn::Module* m = order.module(i).get();
        modules.push_back(m);
        paths.push_back({order.parent(i), order.segment(i)});
        for (const auto& [name, child] : m->child_slots()) slots += child ? 1 : 0;
      }
      plan_.module_index = order.take_index();
    }
    plan_.num_modules = modules.size();
    any_shared_module_ = slots != modules.size();
    {
      // Tied parameters: a sort finds repeats faster than a hash set of millions of entries.
      std::vector<const TensorImpl*> all;
      for (const auto& m : modules)
        for (const auto& [name, p] : m->parameter_slots())
          if (p.defined()) all.push_back(p.impl());
      std::sort(all.begin(), all.end());
      for (std::size_t i = 0; i < all.size(); ++i) {
        if (i > 0 && all[i] == all[i - 1]) {
          shared_params_.insert(all[i]);
          continue;
        }
        const TensorImpl* t = all[i];
        const std::int64_t n = t->numel();
        add_to(plan_.model_numel, n, "the model's numel");
        add_to(plan_.model_param_bytes,
               checked_mul(n, static_cast<std::int64_t>(dtype_size(t->dtype)),
                           "the model's parameter bytes"),
               "the model's parameter bytes");
      }
    }
    {
      WarningCapture capture;  // e.g. ignoring the root itself
      ignored_ = resolve_ignored(root_, o_.ignore);
      for (const auto& w : capture.warnings()) plan_.warnings.push_back(w.message);
    }
    plan_.ignored_modules = o_.ignore;
    plan_.ignored_numel = ignored_.numel;
    lap("index modules");
    choose_strategy();
    check_policy_classes(modules);
    lap("policy classes");
    wrap();
    lap("auto-wrap engine");
    find_parents();
    list_params();
    lap("unit parameters");
    for (auto& u : plan_.units) cost(u);
    totals();
    lap("costs");
    if (root_->isinstance("ModuleList") || root_->isinstance("ModuleDict"))
      plan_.warnings.push_back(fmt::format(
          "FSDP will not all-gather parameters for containers that do not implement forward: "
          "{} (the root unit); wrap a module that has a forward instead",
          root_->type_name()));
    return std::move(plan_);
  }

 private:
  void choose_strategy() {
    plan_.sharding = o_.sharding;
    if (o_.world_size == 1 && o_.sharding != ShardingStrategy::NO_SHARD) {
      plan_.warnings.push_back(fmt::format(
          "FSDP is switching to use `NO_SHARD` instead of {} since the world size is 1.",
          policies::to_string(o_.sharding)));
      plan_.sharding = ShardingStrategy::NO_SHARD;
    }
    plan_.shard_group_size = o_.world_size;
    if (policies::is_hybrid(plan_.sharding)) {
      if (o_.world_size > o_.node_size && o_.world_size % o_.node_size != 0)
        throw InputError(
            fmt::format("--sharding HYBRID_SHARD: world size {} is not a multiple of "
                        "the {} ranks per node it shards over",
                        o_.world_size, o_.node_size));
      plan_.shard_group_size = std::min(o_.world_size, o_.node_size);
    }
  }

  // A class name in the policy that no module is an instance of wraps nothing, silently in
  // PyTorch: say so, with the model's close names.
  void check_policy_classes(const std::vector<const nn::Module*>& modules) {
    if (!o_.policy) return;
    auto refs = o_.policy->class_refs();
    if (refs.empty()) return;
    auto names = model_class_names(modules);
    std::unordered_set<std::string> known(names.begin(), names.end());
    std::set<std::string> reported;
    for (const auto& r : refs) {
      if (known.count(r.name) || !reported.insert(r.name).second) continue;
      plan_.warnings.push_back(
          fmt::format("policy class '{}' (--policy column {}) matches no module of the model{}",
                      r.name, r.column, did_you_mean(r.name, names)));
    }
  }

  void wrap() {
    plan_.unit_at.assign(plan_.num_modules, -1);
    auto opts = root_options(o_);
    std::vector<Recorded> recorded;
    if (o_.policy) {
      auto policy = policies::build_policy(*o_.policy);
      WarningCapture capture;
      policies::auto_wrap(root_, policy, ignored_.modules, ignored_.params, opts,
                          [&](nn::ModulePtr m, const policies::WrapperOptions& w) {
                            recorded.push_back({m, w});
                            return m;  // identity: the tree keeps its shape, the call is the record
                          });
      for (const auto& w : capture.warnings()) plan_.warnings.push_back(w.message);
    }
    recorded.push_back({root_, opts});
    for (auto& r : recorded) {
      Unit u;
      u.index = plan_.units.size();
      u.module = r.module.get();
      u.path = static_cast<std::size_t>(index_of(u.module));
      u.type = r.module->type_name();
      auto s = r.options.sharding_strategy.value_or(o_.sharding);
      u.sharding = plan_.sharding == ShardingStrategy::NO_SHARD ? plan_.sharding : s;
      u.mixed_precision = r.options.mixed_precision.has_value();
      if (plan_.unit_at[u.path] < 0) plan_.unit_at[u.path] = static_cast<std::int32_t>(u.index);
      plan_.units.push_back(std::move(u));
      modules_.push_back(r.module);
    }
  }

  // FSDP flattens, per unit in construction order, the parameters of the unit's subtree that
  // are not ignored and not flattened by an earlier unit, in module.parameters() order.
  void list_params() {
    std::unordered_map<const TensorImpl*, std::size_t> manager;  // param -> unit index
    std::unordered_map<const TensorImpl*, std::size_t> manager_path;
    // Per-unit "seen" marks as stamps (unit index + 1) per pre-order index, so that a model with
    // a million units allocates no set per unit.
    std::vector<std::uint32_t> module_stamp(plan_.num_modules, 0);
    std::unordered_map<const TensorImpl*, std::uint32_t> param_stamp;
    std::vector<char> earlier_unit(plan_.num_modules, 0);
    auto& paths = plan_.paths;
    struct Item {
      std::int64_t node;   // the path the unit's traversal reached the module by
      std::int64_t index;  // the module's pre-order index
      const nn::Module* module;
    };
    std::vector<Item> stack;
    for (auto& u : plan_.units) {
      const auto stamp = static_cast<std::uint32_t>(u.index + 1);
      const auto unit_index = static_cast<std::int64_t>(u.path);
      stack.assign(1, {unit_index, unit_index, u.module});
      while (!stack.empty()) {
        const auto [prefix, mi, m] = stack.back();
        stack.pop_back();
        auto& ms = module_stamp[static_cast<std::size_t>(mi)];
        if (ms == stamp) continue;
        ms = stamp;
        if (mi != unit_index && earlier_unit[static_cast<std::size_t>(mi)]) continue;
        if (traversal::contains(ignored_.modules, m)) continue;
        for (const auto& [name, p] : m->parameter_slots()) {
          if (!p.defined()) continue;
          // Without shared modules, only a tied parameter can be reached twice: the others
          // need no bookkeeping (this keeps a million-module plan fast).
          const bool reachable_twice =
              any_shared_module_ || (!shared_params_.empty() && shared_params_.count(p.impl()));
          if (reachable_twice) {
            auto& ps = param_stamp[p.impl()];
            if (ps == stamp) continue;
            ps = stamp;
          }
          if (traversal::contains(ignored_.params, p)) continue;
          const std::size_t path = paths.size();
          paths.push_back({prefix, &name});
          if (reachable_twice) {
            auto mit = manager.find(p.impl());
            if (mit != manager.end()) {
              check_shared(mit->second, manager_path[p.impl()], u, path);
              continue;
            }
            manager.emplace(p.impl(), u.index);
            manager_path.emplace(p.impl(), path);
          }
          PlannedParam pp{path, p.impl(), p.dtype(), p.requires_grad(), p.numel()};
          in_unit(u, [&] {
            add_to(u.numel, pp.numel, "the numel");
            if (pp.requires_grad) add_to(u.trainable_numel, pp.numel, "the numel");
            add_to(u.bytes_per_dtype[pp.dtype],
                   checked_mul(pp.numel, static_cast<std::int64_t>(dtype_size(pp.dtype)),
                               "the parameter bytes"),
                   "the parameter bytes");
          });
          u.params.push_back(std::move(pp));
        }
        const auto& slots = m->child_slots();
        for (auto it = slots.rbegin(); it != slots.rend(); ++it) {
          if (!it->second) continue;
          const std::int64_t ci = index_of(it->second.get());
          // Reached along its pre-order path: that path's node; by another slot: a new node.
          const PathNode& first = paths[static_cast<std::size_t>(ci)];
          std::int64_t node = ci;
          if (prefix != mi || first.parent != mi || first.name != &it->first) {
            node = static_cast<std::int64_t>(paths.size());
            paths.push_back({prefix, &it->first});
          }
          stack.push_back({node, ci, it->second.get()});
        }
      }
      earlier_unit[u.path] = 1;
      check_uniform(u);
    }
  }

  // Whether `inner` is in the subtree of `outer` (cached per outer unit; needed only for shared
  // parameters, which are rare).
  bool contains_module(std::size_t outer, const nn::Module* inner) {
    auto it = subtree_.find(outer);
    if (it == subtree_.end()) {
      std::unordered_set<const nn::Module*> s;
      for (auto& m : modules_[outer]->modules()) s.insert(m.get());
      it = subtree_.emplace(outer, std::move(s)).first;
    }
    return it->second.count(inner) > 0;
  }

  void check_shared(std::size_t first_unit, std::size_t first_path, const Unit& u,
                    std::size_t path) {
    if (first_unit == u.index) return;
    const std::string fqn = plan_.param_fqn({path}), first_fqn = plan_.param_fqn({first_path});
    const Unit& f = plan_.units[first_unit];
    const std::string f_fqn = plan_.unit_fqn(f), u_fqn = plan_.unit_fqn(u);
    if (contains_module(u.index, f.module) || contains_module(f.index, u.module)) return;
    plan_.warnings.push_back(fmt::format(
        "parameter '{}' is shared with '{}', which lies in unit '{}' ({}), while unit '{}' ({}) "
        "also uses it and neither unit contains the other: unit '{}' manages it (it was "
        "constructed first), and FSDP then fails at run time when unit '{}' uses it; wrap both "
        "users in one unit (e.g. a common ancestor) or untie the weights",
        fqn, first_fqn, f_fqn, f.type, u_fqn, u.type, f_fqn, u_fqn));
  }

  // FlatParamHandle's checks for what is flattened together.
  void check_uniform(const Unit& u) {
    if (u.bytes_per_dtype.size() > 1) {
      std::string dts;
      for (auto& [d, b] : u.bytes_per_dtype)
        dts += (dts.empty() ? "" : ", ") + std::string(dtype_name(d));
      plan_.warnings.push_back(fmt::format(
          "unit '{}' ({}) would flatten parameters of different dtypes ({}): FSDP requires a "
          "uniform dtype per unit (\"Must flatten tensors with uniform dtype\"); the plan sizes "
          "one flat parameter per dtype",
          plan_.unit_fqn(u), u.type, dts));
    }
    if (!o_.use_orig_params && u.trainable_numel > 0 && u.trainable_numel < u.numel)
      throw ValueError(fmt::format(
          "unit '{}' ({}) would flatten parameters with requires_grad=True and False: Must "
          "flatten tensors with uniform `requires_grad` when `use_orig_params=False`",
          plan_.unit_fqn(u), u.type));
  }

  std::int64_t index_of(const nn::Module* m) const { return plan_.module_index.find(m); }

  // The nearest enclosing unit: up the path through which each unit was first reached; one pass
  // over the modules in pre-order (a parent comes before its children), whatever the depth.
  void find_parents() {
    const auto& paths = plan_.paths;
    const std::size_t n = plan_.num_modules;
    // A module wrapped twice (shared, reached through two slots): its later unit encloses.
    std::vector<std::int64_t> unit_at(n, -1), enclosing(n, -1);
    for (const auto& u : plan_.units) unit_at[u.path] = static_cast<std::int64_t>(u.index);
    for (std::size_t i = 1; i < n; ++i) {
      const auto p = static_cast<std::size_t>(paths[i].parent);
      enclosing[i] = unit_at[p] >= 0 ? unit_at[p] : enclosing[p];
    }
    for (auto& u : plan_.units) u.parent = static_cast<int>(enclosing[u.path]);
  }

  void cost(Unit& u) {
    in_unit(u, [&] { cost_of(u); });
  }

  void cost_of(Unit& u) {
    const bool sharded = is_sharded(u.sharding);
    const std::int64_t group = plan_.shard_group_size;
    std::map<DType, std::vector<std::int64_t>> by_dtype;
    for (const auto& p : u.params) by_dtype[p.dtype].push_back(p.numel);
    for (auto& [dt, numels] : by_dtype) {
      const auto size = static_cast<std::int64_t>(dtype_size(dt));
      const std::int64_t csize = u.mixed_precision && is_floating(dt)
                                     ? static_cast<std::int64_t>(dtype_size(o_.mp_dtype))
                                     : size;
      // The runtime's own layout function: what the plan predicts is what a rank allocates.
      FlatParamLayout layout;
      try {
        // Aligned for the dtype forward and backward use (the runtime's compute dtype).
        layout = flat_param_layout(numels, static_cast<std::size_t>(csize), o_.use_orig_params,
                                   static_cast<int>(group), sharded);
      } catch (const fsdp::Error& e) {
        throw InputError(e.what());
      }
      const std::int64_t flat = layout.unpadded_numel;
      const std::int64_t shard = layout.shard_numel;
      const std::int64_t padded = layout.padded_numel;
      const char* numel_what = "the flat parameter numel";
      const char* bytes_what = "the bytes";
      auto bytes = [&](std::int64_t n, std::int64_t s) { return checked_mul(n, s, bytes_what); };
      add_to(u.flat_numel, flat, numel_what);
      add_to(u.shard_numel, shard, numel_what);
      add_to(u.padded_numel, padded, numel_what);
      add_to(u.per_rank.params, bytes(shard, size), bytes_what);
      if (u.trainable_numel > 0) add_to(u.per_rank.grads, bytes(shard, size), bytes_what);
      if (sharded) {
        add_to(u.unsharded_bytes, bytes(padded, csize), bytes_what);
        if (u.trainable_numel > 0) add_to(u.unsharded_grad_bytes, bytes(padded, csize), bytes_what);
      } else if (u.mixed_precision && csize != size) {
        // the low-precision copy used for compute
        add_to(u.unsharded_bytes, bytes(flat, csize), bytes_what);
      }
      if (u.trainable_numel > 0) {
        // The runtime's own rule for what each collective moves (fsdp/sharding.h).
        const CollectiveElements moved = unit_collective_elements(
            sharded, policies::is_hybrid(u.sharding) && o_.world_size > group, flat, padded, shard);
        add_to(u.reduce_scatter_bytes, bytes(moved.reduce_scatter, csize), bytes_what);
        add_to(u.all_reduce_bytes, bytes(moved.all_reduce, csize), bytes_what);
      }
    }
    u.padding = u.padded_numel - u.numel;
    if (u.trainable_numel > 0) {
      // Adam keeps exp_avg and exp_avg_sq in float32 for every element it updates: the whole
      // flat shard (padding included) with flat parameters, only the trainable originals with
      // use_orig_params.
      const std::int64_t elems =
          u.trainable_numel == u.numel
              ? u.shard_numel
              : (sharded ? ceil_div(u.trainable_numel, group) : u.trainable_numel);
      u.per_rank.optimizer = checked_mul(elems, 2 * 4, "the optimizer bytes");
    }
    if (sharded) {
      const bool is_root = u.parent < 0;
      u.all_gathers_per_step = frees_after_forward(u.sharding, is_root) ? 2 : 1;
      u.all_gather_bytes =
          checked_mul(u.all_gathers_per_step, u.unsharded_bytes, "the all-gather bytes");
    }
  }

  void totals() {
    Totals& t = plan_.totals;
    std::vector<UnshardedUnit> unsharded;
    for (const auto& u : plan_.units) {
      const char* what = "the per-rank totals";
      add_to(t.per_rank.params, u.per_rank.params, what);
      add_to(t.per_rank.grads, u.per_rank.grads, what);
      add_to(t.per_rank.optimizer, u.per_rank.optimizer, what);
      add_to(t.all_gather_bytes, u.all_gather_bytes, what);
      add_to(t.reduce_scatter_bytes, u.reduce_scatter_bytes, what);
      add_to(t.all_reduce_bytes, u.all_reduce_bytes, what);
      t.peak_unsharded_grad_bytes = std::max(t.peak_unsharded_grad_bytes, u.unsharded_grad_bytes);
      unsharded.push_back({u.unsharded_bytes, u.sharding, /*is_root=*/u.parent < 0});
    }
    t.peak_unsharded_param_bytes = as_input_error([&] { return peak_unsharded_bytes(unsharded); });
    const char* peak = "the peak bytes per rank";
    t.peak_bytes = checked_add(t.per_rank.params, t.per_rank.grads, peak);
    add_to(t.peak_bytes, t.per_rank.optimizer, peak);
    add_to(t.peak_bytes, t.peak_unsharded_param_bytes, peak);
    add_to(t.peak_bytes, t.peak_unsharded_grad_bytes, peak);
  }

  // Runs `fn`; an input error it throws (an overflow) is said to be in unit `u`.
  template <typename F>
  void in_unit(const Unit& u, F fn) const {
    try {
      fn();
    } catch (const InputError& e) {
      throw InputError(fmt::format("unit '{}' ({}): {}", plan_.unit_fqn(u), u.type, e.what()));
    }
  }

  // FSDP_PLAN_TIMING=1: CPU time of each phase on stderr.
  void lap(const char* what) {
    if (!timing_) return;
    std::clock_t now = std::clock();
    fmt::print(stderr, "fsdp-plan:   {}: {:.3f} s cpu\n", what,
               static_cast<double>(now - clock_) / CLOCKS_PER_SEC);
    clock_ = now;
  }
  bool timing_ = fsdp::env::enabled("FSDP_PLAN_TIMING");
  std::clock_t clock_ = std::clock();

  nn::ModulePtr root_;
  PlanOptions o_;
  Plan plan_;
  Ignored ignored_;
  std::vector<nn::ModulePtr> modules_;                   // per unit
  std::unordered_set<const TensorImpl*> shared_params_;  // in more than one slot (tied)
  bool any_shared_module_ = false;                       // some module occupies more than one slot
  std::unordered_map<std::size_t, std::unordered_set<const nn::Module*>> subtree_;
};

}  // namespace

std::string Plan::path_str(std::size_t node, std::size_t max_chars, bool* cut) const {
  std::vector<const std::string*> parts;
  std::size_t chars = 0;
  if (cut) *cut = false;
  for (auto n = static_cast<std::int64_t>(node); n >= 0;
       n = paths[static_cast<std::size_t>(n)].parent) {
    const std::string* name = paths[static_cast<std::size_t>(n)].name;
    if (!name) continue;  // the root
    chars += name->size() + (parts.empty() ? 0 : 1);
    parts.push_back(name);
    if (chars > max_chars && paths[static_cast<std::size_t>(n)].parent >= 0) {
      if (cut) *cut = true;
      break;
    }
  }
  std::string out;
  out.reserve(chars);
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    if (!out.empty()) out += '.';
    out += **it;
  }
  if (out.size() > max_chars) {
    if (cut) *cut = true;
    out.erase(0, out.size() - max_chars);
  }
  return out;
}

Plan make_plan(const nn::ModulePtr& root, const PlanOptions& options) {
  if (options.world_size < 1 || options.world_size > kMaxWorldSize)
    throw InputError(fmt::format("--world-size must be between 1 and {}, got {}", kMaxWorldSize,
                                 options.world_size));
  if (options.node_size < 1 || options.node_size > kMaxWorldSize)
    throw InputError(fmt::format("--node-size must be between 1 and {}, got {}", kMaxWorldSize,
                                 options.node_size));
  if ((options.batch > 0) != (options.seq > 0) || options.batch < 0 || options.seq < 0)
    throw InputError(
        fmt::format("--batch and --seq go together and must be positive (got --batch {} --seq {})",
                    options.batch, options.seq));
  Plan p = Planner(root, options).run();
  p.policy_str = options.policy ? options.policy->str() : "none";
  if (options.batch > 0) {
    const std::int64_t elem = options.mixed_precision ? dtype_size(options.mp_dtype) : 4;
    p.activations = estimate_activations(*root, options.batch, options.seq, elem);
    Totals& t = p.totals;
    const char* what = "the peak bytes with activations";
    t.activation_bytes = p.activations->bytes;
    // Gradients are not held then: zero_grad(set_to_none=True) freed them.
    const std::int64_t shards = checked_add(t.per_rank.params, t.per_rank.optimizer, what);
    const std::int64_t held = as_input_error([&] {
      return memory_bound_bytes(shards, t.peak_unsharded_param_bytes, t.activation_bytes);
    });
    t.peak_with_activations_bytes = std::max(held, t.peak_bytes);
  }
  return p;
}

}  // namespace fsdp::plan
