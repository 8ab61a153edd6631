// enable_wrap / wrap: manual wrapping with a scoped configuration. Inside an EnableWrap scope,
// wrap(module, overrides) wraps `module` with the scope's wrapper and options merged with the
// call-site overrides (which win) and the module's own `_wrap_overrides` (which win over both);
// outside any scope, wrap returns the module unchanged.
//
// Upstream keeps this configuration in class attributes (process-global); here it is per thread,
// because ranks may run as threads of one process. Nesting scopes is an error (upstream's
// NotImplementedError); a failed EnableWrap leaves the thread's state unchanged, and the scope is
// released by the destructor, also when an exception leaves it.
#pragma once

#include "policies/options.h"
#include "policies/wrapper_fn.h"

namespace fsdp::policies {

class EnableWrap {
 public:
  EnableWrap(WrapperFn wrapper_cls, WrapperOptions wrapper_kwargs = {});
  ~EnableWrap();
  EnableWrap(const EnableWrap&) = delete;
  EnableWrap& operator=(const EnableWrap&) = delete;
};

// True inside an EnableWrap scope on this thread.
bool in_autowrap_context();

nn::ModulePtr wrap(const nn::ModulePtr& module, const WrapperOptions& wrap_overrides = {});

}  // namespace fsdp::policies
