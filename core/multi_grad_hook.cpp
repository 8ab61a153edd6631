#include "core/multi_grad_hook.h"

#include <memory>
#include <mutex>
#include <unordered_map>

#include "core/autograd.h"

namespace fsdp::autograd {

namespace {

// Shared by the per-tensor hooks of one multi-grad hook. It holds the tensors weakly: a strong
// reference from a hook stored on the tensor (or on its grad_fn) would be a cycle.
struct MultiGradHook {
  struct Pass {
    std::vector<Tensor> grads;
    std::size_t expected = 0;
    std::size_t seen = 0;
  };

  std::shared_ptr<bool> alive = std::make_shared<bool>(true);
  std::function<void(const std::vector<Tensor>&)> fn;
  std::vector<std::weak_ptr<TensorImpl>> leaves;  // per tensor; expired for non-leaves
  std::vector<std::weak_ptr<Node>> grad_fns;      // per tensor; expired for leaves
  std::vector<bool> tracked;                      // requires grad
  std::mutex mutex;
  std::unordered_map<std::uint64_t, Pass> passes;  // by graph task: ranks may run concurrently

  // The node through which tensor i receives its gradient now (a leaf's accumulator can be
  // recreated between passes).
  std::shared_ptr<Node> node_of(std::size_t i) const {
    if (auto fn_node = grad_fns[i].lock()) return fn_node;
    auto leaf = leaves[i].lock();
    if (!leaf) return nullptr;
    return leaf->autograd_meta().grad_accumulator.lock();
  }

  std::size_t count_will_run() const {
    std::size_t n = 0;
    for (std::size_t i = 0; i < tracked.size(); ++i)
      if (tracked[i] && will_execute(node_of(i).get())) ++n;
    return n;
  }

  void on_grad(const std::shared_ptr<MultiGradHook>& self, std::size_t index, const Tensor& grad) {
    const std::uint64_t task = current_graph_task_id();
    FSDP_CHECK(task != 0, RuntimeError,
               "register_multi_grad_hook: a gradient hook ran outside a backward pass");
    std::vector<Tensor> ready;
    {
      std::lock_guard lock(mutex);
      auto [it, fresh] = passes.try_emplace(task);
      Pass& pass = it->second;
      if (fresh) {
        pass.grads.resize(tracked.size());
        pass.expected = count_will_run();
        // A gradient the pass leaves undefined never reaches its hook: finish at the latest
        // when the pass ends.
        queue_callback([self, task] { self->finish(task); });
      }
      pass.grads[index] = grad;
      if (++pass.seen < pass.expected) return;
      ready = std::move(pass.grads);
      passes.erase(it);
    }
    if (*alive) fn(ready);
  }

  void finish(std::uint64_t task) {
    std::vector<Tensor> ready;
    {
      std::lock_guard lock(mutex);
      auto it = passes.find(task);
      if (it == passes.end()) return;
      ready = std::move(it->second.grads);
      passes.erase(it);
    }
    if (*alive) fn(ready);
  }
};

}  // namespace

HookHandle register_multi_grad_hook(const std::vector<Tensor>& tensors,
                                    std::function<void(const std::vector<Tensor>& grads)> fn) {
  auto state = std::make_shared<MultiGradHook>();
  state->fn = std::move(fn);
  const std::size_t n = tensors.size();
  state->leaves.resize(n);
  state->grad_fns.resize(n);
  state->tracked.resize(n, false);
  for (std::size_t i = 0; i < n; ++i) {
    const Tensor& t = tensors[i];
    FSDP_CHECK(t.defined(), ValueError, "register_multi_grad_hook: tensor {} of {} is undefined", i,
               n);
    if (!t.requires_grad()) continue;
    state->tracked[i] = true;
    if (t.grad_fn())
      state->grad_fns[i] = t.grad_fn();
    else
      state->leaves[i] = t.impl_ptr();
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (!state->tracked[i]) continue;
    // The hook owns the state; the state refers to the tensors weakly, so there is no cycle.
    tensors[i].register_hook([state, i](const Tensor& grad) {
      if (*state->alive) state->on_grad(state, i, grad);
      return Tensor();
    });
  }
  return HookHandle(state->alive);
}

}  // namespace fsdp::autograd
