// Op interception: a thread-local stack of dispatch modes that sees every core op call (its name,
// arguments and tensor inputs) and can run it, record it or replace its result. Tracing, fake
// (meta) shape propagation and selective activation checkpointing are modes (ops/).
//
// The cost when no mode is active is one thread-local load per op (FSDP_DISPATCH in intercept.h).
// A mode handles a call with itself popped, so the ops it runs reach the modes below it, then the
// kernels: the C++ counterpart of PyTorch's TorchDispatchMode stack.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/value.h"

namespace fsdp::dispatch {

namespace detail {
// True while this thread's mode stack is not empty. constinit: no TLS init wrapper on each read.
extern thread_local constinit bool t_any_mode_active;
}  // namespace detail

// The one check every core op makes.
inline bool any_mode_active() {
  return detail::t_any_mode_active;
}

// What a mode is, for the higher-order operators that pick a kernel per mode (ops/).
enum class ModeKind { Generic, Tracing, Fake, Functionalize };

// How one argument of an op call holds tensors.
enum class ArgKind : std::uint8_t { Tensor, TensorList, Other };

// One intercepted core op call.
class OpCall {
 public:
  // Runs the op with the given tensor inputs (same count and order as inputs()).
  using Invoker = std::function<nn::Value(const std::vector<Tensor>& inputs)>;

  OpCall(const char* name, std::vector<nn::Value> args, std::vector<ArgKind> kinds,
         std::vector<Tensor> inputs, Invoker invoker)
      : name_(name),
        args_(std::move(args)),
        kinds_(std::move(kinds)),
        inputs_(std::move(inputs)),
        invoker_(std::move(invoker)) {}

  // The op's name: the function's ("mm", "softmax"), with ".Scalar" / ".dim" for overloads.
  const char* name() const { return name_; }
  // Every argument in order; tensors in place (an undefined tensor is an undefined Tensor value),
  // tensor lists as tuples, shapes as tuples of ints, dtypes/devices/options as strings.
  const std::vector<nn::Value>& args() const { return args_; }
  const std::vector<ArgKind>& arg_kinds() const { return kinds_; }
  // The tensor inputs in argument order (lists flattened).
  const std::vector<Tensor>& inputs() const { return inputs_; }

  // Runs the op: the next mode below, or the kernel.
  nn::Value run() const { return invoker_(inputs_); }
  // The same op on other tensor inputs (fake/meta propagation); the count must match.
  nn::Value run(const std::vector<Tensor>& inputs) const { return invoker_(inputs); }
  // A copyable handle that reruns this op (it owns the non-tensor arguments).
  const Invoker& invoker() const { return invoker_; }

 private:
  const char* name_;
  std::vector<nn::Value> args_;
  std::vector<ArgKind> kinds_;
  std::vector<Tensor> inputs_;
  Invoker invoker_;
};

class DispatchMode {
 public:
  virtual ~DispatchMode() = default;
  virtual std::string name() const = 0;  // for messages: "Tracer", "FakeTensorMode"
  virtual ModeKind kind() const { return ModeKind::Generic; }
  // Sees one core op call, with this mode popped: run it (call.run()), record it, or replace it
  // by returning other outputs (a Tensor, or a tuple for ops returning several).
  virtual nn::Value handle(const OpCall& call) = 0;
  // A generic mode that also accepts higher-order operators without a rule for it (upstream's
  // supports_higher_order_operators).
  virtual bool supports_higher_order_operators() const { return false; }
};

using ModePtr = std::shared_ptr<DispatchMode>;

// Pushes a mode for its lifetime (modes nest; the innermost sees calls first).
class ModeGuard {
 public:
  explicit ModeGuard(ModePtr mode);
  ~ModeGuard();
  ModeGuard(const ModeGuard&) = delete;
  ModeGuard& operator=(const ModeGuard&) = delete;

 private:
  DispatchMode* mode_;
};

// Pops the innermost mode for its lifetime (what a mode's handler runs under).
class PopModeGuard {
 public:
  PopModeGuard();
  ~PopModeGuard();
  PopModeGuard(const PopModeGuard&) = delete;
  PopModeGuard& operator=(const PopModeGuard&) = delete;
  const ModePtr& mode() const { return mode_; }

 private:
  ModePtr mode_;
};

// Suspends every mode for its lifetime (code that must run kernels directly).
class NoModesGuard {
 public:
  NoModesGuard();
  ~NoModesGuard();
  NoModesGuard(const NoModesGuard&) = delete;
  NoModesGuard& operator=(const NoModesGuard&) = delete;

 private:
  std::vector<ModePtr> saved_;
};

// The innermost mode of this thread, or null.
DispatchMode* current_mode();
// This thread's modes, outermost first.
const std::vector<ModePtr>& mode_stack();
// The innermost mode of a kind, or null.
DispatchMode* find_mode(ModeKind kind);

}  // namespace fsdp::dispatch
