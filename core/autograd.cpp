#include "core/autograd.h"

#include <atomic>
#include <limits>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "core/ops.h"

namespace fsdp::autograd {

namespace {
thread_local bool t_grad_enabled = true;
thread_local std::vector<SavedTensorHooks> t_saved_hooks;

struct BackwardContext {
  std::uint64_t id = 0;
  // Nodes reachable from the roots (the engine's dependency counts); AccumulateGrad nodes do not
  // run when autograd::grad captures leaf gradients.
  const std::unordered_map<Node*, int>* reachable = nullptr;
  bool captures_leaves = false;
  std::vector<std::function<void()>> callbacks;
};
thread_local BackwardContext* t_backward = nullptr;
std::atomic<std::uint64_t> g_graph_task_id{0};

std::atomic<std::uint64_t> g_sequence_nr{0};

const char* kFreedGraphMessage =
    "Trying to backward through the graph a second time (or directly access saved tensors "
    "after they have already been freed). Saved intermediate values of the graph are freed when "
    "you call .backward() or autograd.grad(). Specify retain_graph=True if you need to backward "
    "through the graph a second time or if you need to access saved tensors after calling "
    "backward.";
}  // namespace

bool is_grad_enabled() {
  return t_grad_enabled;
}
void set_grad_enabled(bool enabled) {
  t_grad_enabled = enabled;
}

// --- Node
Node::Node() : sequence_nr_(g_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

Node::~Node() {
  // Detach the chain of producers and free it from a loop instead of nested destructors.
  thread_local bool t_deleting = false;
  thread_local std::vector<std::shared_ptr<Node>> t_pending;
  for (auto& e : next_edges_)
    if (e.fn) t_pending.push_back(std::move(e.fn));
  if (t_deleting) return;
  t_deleting = true;
  while (!t_pending.empty()) {
    std::shared_ptr<Node> n = std::move(t_pending.back());
    t_pending.pop_back();
  }
  t_deleting = false;
}

HookHandle Node::add_tensor_pre_hook(std::uint32_t output_nr, TensorHook hook) {
  auto alive = std::make_shared<bool>(true);
  pre_hooks_[output_nr].push_back({alive, std::move(hook)});
  return HookHandle(alive);
}

HookHandle Node::add_post_hook(
    std::function<void(const variable_list&, const variable_list&)> hook) {
  auto alive = std::make_shared<bool>(true);
  post_hooks_.push_back({alive, std::move(hook)});
  return HookHandle(alive);
}

variable_list Node::run(variable_list&& grad_outputs) {
  for (auto& [nr, hooks] : pre_hooks_) {
    if (nr >= grad_outputs.size() || !grad_outputs[nr].defined()) continue;
    for (auto& h : hooks) {
      if (!*h.alive) continue;
      Tensor r = h.fn(grad_outputs[nr]);
      if (r.defined()) grad_outputs[nr] = r;
    }
  }
  if (post_hooks_.empty()) return apply(std::move(grad_outputs));
  variable_list outputs_copy = grad_outputs;
  variable_list grad_inputs = apply(std::move(grad_outputs));
  for (auto& h : post_hooks_)
    if (*h.alive) h.fn(grad_inputs, outputs_copy);
  return grad_inputs;
}

// --- AccumulateGrad
AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {
  sequence_nr_ = std::numeric_limits<std::uint64_t>::max();  // run as soon as ready
}

variable_list AccumulateGrad::apply(variable_list&& grad_outputs) {
  Tensor g = grad_outputs.empty() ? Tensor() : std::move(grad_outputs[0]);
  if (!g.defined()) return {};
  auto& meta = leaf_->autograd_meta();
  for (auto& h : meta.leaf_hooks) {
    if (!*h.alive) continue;
    Tensor r = h.fn(g);
    if (r.defined()) g = r;
  }
  NoGradGuard no_grad;
  Tensor leaf(leaf_);
  if (g.dtype() != leaf_->dtype) g = g.to(leaf_->dtype);
  FSDP_CHECK(g.shape() == leaf_->sizes(), RuntimeError,
             "AccumulateGrad: gradient of shape {} does not match the leaf's shape {}",
             shape_str(g.shape()), shape_str(leaf_->sizes()));
  if (!meta.grad.defined()) {
    // Steal the buffer only when nothing else holds it (as PyTorch does); a gradient that
    // aliases another tensor (the same incoming grad reaching two leaves, a broadcast view)
    // is copied, so an in-place change of one .grad never changes another tensor.
    const bool exclusive = g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 &&
                           g.is_contiguous() && g.storage_offset() == 0;
    meta.grad = exclusive ? g.detach() : g.clone();
  } else if (meta.grad.shape() == g.shape() && meta.grad.dtype() == g.dtype()) {
    // In place, as PyTorch does when grad mode is off: `.grad` keeps its identity and storage
    // (a gradient view into a flat buffer stays a view; nothing is reallocated per micro-batch).
    add_(meta.grad, g);
  } else {
    meta.grad = add(meta.grad, g);
  }
  for (auto& h : meta.post_accumulate_hooks)
    if (*h.alive) h.fn(leaf);
  return {};
}

// --- saved tensors
SavedTensorHooksGuard::SavedTensorHooksGuard(SavedTensorHooks hooks) {
  t_saved_hooks.push_back(std::move(hooks));
}
SavedTensorHooksGuard::~SavedTensorHooksGuard() {
  t_saved_hooks.pop_back();
}

DisableSavedTensorHooksGuard::DisableSavedTensorHooksGuard() {
  saved_.swap(t_saved_hooks);
}
DisableSavedTensorHooksGuard::~DisableSavedTensorHooksGuard() {
  saved_.swap(t_saved_hooks);
}

SavedTensor::SavedTensor(const Tensor& t) {
  if (!t.defined()) return;
  defined_ = true;
  if (!t_saved_hooks.empty()) {
    hooks_ = std::make_shared<SavedTensorHooks>(t_saved_hooks.back());
    packed_ = hooks_->pack(t);
    return;
  }
  data_ = t.detach();
  version_ = t.storage()->version();
}

Tensor SavedTensor::unpack(const std::string& op_name) const {
  if (released_) throw RuntimeError(kFreedGraphMessage);
  if (!defined_) return Tensor();
  if (hooks_) return hooks_->unpack(packed_);
  std::uint64_t now = data_.storage()->version();
  FSDP_CHECK(now == version_, RuntimeError,
             "one of the variables needed for gradient computation has been modified by an "
             "inplace operation: [{} {}] is at version {}; expected version {} instead "
             "(saved by {})",
             dtype_name(data_.dtype()), shape_str(data_.shape()), now, version_, op_name);
  return data_;
}

void SavedTensor::release() {
  data_ = Tensor();
  packed_.reset();
  released_ = true;
}

// --- FunctionNode
FunctionNode::FunctionNode(std::string name, const variable_list& to_save, BackwardFn fn)
    : name_(std::move(name)), fn_(std::move(fn)) {
  saved_.reserve(to_save.size());
  for (const auto& t : to_save) saved_.emplace_back(t);
}

variable_list FunctionNode::apply(variable_list&& grad_outputs) {
  variable_list saved;
  saved.reserve(saved_.size());
  for (const auto& s : saved_) saved.push_back(s.unpack(name_));
  NoGradGuard no_grad;
  variable_list grads = fn_(saved, grad_outputs);
  FSDP_CHECK(grads.size() == next_edges_.size(), RuntimeError,
             "{}: backward returned {} gradients for {} inputs", name_, grads.size(),
             next_edges_.size());
  return grads;
}

void FunctionNode::release_variables() {
  for (auto& s : saved_) s.release();
}

// --- history
bool any_requires_grad(const variable_list& inputs) {
  if (!t_grad_enabled) return false;
  for (const auto& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  if (t.grad_fn()) return {t.grad_fn(), t.output_nr()};
  auto& meta = t.impl()->autograd_meta();
  auto acc = meta.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    meta.grad_accumulator = acc;
  }
  return {acc, 0};
}

std::shared_ptr<Node> set_history(const variable_list& inputs, const variable_list& outputs,
                                  std::shared_ptr<Node> node) {
  auto& edges = node->mutable_next_edges();
  edges.clear();
  edges.reserve(inputs.size());
  for (const auto& t : inputs) edges.push_back(gradient_edge(t));
  node->set_num_outputs(static_cast<std::uint32_t>(outputs.size()));
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& o = outputs[i];
    if (!o.defined() || !is_floating(o.dtype())) continue;
    auto& meta = o.impl()->autograd_meta();
    meta.requires_grad = true;
    meta.grad_fn = node;
    meta.output_nr = static_cast<std::uint32_t>(i);
  }
  return node;
}

void record(const char* name, const variable_list& inputs, const variable_list& outputs,
            const variable_list& to_save, BackwardFn fn) {
  if (!any_requires_grad(inputs)) return;
  set_history(inputs, outputs, std::make_shared<FunctionNode>(name, to_save, std::move(fn)));
}

// --- engine
namespace {

class GraphRoot final : public Node {
 public:
  explicit GraphRoot(variable_list grads) : grads_(std::move(grads)) {
    sequence_nr_ = std::numeric_limits<std::uint64_t>::max();
  }
  std::string name() const override { return "GraphRoot"; }
  variable_list apply(variable_list&&) override { return grads_; }

