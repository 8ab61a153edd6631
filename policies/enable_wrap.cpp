#include "policies/enable_wrap.h"

#include "core/error.h"

namespace fsdp::policies {

namespace {
struct AutoWrapConfig {
  bool in_context = false;
  WrapperFn wrapper_cls;
  WrapperOptions kwargs;
};
// Per thread: a rank running as a thread has its own scope.
thread_local AutoWrapConfig t_config;
}  // namespace

EnableWrap::EnableWrap(WrapperFn wrapper_cls, WrapperOptions wrapper_kwargs) {
  if (t_config.in_context)
    throw NotImplementedError(
        "You are already within an autowrap context and we currently do not supported nested "
        "autowrap.");
  // Checked before anything is set (upstream sets its flag first and can be left stuck).
  if (!wrapper_cls)
    throw AssertionError("Expected to pass in wrapper_cls arg into _ConfigAutoWrap.");
  t_config.in_context = true;
  t_config.wrapper_cls = std::move(wrapper_cls);
  t_config.kwargs = std::move(wrapper_kwargs);
}

EnableWrap::~EnableWrap() {
  t_config = AutoWrapConfig{};
}

bool in_autowrap_context() {
  return t_config.in_context;
}

nn::ModulePtr wrap(const nn::ModulePtr& module, const WrapperOptions& wrap_overrides) {
  if (!t_config.in_context) return module;  // no-op outside enable_wrap
  if (!t_config.wrapper_cls) throw AssertionError("Expected _ConfigAutoWrap.wrapper_cls to be set");
  // Copy the scope's state first: the wrapper's constructor may run arbitrary code.
  WrapperFn wrapper_cls = t_config.wrapper_cls;
  WrapperOptions options = t_config.kwargs.merged(wrap_overrides);  // call-site kwargs win
  return wrap_module(module, wrapper_cls, options);
}

}  // namespace fsdp::policies
