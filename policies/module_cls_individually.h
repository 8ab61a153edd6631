// `_wrap_module_cls_individually`: always recurse; wrap every instance of the given classes,
// even inside another wrapped unit (mixed precision uses it to wrap BatchNorms separately).
#pragma once

#include "policies/options.h"

namespace fsdp::policies {

// functools.partial(_wrap_module_cls_individually, module_classes=...).
CallablePolicy wrap_module_cls_individually(nn::ClassSet module_classes);

}  // namespace fsdp::policies
