// torch.nn batch normalisation: _NormBase -> _BatchNorm -> BatchNorm1d/2d/3d and SyncBatchNorm,
// with PyTorch's class names (policies match "_BatchNorm" with isinstance semantics).
#pragma once

#include <optional>

#include "core/module.h"
#include "core/nn/cloneable.h"

namespace fsdp::nn {

// The constructor arguments common to all batch norms (torch's keyword defaults).
struct BatchNormOptions {
  double eps = 1e-5;
  std::optional<double> momentum = 0.1;  // nullopt: cumulative moving average
  bool affine = true;
  bool track_running_stats = true;
  TensorOptions tensor = {};
};

// Python's _NormBase: parameters weight (ones) and bias (zeros) when affine, buffers
// running_mean (zeros), running_var (ones) and num_batches_tracked (int64 0) when tracking.
class NormBase : public Module {
 public:
  static const ModuleClass& static_class() {
    static const ModuleClass& cls = ModuleClass::get("_NormBase", {&Module::static_class()});
    return cls;
  }
  void reset_running_stats();
  void reset_parameters() override;
  std::string extra_repr() const override;

  const std::int64_t num_features;
  const double eps;
  const std::optional<double> momentum;
  const bool affine;
  const bool track_running_stats;

 protected:
  NormBase(const ModuleClass& cls, std::int64_t num_features, const BatchNormOptions& o);
  BatchNormOptions options_;
};

// Python's _BatchNorm: the forward shared by all batch norms.
class BatchNormBase : public NormBase {
 public:
  static const ModuleClass& static_class() {
    static const ModuleClass& cls = ModuleClass::get("_BatchNorm", {&NormBase::static_class()});
    return cls;
  }
  Value forward(const Args& args) override { return forward(args.tensor(0)); }
  Tensor forward(const Tensor& input);

 protected:
  using NormBase::NormBase;
  // Throws ValueError with torch's message when the input rank is wrong for this class.
  virtual void check_input_dim(const Tensor& input) const = 0;
};

#define FSDP_BATCH_NORM_CLASS_(NAME)                                                         \
  class NAME : public BatchNormBase, public Cloneable {                                      \
   public:                                                                                   \
    FSDP_MODULE_CLASS(NAME, BatchNormBase)                                                   \
    NAME(std::int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1, \
         bool affine = true, bool track_running_stats = true, TensorOptions options = {})    \
        : NAME(num_features,                                                                 \
               BatchNormOptions{eps, momentum, affine, track_running_stats, options}) {}     \
    NAME(std::int64_t num_features, const BatchNormOptions& o)                               \
        : BatchNormBase(static_class(), num_features, o) {}                                  \
    ModulePtr clone_structure() const override;                                              \
                                                                                             \
   protected:                                                                                \
    void check_input_dim(const Tensor& input) const override;                                \
  };

FSDP_BATCH_NORM_CLASS_(BatchNorm1d)  // input (N, C) or (N, C, L)
FSDP_BATCH_NORM_CLASS_(BatchNorm2d)  // input (N, C, H, W)
FSDP_BATCH_NORM_CLASS_(BatchNorm3d)  // input (N, C, D, H, W)
// Synchronises batch statistics across a process group in PyTorch. Here it has no process group
// yet (a later issue adds one): it behaves exactly as BatchNorm in a single process, which is
// also what PyTorch does when the group has one rank. Input: at least 2-D.
FSDP_BATCH_NORM_CLASS_(SyncBatchNorm)
#undef FSDP_BATCH_NORM_CLASS_

}  // namespace fsdp::nn