 private:
  variable_list grads_;
};

struct ReadyCompare {
  bool operator()(const Node* a, const Node* b) const {
    return a->sequence_nr() < b->sequence_nr();
  }
};

// Captures gradients flowing into given edges instead of running accumulators (autograd.grad).
struct Capture {
  std::unordered_map<const Node*, std::vector<std::pair<std::uint32_t, std::size_t>>> at;
  variable_list grads;
};

void run_engine(const variable_list& roots, const variable_list& grad_roots, bool retain_graph,
                Capture* capture) {
  FSDP_CHECK(grad_roots.empty() || grad_roots.size() == roots.size(), ValueError,
             "backward: got {} tensors and {} gradients", roots.size(), grad_roots.size());
  variable_list root_grads;
  std::vector<Edge> root_edges;
  for (std::size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    FSDP_CHECK(r.defined() && r.requires_grad(), RuntimeError,
               "element {} of tensors does not require grad and does not have a grad_fn", i);
    Tensor g = i < grad_roots.size() ? grad_roots[i] : Tensor();
    if (!g.defined()) {
      FSDP_CHECK(
          r.numel() == 1, RuntimeError,
          "grad can be implicitly created only for scalar outputs (got a tensor of shape {})",
          shape_str(r.shape()));
      g = ones_like(r);
    } else {
      FSDP_CHECK(g.shape() == r.shape(), RuntimeError,
                 "Mismatch in shape: grad_output[{}] has a shape of {} and output[{}] has a shape "
                 "of {}.",
                 i, shape_str(g.shape()), i, shape_str(r.shape()));
    }
    root_grads.push_back(g);
    root_edges.push_back(gradient_edge(r));
  }
  auto root = std::make_shared<GraphRoot>(root_grads);
  root->mutable_next_edges() = root_edges;
  root->set_num_outputs(0);

  // Dependencies: number of edges into each node reachable from the root.
  std::unordered_map<Node*, int> deps;
  std::unordered_set<Node*> seen{root.get()};
  std::vector<Node*> stack{root.get()};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const auto& e : n->next_edges()) {
      if (!e.valid()) continue;
      ++deps[e.fn.get()];
      if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
  }

