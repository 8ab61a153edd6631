// Deep copies of modules (Python's copy.deepcopy), as TransformerEncoder/Decoder need for the
// copies of their layer. A layer knows how to rebuild itself from its constructor options;
// deep_copy() then gives the rebuilt tree copies of the original's parameters and buffers.
#pragma once

#include <memory>

#include "core/module.h"

namespace fsdp::nn {

class Cloneable {
 public:
  virtual ~Cloneable() = default;
  // A module of the same class and structure, built from the stored constructor options with
  // its tensors on the meta device (cheap: no memory, no initialisation).
  virtual ModulePtr clone_structure() const = 0;
};

// An independent copy of `m`: same classes, structure, training flags and tensor values (tied
// tensors stay tied within the copy). TypeError when some module in the tree is not Cloneable.
ModulePtr deep_copy(Module& m);
template <typename M>
std::shared_ptr<M> deep_copy(M& m) {
  return std::dynamic_pointer_cast<M>(deep_copy(static_cast<Module&>(m)));
}

// clone_structure() of a module that must be Cloneable (TypeError naming its class otherwise).
ModulePtr clone_structure_of(const Module& m);

}  // namespace fsdp::nn
