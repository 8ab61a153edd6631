// transformer_auto_wrap_policy: always recurse; wrap instances of the given layer classes
// (isinstance, base classes included). Shared parameters (tied embeddings) then stay in the
// enclosing unit, which is why upstream recommends it for transformers.
#pragma once

#include "policies/options.h"

namespace fsdp::policies {

// functools.partial(transformer_auto_wrap_policy, transformer_layer_cls=...).
CallablePolicy transformer_auto_wrap_policy(nn::ClassSet transformer_layer_cls);

// `_module_wrap_policy`: if recurse, true; else isinstance(module, module_classes).
bool module_wrap_decision(const nn::Module& module, bool recurse,
                          const nn::ClassSet& module_classes);

}  // namespace fsdp::policies