  BackwardContext ctx;
  ctx.id = g_graph_task_id.fetch_add(1, std::memory_order_relaxed) + 1;
  ctx.reachable = &deps;
  ctx.captures_leaves = capture != nullptr;
  BackwardContext* outer = t_backward;
  t_backward = &ctx;
  struct Restore {
    BackwardContext* outer;
    ~Restore() { t_backward = outer; }
  } restore{outer};

  std::unordered_map<Node*, variable_list> buffers;
  std::priority_queue<Node*, std::vector<Node*>, ReadyCompare> ready;
  // Keep nodes alive while the engine runs even if their producers are released.
  std::vector<std::shared_ptr<Node>> keep_alive{root};
  ready.push(root.get());
  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    variable_list inputs;
    if (auto it = buffers.find(node); it != buffers.end()) {
      inputs = std::move(it->second);
      buffers.erase(it);
    }
    inputs.resize(node->num_outputs());
    if (capture) {
      if (auto it = capture->at.find(node); it != capture->at.end())
        for (auto [nr, slot] : it->second) capture->grads[slot] = inputs[nr];
      if (dynamic_cast<AccumulateGrad*>(node)) continue;
    }
    variable_list outputs = node->run(std::move(inputs));
    if (!retain_graph) node->release_variables();
    const auto& edges = node->next_edges();
    for (std::size_t i = 0; i < edges.size(); ++i) {
      const Edge& e = edges[i];
      if (!e.valid()) continue;
      Node* next = e.fn.get();
      auto& buf = buffers[next];
      if (buf.size() < next->num_outputs()) buf.resize(next->num_outputs());
      if (i < outputs.size() && outputs[i].defined()) {
        Tensor& slot = buf[e.input_nr];
        if (!slot.defined())
          slot = outputs[i];
        else
          slot = add(slot, outputs[i]);
      }
      if (--deps[next] == 0) {
        keep_alive.push_back(e.fn);
        ready.push(next);
      }
    }
  }
  // Callbacks may queue more callbacks.
  for (std::size_t i = 0; i < ctx.callbacks.size(); ++i) {
    auto cb = std::move(ctx.callbacks[i]);
    cb();
  }
}

}  // namespace

void backward(const variable_list& roots, const variable_list& grad_roots, bool retain_graph) {
  NoGradGuard no_grad;
  run_engine(roots, grad_roots, retain_graph, nullptr);
}

variable_list grad(const variable_list& outputs, const variable_list& inputs,
                   const variable_list& grad_outputs, bool retain_graph) {
  Capture capture;
  capture.grads.resize(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    FSDP_CHECK(inputs[i].requires_grad(), RuntimeError, "grad: input {} does not require grad", i);
    Edge e = gradient_edge(inputs[i]);
    capture.at[e.fn.get()].push_back({e.input_nr, i});
  }
  NoGradGuard no_grad;
  run_engine(outputs, grad_outputs, retain_graph, &capture);
  return capture.grads;
}

void queue_callback(std::function<void()> callback) {
  FSDP_CHECK(t_backward != nullptr, RuntimeError,
             "queue_callback: no backward pass is running on this thread");
  t_backward->callbacks.push_back(std::move(callback));
}

bool in_backward() {
  return t_backward != nullptr;
}

std::uint64_t current_graph_task_id() {
  return t_backward ? t_backward->id : 0;
}

bool will_execute(const Node* node) {
  if (!t_backward || !node) return false;
  auto* n = const_cast<Node*>(node);  // the map is keyed by mutable pointers; never written here
  if (!t_backward->reachable->contains(n)) return false;
  return !(t_backward->captures_leaves && dynamic_cast<const AccumulateGrad*>(node));
}

}  // namespace fsdp::autograd
