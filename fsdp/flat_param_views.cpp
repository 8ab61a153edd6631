#include "fsdp/flat_param_views.h"

#include <cstring>

#include "core/autograd.h"
#include "core/error.h"
#include "core/memory_stats.h"

namespace fsdp {

namespace {

class FlatParamViewsBackward final : public autograd::Node {
 public:
  FlatParamViewsBackward(std::int64_t flat_numel, DType dtype, Device device,
                         std::vector<Shape> shapes, std::vector<std::int64_t> offsets)
      : flat_numel_(flat_numel),
        dtype_(dtype),
        device_(device),
        shapes_(std::move(shapes)),
        offsets_(std::move(offsets)) {
    set_num_outputs(static_cast<std::uint32_t>(shapes_.size()));
  }
  std::string name() const override { return "FlatParamViewsBackward"; }

  autograd::variable_list apply(autograd::variable_list&& grads) override {
    MemoryCategoryScope category(MemoryCategory::Gradients);
    Tensor flat_grad = zeros({flat_numel_}, TensorOptions(dtype_, device_));
    for (std::size_t i = 0; i < grads.size() && i < shapes_.size(); ++i) {
      if (!grads[i].defined()) continue;
      FSDP_CHECK(grads[i].shape() == shapes_[i], RuntimeError,
                 "FlatParamViewsBackward: gradient {} has shape {}, expected {}", i,
                 shape_str(grads[i].shape()), shape_str(shapes_[i]));
      Tensor part = make_view(flat_grad, shapes_[i], contiguous_strides(shapes_[i]), offsets_[i]);
      copy_unversioned(part, grads[i]);
    }
    return {flat_grad};
  }

 private:
  std::int64_t flat_numel_;
  DType dtype_;
  Device device_;  // the flat parameter's: its gradient is made there
  std::vector<Shape> shapes_;
  std::vector<std::int64_t> offsets_;
};

}  // namespace

std::vector<Tensor> flat_param_views(const Tensor& flat, const std::vector<Shape>& shapes,
                                     const std::vector<std::int64_t>& offsets) {
  FSDP_CHECK(flat.dim() == 1 && flat.is_contiguous(), RuntimeError,
             "flat_param_views: the flat parameter must be 1-D and contiguous, got shape {}",
             shape_str(flat.shape()));
  FSDP_CHECK(shapes.size() == offsets.size(), RuntimeError,
             "flat_param_views: {} shapes but {} offsets", shapes.size(), offsets.size());
  std::vector<Tensor> views;
  views.reserve(shapes.size());
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const std::int64_t n = shape_numel(shapes[i]);
    FSDP_CHECK(offsets[i] >= 0 && offsets[i] + n <= flat.numel(), RuntimeError,
               "flat_param_views: view {} [{}, {}) lies outside the flat parameter of {} elements",
               i, offsets[i], offsets[i] + n, flat.numel());
    views.push_back(make_view(flat, shapes[i], contiguous_strides(shapes[i]),
                              flat.storage_offset() + offsets[i]));
  }
  if (autograd::any_requires_grad({flat})) {
    auto node = std::make_shared<FlatParamViewsBackward>(flat.numel(), flat.dtype(), flat.device(),
                                                         shapes, offsets);
    autograd::set_history({flat}, views, node);
  }
  return views;
}

}  // namespace fsdp
