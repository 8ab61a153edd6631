// Define-by-run reverse-mode autograd: every differentiable op records a Node whose edges point
// at the nodes of its inputs; backward() walks the graph in dependency order.
#pragma once

#include <any>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace fsdp::autograd {

using variable_list = std::vector<Tensor>;

// --- grad mode (thread-local)
bool is_grad_enabled();
void set_grad_enabled(bool enabled);
// Sets grad mode for its lifetime and restores the previous mode, also on exceptions.
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) : prev_(is_grad_enabled()) { set_grad_enabled(enabled); }
  ~GradModeGuard() { set_grad_enabled(prev_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool prev_;
};
class NoGradGuard : public GradModeGuard {
 public:
  NoGradGuard() : GradModeGuard(false) {}
};

class Node;

struct Edge {
  std::shared_ptr<Node> fn;
  std::uint32_t input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

template <typename Fn>
struct Hook {
  std::shared_ptr<bool> alive;
  Fn fn;
};

// A tensor hook: sees the gradient, may return a replacement (undefined = keep).
using TensorHook = std::function<Tensor(const Tensor&)>;

struct AutogradMeta {
  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;
  std::uint32_t output_nr = 0;
  Tensor grad;
  std::weak_ptr<Node> grad_accumulator;  // leaves
  std::vector<Hook<TensorHook>> leaf_hooks;
  std::vector<Hook<std::function<void(const Tensor&)>>> post_accumulate_hooks;
  bool retains_grad = false;
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node();  // iterative: a graph 100 000 ops deep is freed without deep recursion
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  virtual std::string name() const = 0;
  // Gradients of this node's outputs -> gradients of its inputs (one per next edge). An
  // undefined entry in either list means zero.
  virtual variable_list apply(variable_list&& grad_outputs) = 0;
  // Frees saved tensors after a backward without retain_graph.
  virtual void release_variables() {}

  const std::vector<Edge>& next_edges() const { return next_edges_; }
  std::vector<Edge>& mutable_next_edges() { return next_edges_; }
  std::uint64_t sequence_nr() const { return sequence_nr_; }
  std::uint32_t num_outputs() const { return num_outputs_; }
  void set_num_outputs(std::uint32_t n) { num_outputs_ = n; }

  // Hooks on the gradient of output `output_nr`, run before apply().
  HookHandle add_tensor_pre_hook(std::uint32_t output_nr, TensorHook hook);
  // Runs after apply() with (grad_inputs, grad_outputs).
  HookHandle add_post_hook(std::function<void(const variable_list&, const variable_list&)> hook);

  // Used by the engine.
  variable_list run(variable_list&& grad_outputs);

 protected:
  std::vector<Edge> next_edges_;
  std::uint64_t sequence_nr_;
  std::uint32_t num_outputs_ = 1;

 private:
  std::map<std::uint32_t, std::vector<Hook<TensorHook>>> pre_hooks_;
  std::vector<Hook<std::function<void(const variable_list&, const variable_list&)>>> post_hooks_;
};

// The node that accumulates into a leaf's .grad (runs the leaf's hooks first, then the
// post-accumulate-grad hooks).
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf);
  std::string name() const override { return "AccumulateGrad"; }
  variable_list apply(variable_list&& grad_outputs) override;
  const std::shared_ptr<TensorImpl>& leaf() const { return leaf_; }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

// --- saved tensors, with pack/unpack hooks (activation checkpointing rides on them)
struct SavedTensorHooks {
  std::function<std::any(const Tensor&)> pack;
  std::function<Tensor(const std::any&)> unpack;
};
// Installs hooks for tensors saved while it is alive, on this thread (nests).
class SavedTensorHooksGuard {
 public:
  explicit SavedTensorHooksGuard(SavedTensorHooks hooks);
  ~SavedTensorHooksGuard();
  SavedTensorHooksGuard(const SavedTensorHooksGuard&) = delete;
  SavedTensorHooksGuard& operator=(const SavedTensorHooksGuard&) = delete;
};
// Suspends any installed pack hooks (used inside a checkpoint's recomputation).
class DisableSavedTensorHooksGuard {
 public:
  DisableSavedTensorHooksGuard();
  ~DisableSavedTensorHooksGuard();

 private:
  std::vector<SavedTensorHooks> saved_;
};

class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t);
  // The saved value (detached). Throws after release or if it was modified in place since.
  Tensor unpack(const std::string& op_name) const;
  void release();

 private:
  Tensor data_;
  std::any packed_;
  std::shared_ptr<SavedTensorHooks> hooks_;
  std::uint64_t version_ = 0;
  bool defined_ = false;
  bool released_ = false;
};

// Generic node: saves tensors, calls fn(saved, grad_outputs) in backward.
using BackwardFn =
    std::function<variable_list(const variable_list& saved, const variable_list& grad_outputs)>;
class FunctionNode final : public Node {
 public:
  FunctionNode(std::string name, const variable_list& to_save, BackwardFn fn);
  std::string name() const override { return name_; }
  variable_list apply(variable_list&& grad_outputs) override;
  void release_variables() override;

 private:
  std::string name_;
  std::vector<SavedTensor> saved_;
  BackwardFn fn_;
};

// True when grad mode is on and some input requires grad.
bool any_requires_grad(const variable_list& inputs);
// The edge through which a gradient for `t` flows (its grad_fn, or its leaf accumulator).
Edge gradient_edge(const Tensor& t);
// Records `node` as the producer of `outputs`, with edges to `inputs`. Returns the node.
std::shared_ptr<Node> set_history(const variable_list& inputs, const variable_list& outputs,
                                  std::shared_ptr<Node> node);
// The common case for ops: if any input requires grad (and grad mode is on), record a
// FunctionNode named `name` that saves `to_save` and computes input grads with `fn`.
void record(const char* name, const variable_list& inputs, const variable_list& outputs,
            const variable_list& to_save, BackwardFn fn);

// --- the engine
void backward(const variable_list& roots, const variable_list& grad_roots,
              bool retain_graph = false);
// Gradients of `outputs` w.r.t. `inputs` without touching .grad.
variable_list grad(const variable_list& outputs, const variable_list& inputs,
                   const variable_list& grad_outputs = {}, bool retain_graph = false);
// Runs `callback` when the current backward pass finishes (FSDP's final callback). Only
// valid while a backward pass runs on this thread.
void queue_callback(std::function<void()> callback);
bool in_backward();
// Identifies the backward pass running on this thread (0 when none): hooks that see several
// gradients of one pass use it to tell passes apart.
std::uint64_t current_graph_task_id();
// True when the backward pass running on this thread will run `node`: it is reachable from the
// pass's roots (and is not a leaf accumulator that autograd::grad captures instead). False outside
// a backward pass. As torch's _will_engine_execute_node.
bool will_execute(const Node* node);

}  // namespace fsdp::autograd
