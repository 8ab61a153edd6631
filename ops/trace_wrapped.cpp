#include "ops/trace_wrapped.h"

#include <fmt/format.h>

#include "core/autograd.h"
#include "ops/graph/tracer.h"

namespace fsdp::ops {

namespace {

// Raises its message when backward reaches it (torch._C._functions.DelayedError).
class DelayedError final : public autograd::Node {
 public:
  explicit DelayedError(std::string message) : message_(std::move(message)) {}
  std::string name() const override { return "DelayedError"; }
  autograd::variable_list apply(autograd::variable_list&&) override {
    throw RuntimeError(message_);
  }

 private:
  std::string message_;
};

std::vector<nn::Value> positional(const HopArgs& a) {
  std::vector<nn::Value> out;
  for (const auto& o : a.args) out.push_back(o.value());
  return out;
}

const Function& fn_of(const HopArgs& a) {
  const Object* fn = a.kwarg("fn");
  FSDP_CHECK(fn != nullptr, TypeError, "trace_wrapped: missing required keyword argument 'fn'");
  return fn->function();
}

// Upstream's unwrap_proxies: tensors to their nodes, lists/tuples element-wise, None kept.
graph::Argument unwrap_proxies(graph::Tracer& tracer, const nn::Value& v) {
  if (v.is_tensor() || v.is_none()) return tracer.proxy(v);
  if (v.is_tuple()) {
    std::vector<graph::Argument> items;
    for (const auto& e : v.tuple()) items.push_back(unwrap_proxies(tracer, e));
    return graph::Argument::list(std::move(items));
  }
  throw AssertionError(fmt::format("unhandled type: {}", v.type_name()));
}

nn::Value inner_trace(const KernelContext& ctx, const HopArgs& a) {
  auto* tracer = dynamic_cast<graph::Tracer*>(ctx.mode.get());
  FSDP_CHECK(tracer != nullptr, TypeError, "trace_wrapped: the Tracing rule needs a Tracer");
  Function fn = fn_of(a);
  const HigherOrderOperator* op = &ctx.op;
  // self_invoke: the node calls the operator again, without grad, with the same fn.
  auto self_invoke = std::make_shared<const graph::FunctionTarget>(graph::FunctionTarget{
      "self_invoke",
      [op, fn](const std::vector<Object>& args, const Kwargs& kwargs) -> Object {
        autograd::NoGradGuard no_grad;
        HopArgs call{args, kwargs};
        call.kwargs.emplace_back("fn", Object(fn));
        return Object((*op)(std::move(call)));
      },
      op});
  std::vector<graph::Argument> args;
  for (const auto& o : a.args) args.push_back(unwrap_proxies(*tracer, o.value()));
  std::vector<std::pair<std::string, graph::Argument>> kwargs;
  if (const Object* bw = a.kwarg("bw_state"); bw && !bw->is_none()) {
    const auto* state = std::any_cast<std::shared_ptr<BackwardState>>(&bw->opaque());
    FSDP_CHECK(state && *state && (*state)->proxy.has_value(), AssertionError,
               "trace_wrapped: bw_state must be a BackwardState with a proxy");
    kwargs.emplace_back("bw_state", graph::Argument::node(*(*state)->proxy));
  }
  const std::int32_t node = tracer->graph().call_function(self_invoke, std::move(args),
                                                          std::move(kwargs), "trace_wrapped");
  // "module backward hooks" pass (None, grad); "other backward hooks" pass (grad, ...).
  FSDP_CHECK(!a.args.empty(), TypeError, "trace_wrapped: expected at least one argument");
  const nn::Value& grad_arg =
      a.args[0].is_none() && a.args.size() > 1 ? a.args[1].value() : a.args[0].value();
  nn::Value grad = nn::map_tensors(grad_arg, [](const Tensor& t) { return empty_like(t); });
  tracer->track(grad, node);
  return grad;
}

nn::Value dense(const KernelContext&, const HopArgs& a) {
  FSDP_CHECK(dispatch::current_mode() == nullptr, AssertionError,
             "Mode should never be enabled for CPU/CUDA key");
  nn::Args args(positional(a));
  for (const auto& [k, v] : a.kwargs)
    if (k != "fn" && k != "bw_state") args.kwargs.emplace(k, v.value());
  return fn_of(a)(args);
}

// autograd_not_implemented(op, deferred_error=True).
nn::Value autograd_not_implemented(const KernelContext& ctx, const HopArgs& a) {
  nn::Value out;
  {
    ExcludeKeyGuard below(DispatchKey::Autograd);
    out = ctx.op(a);
  }
  std::vector<Tensor> inputs = a.tensors();
  if (!autograd::any_requires_grad(inputs)) return out;
  const std::string message = fmt::format("Autograd not implemented for {}", ctx.op.name());
  return nn::map_tensors(out, [&](const Tensor& t) {
    if (!t.defined() || !t.is_floating_point()) return t;
    Tensor d = t.detach();
    autograd::set_history(inputs, {d}, std::make_shared<DelayedError>(message));
    return d;
  });
}

}  // namespace

const HigherOrderOperator& trace_wrapped_op() {
  static HigherOrderOperator* op = [] {
    auto* o = new HigherOrderOperator("trace_wrapped");
    o->register_kernel(DispatchKey::Dense, dense);
    o->register_kernel(DispatchKey::Autograd, autograd_not_implemented);
    o->register_kernel(DispatchKey::Tracing, inner_trace);
    o->register_kernel(DispatchKey::Fake, [](const KernelContext&, const HopArgs&) -> nn::Value {
      throw RuntimeError("This op should never be invoked here");
    });
    o->register_functionalize_impl([o](FunctionalizeContext& ctx, const HopArgs& a) {
      HopArgs unwrapped = ctx.unwrap_tensors(a);
      auto redispatch = ctx.redispatch_to_next();
      (void)redispatch;
      return ctx.wrap_tensors((*o)(unwrapped));
    });
    return o;
  }();
  return *op;
}

nn::Value trace_wrapped(const std::vector<nn::Value>& args, const Function& fn,
                        std::shared_ptr<BackwardState> bw_state) {
  autograd::NoGradGuard no_grad;
  HopArgs a;
  for (const auto& v : args) a.args.emplace_back(v);
  a.kwargs.emplace_back("fn", Object(fn));
  if (bw_state) a.kwargs.emplace_back("bw_state", Object::opaque(bw_state));
  return trace_wrapped_op()(std::move(a));
}

}  // namespace fsdp::ops
