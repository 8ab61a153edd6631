// Internal to ops/: one checkpointed call (checkpoint.cpp) and the hooks through which selective
// checkpointing's modes (selective_checkpoint.cpp) route the tensors that a cached op saves.
//
// A cached op is not rerun at recomputation, so the tensors it saved for its own backward must
// come from elsewhere. At forward, the frame records where each came from: one of the op's
// inputs or outputs (a view of its storage: shape, strides and offset kept), or, failing that, the
// tensor itself (kept alive). At recomputation the replay rebuilds them from the recomputed inputs
// and the cached outputs, so an op's inputs are recomputed as upstream's are.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/random.h"
#include "ops/checkpoint.h"

namespace fsdp::ops::detail {

struct TensorMeta {
  Shape shape;
  DType dtype;
  Device device;
  bool operator==(const TensorMeta&) const = default;
  std::string str() const;
};

// Where a tensor saved by a cached op comes from.
struct SavedSource {
  enum class Kind : std::uint8_t { Input, Output, Kept };
  std::size_t index = 0;  // its saved-tensor index in the region
  Kind kind = Kind::Kept;
  std::size_t position = 0;  // input or output position
  Shape sizes, strides;
  std::int64_t offset = 0;  // relative to the base's storage offset
  Shape base_sizes, base_strides;
  Tensor kept;
};

class Frame {
 public:
  Function fn;
  nn::Args inputs;
  bool preserve_rng = true;
  Generator::State rng;
  dispatch::ModePtr recompute_mode;
  bool check_metadata = true;
  bool early_stop = true;

  // Forward pack hook: the index standing for t.
  std::size_t pack(const Tensor& t);
  // Backward unpack hook: the recomputed tensor at `index` (recomputing first when needed).
  Tensor unpack(std::size_t index);

  // Selective checkpointing, forward: the saved tensors of one cached op.
  void begin_op();
  std::vector<SavedSource> end_op(const std::vector<Tensor>& inputs,
                                  const std::vector<Tensor>& outputs);
  // Selective checkpointing, recomputation: supplies a replayed op's saved tensors.
  void replay_op(const char* op, const std::vector<SavedSource>& sources,
                 const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs);

 private:
  void recompute();
  void recompute_pack(const Tensor& t);
  std::vector<TensorMeta> saved_meta_;  // per saved tensor, at forward
  std::vector<Tensor> recomputed_;      // per saved tensor; cleared once unpacked
  std::size_t recompute_count_ = 0;     // tensors saved so far by the running recomputation
  bool recording_ = false;
  std::size_t op_start_ = 0;
  std::vector<Tensor> op_saved_;  // the recorded op's saved tensors, held until end_op
};

// The checkpoint region running on this thread (its forward or its recomputation), or null.
Frame* current_frame();
class FrameScope {
 public:
  explicit FrameScope(Frame* frame);
  ~FrameScope();
  FrameScope(const FrameScope&) = delete;
  FrameScope& operator=(const FrameScope&) = delete;

 private:
  Frame* prev_;
};

}  // namespace fsdp::ops::detail
