#include "ops/wrap.h"

#include <fmt/format.h>

#include <atomic>
#include <mutex>

#include "core/autograd.h"
#include "core/warnings.h"
#include "ops/checkpoint.h"
#include "ops/graph/interpreter.h"
#include "ops/graph/tracer.h"
#include "ops/hop_tracing.h"
#include "ops/selective_checkpoint.h"

namespace fsdp::ops {

Function as_function(const Object& fn) {
  if (fn.is_function()) return fn.function();
  if (fn.is_module()) {
    nn::ModulePtr m = fn.module();
    FSDP_CHECK(m != nullptr, TypeError, "the body of a higher-order operator is None");
    return [m](const nn::Args& a) { return (*m)(a); };
  }
  throw TypeError(
      fmt::format("the body of a higher-order operator must be a function or a "
                  "module, got {}",
                  fn.type_name()));
}

namespace {

// Positional args after the first `skip` ones, as values; kwargs as values.
std::vector<nn::Value> values_from(const HopArgs& a, std::size_t skip) {
  std::vector<nn::Value> out;
  for (std::size_t i = skip; i < a.args.size(); ++i) out.push_back(a.args[i].value());
  return out;
}
nn::Args call_args(const HopArgs& a, std::size_t skip) {
  nn::Args args(values_from(a, skip));
  for (const auto& [k, v] : a.kwargs) args.kwargs.emplace(k, v.value());
  return args;
}

// Eagerly, a wrap-family call under a generic mode with no rule runs its body directly.
bool bypasses_dispatch() {
  auto* mode = dispatch::current_mode();
  DispatchKey k;
  return mode && !key_of_mode(mode->kind(), k) && !mode->supports_higher_order_operators();
}

// Fake and functionalization: run the body with the mode back in place, so it sees the body's ops.
Kernel transparent(Kernel dense) {
  return [dense = std::move(dense)](const KernelContext& ctx, const HopArgs& a) {
    dispatch::ModeGuard again(ctx.mode);
    return dense(ctx, a);
  };
}

void register_family(HigherOrderOperator& op, Kernel dense, Kernel tracing) {
  op.register_kernel(DispatchKey::Dense, dense);
  op.register_fallthrough(DispatchKey::Autograd);  // the body records its own autograd graph
  op.register_kernel(DispatchKey::Fake, transparent(dense));
  op.register_kernel(DispatchKey::Functionalize, transparent(dense));
  op.register_kernel(DispatchKey::Tracing, std::move(tracing));
}

HopArgs make_args(std::vector<Object> leading, const std::vector<nn::Value>& args, Kwargs kwargs) {
  HopArgs a;
  a.args = std::move(leading);
  for (const auto& v : args) a.args.emplace_back(v);
  a.kwargs = std::move(kwargs);
  return a;
}

std::atomic<std::int64_t> g_ac_graph_id{1};  // upstream's itertools.count(1)

}  // namespace

const HigherOrderOperator& wrap_op() {
  static HigherOrderOperator* op = [] {
    auto* o = new HigherOrderOperator("wrap");
    register_family(
        *o,
        [](const KernelContext&, const HopArgs& a) {
          return as_function(a.args.at(0))(call_args(a, 1));
        },
        [](const KernelContext& ctx, const HopArgs& a) {
          return record_hop_node(ctx, {}, as_function(a.args.at(0)), values_from(a, 1), a.kwargs);
        });
    return o;
  }();
  return *op;
}

nn::Value wrap(const Object& fn, const std::vector<nn::Value>& args, const Kwargs& kwargs) {
  const auto& op = wrap_op();
  HopArgs a = make_args({fn}, args, kwargs);
  if (bypasses_dispatch()) return op.call_kernel(DispatchKey::Dense, a);
  return op(std::move(a));
}

const HigherOrderOperator& wrap_with_set_grad_enabled_op() {
  static HigherOrderOperator* op = [] {
    auto* o = new HigherOrderOperator("wrap_with_set_grad_enabled");
    register_family(
        *o,
        [](const KernelContext&, const HopArgs& a) {
          autograd::GradModeGuard grad(a.args.at(0).value().to_bool());
          return as_function(a.args.at(1))(call_args(a, 2));
        },
        [](const KernelContext& ctx, const HopArgs& a) {
          const bool enabled = a.args.at(0).value().to_bool();
          Function body = as_function(a.args.at(1));
          return record_hop_node(
              ctx, {nn::Value(enabled)},
              [body, enabled](const nn::Args& args) {
                autograd::GradModeGuard grad(enabled);
                return body(args);
              },
              values_from(a, 2), a.kwargs);
        });
    return o;
  }();
  return *op;
}

nn::Value wrap_with_set_grad_enabled(bool enabled, const Object& fn,
                                     const std::vector<nn::Value>& args, const Kwargs& kwargs) {
  const auto& op = wrap_with_set_grad_enabled_op();
  HopArgs a = make_args({Object(enabled), fn}, args, kwargs);
  if (bypasses_dispatch()) return op.call_kernel(DispatchKey::Dense, a);
  return op(std::move(a));
}

namespace {
void set_kwarg(Kwargs& kwargs, const std::string& name, Object value) {
  for (auto& [k, v] : kwargs)
    if (k == name) {
      v = std::move(value);
      return;
    }
  kwargs.emplace_back(name, std::move(value));
}

Function interpreter_run(const Object& fn, const char* op) {
  FSDP_CHECK(fn.is_module() && std::dynamic_pointer_cast<graph::GraphModule>(fn.module()),
             TypeError, "{}: the function must be a GraphModule, got {}", op, fn.type_name());
  auto gm = std::static_pointer_cast<graph::GraphModule>(fn.module());
  return [gm](const nn::Args& a) {
    FSDP_CHECK(a.kwargs.empty(), TypeError,
               "Interpreter.run() got an unexpected keyword argument '{}'",
               a.kwargs.begin()->first);
    return graph::Interpreter(gm).run(a.positional);
  };
}
}  // namespace

const HigherOrderOperator& wrap_activation_checkpoint_op() {
  static HigherOrderOperator* op = [] {
    auto* o = new HigherOrderOperator("wrap_activation_checkpoint");
    register_family(
        *o,
        [](const KernelContext&, const HopArgs& a) {
          Kwargs kwargs = a.kwargs;
          set_kwarg(kwargs, "use_reentrant", Object(false));
          set_kwarg(kwargs, "preserve_rng_state", Object(false));
          graph::PreserveNodeMetaGuard preserve;
          return checkpoint(interpreter_run(a.args.at(0), "wrap_activation_checkpoint"),
                            values_from(a, 1), kwargs);
        },
        [](const KernelContext& ctx, const HopArgs& a) {
          return record_hop_node(ctx, {}, as_function(a.args.at(0)), values_from(a, 1), a.kwargs);
        });
    return o;
  }();
  return *op;
}

nn::Value wrap_activation_checkpoint(const Object& fn, const std::vector<nn::Value>& args,
                                     Kwargs kwargs) {
  const auto& op = wrap_activation_checkpoint_op();
  HopArgs a = make_args({fn}, args, std::move(kwargs));
  if (bypasses_dispatch()) return op.call_kernel(DispatchKey::Dense, a);
  return op(std::move(a));
}

std::pair<Kwargs, Kwargs> divide_kwargs(const Kwargs& kwargs) {
  static const char* keys[] = {"use_reentrant", "context_fn", "determinism_check",
                               "debug",         "early_stop", "preserve_rng_state"};
  Kwargs checkpoint_kwargs, gmod_kwargs;
  for (const auto& kv : kwargs) {
    bool is_checkpoint = false;
    for (const char* k : keys) is_checkpoint = is_checkpoint || kv.first == k;
    (is_checkpoint ? checkpoint_kwargs : gmod_kwargs).push_back(kv);
  }
  return {checkpoint_kwargs, gmod_kwargs};
}

graph::GraphModulePtr tag_nodes(const graph::GraphModulePtr& gm, bool is_sac) {
  const std::int64_t id = g_ac_graph_id.fetch_add(1);
  for (auto& n : gm->graph.nodes()) {
    if (n.op != graph::NodeOp::call_function && n.op != graph::NodeOp::call_method &&
        n.op != graph::NodeOp::call_module)
      continue;
    n.meta["ac_graph_id"] = id;
    // Under selective checkpointing the caching mode fills the tag in (when compiling).
    n.meta["recompute"] = is_sac ? std::any() : std::any(CheckpointPolicy::PREFER_RECOMPUTE);
  }
  return gm;
}

namespace {
std::once_flag g_sac_warning;

graph::GraphModulePtr graph_module_arg(const HopArgs& a) {
  auto gm = a.args.empty() || !a.args[0].is_module()
                ? nullptr
                : std::dynamic_pointer_cast<graph::GraphModule>(a.args[0].module());
  FSDP_CHECK(gm != nullptr, TypeError,
             "tag_activation_checkpoint: the first argument must be a GraphModule, got {}",
             a.args.empty() ? std::string("nothing") : a.args[0].type_name());
  return gm;
}

nn::Value tag_activation_checkpoint_impl(const HopArgs& a) {
  auto gm = graph_module_arg(a);
  std::vector<nn::Value> args = values_from(a, 1);
  auto ctx_fn = gm->meta.find(kCheckpointContextFnKey);
  if (ctx_fn != gm->meta.end()) {
    std::call_once(g_sac_warning, [] {
      warn(
          "\nDetected that context_fn is passed to torch.utils.checkpoint under torch.compile.\n"
          "Please make sure the checkpointed region does not contain in-place ops (e.g. "
          "torch.relu_).\n");
    });
    Kwargs kwargs = a.kwargs;
    set_kwarg(kwargs, "use_reentrant", Object(false));
    set_kwarg(kwargs, "preserve_rng_state", Object(false));
    set_kwarg(kwargs, "context_fn", Object::opaque(ctx_fn->second));
    tag_nodes(gm, /*is_sac=*/true);
    graph::PreserveNodeMetaGuard preserve;
    return checkpoint(interpreter_run(Object(nn::ModulePtr(gm)), "tag_activation_checkpoint"), args,
                      kwargs);
  }
  tag_nodes(gm, /*is_sac=*/false);
  graph::PreserveNodeMetaGuard preserve;
  return graph::Interpreter(gm).run(args);  // kwargs dropped, as upstream
}
}  // namespace

const HigherOrderOperator& tag_activation_checkpoint_op() {
  static HigherOrderOperator* op = [] {
    auto* o = new HigherOrderOperator("tag_activation_checkpoint");
    o->register_kernel(DispatchKey::Dense, [](const KernelContext&, const HopArgs& a) {
      return tag_activation_checkpoint_impl(a);
    });
    o->register_fallthrough(DispatchKey::Autograd);
    o->register_kernel(DispatchKey::Tracing, [](const KernelContext& ctx, const HopArgs& a) {
      // Upstream runs the operator for the example output (tagging gmod), then re-traces the
      // body and copies the context function to the new body (it indexes the meta directly, a
      // KeyError without one; here the copy is made only when there is one).
      auto gm = graph_module_arg(a);
      tag_nodes(gm, gm->meta.count(kCheckpointContextFnKey) > 0);
      auto node_body = [gm](const nn::Args& args) {
        return graph::Interpreter(gm).run(args.positional);
      };
      return record_hop_node(ctx, {}, node_body, values_from(a, 1), a.kwargs,
                             [gm](graph::GraphModule& body) {
                               auto it = gm->meta.find(kCheckpointContextFnKey);
                               if (it != gm->meta.end()) body.meta[it->first] = it->second;
                             });
    });
    return o;
  }();
  return *op;
}

nn::Value tag_activation_checkpoint(const graph::GraphModulePtr& gm,
                                    const std::vector<nn::Value>& args, Kwargs kwargs) {
  const auto& op = tag_activation_checkpoint_op();
  HopArgs a = make_args({Object(nn::ModulePtr(gm))}, args, std::move(kwargs));
  // Upstream dispatches only under pre-dispatch tracing; otherwise it calls the implementation.
  if (op.dispatch_key(a) == DispatchKey::Tracing) return op(std::move(a));
  return tag_activation_checkpoint_impl(a);
}

}  // namespace fsdp::ops
