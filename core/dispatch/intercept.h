// The one helper every core op entry point calls (through FSDP_DISPATCH) to let the active
// dispatch modes see it. Only the op's first line changes:
//
//   Tensor mm(const Tensor& a, const Tensor& b) {
//     FSDP_DISPATCH("mm", mm, a, b);
//     ... the kernel ...
//
// With no mode active this is one thread-local load and a not-taken branch. With a mode, the
// arguments are copied into an OpCall whose invoker calls the op again (reaching the modes below
// the handling one, then the kernel).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/dispatch/dispatch_mode.h"
#include "core/error.h"
#include "core/random.h"
#include "core/scalar.h"

namespace fsdp::dispatch::detail {

// --- arguments as values (what modes and the tracer see)
inline nn::Value to_value(const Tensor& t) {
  return nn::Value(t);
}
inline nn::Value to_value(double d) {
  return nn::Value(d);
}
inline nn::Value to_value(const std::optional<double>& d) {
  return d ? nn::Value(*d) : nn::Value();
}
// A scalar as the value of its kind (2, 2.0, True), as torch's traced graphs show it.
inline nn::Value to_value(const Scalar& s) {
  if (s.is_bool()) return nn::Value(s.to_bool());
  if (s.is_integral()) return nn::Value(s.to_int());
  return nn::Value(s.to_double());
}
inline nn::Value to_value(const std::optional<std::int64_t>& i) {
  return i ? nn::Value(*i) : nn::Value();
}
inline nn::Value to_value(std::int64_t i) {
  return nn::Value(i);
}
inline nn::Value to_value(bool b) {
  return nn::Value(b);
}
inline nn::Value to_value(const std::string& s) {
  return nn::Value(s);
}
inline nn::Value to_value(DType d) {
  return nn::Value(std::string(dtype_name(d)));
}
inline nn::Value to_value(Device d) {
  return nn::Value(d.str());
}
nn::Value to_value(const TensorOptions& o);
nn::Value to_value(const std::vector<std::int64_t>& ints);
nn::Value to_value(const std::vector<Tensor>& tensors);
inline nn::Value to_value(Generator* g) {
  return g ? nn::Value("Generator") : nn::Value();
}
inline nn::Value to_value(const std::pair<Tensor, Tensor>& p) {
  return nn::Value(std::vector<nn::Value>{nn::Value(p.first), nn::Value(p.second)});
}

template <typename T>
ArgKind arg_kind() {
  if constexpr (std::is_same_v<T, Tensor>) return ArgKind::Tensor;
  if constexpr (std::is_same_v<T, std::vector<Tensor>>) return ArgKind::TensorList;
  return ArgKind::Other;
}

inline void collect(std::vector<Tensor>& out, const Tensor& t) {
  out.push_back(t);
}
inline void collect(std::vector<Tensor>& out, const std::vector<Tensor>& ts) {
  out.insert(out.end(), ts.begin(), ts.end());
}
template <typename T>
void collect(std::vector<Tensor>&, const T&) {}

inline void replace(Tensor& t, const std::vector<Tensor>& in, std::size_t& i) {
  t = in.at(i++);
}
inline void replace(std::vector<Tensor>& ts, const std::vector<Tensor>& in, std::size_t& i) {
  for (auto& t : ts) t = in.at(i++);
}
template <typename T>
void replace(T&, const std::vector<Tensor>&, std::size_t&) {}

// --- results back from values (a mode may have replaced them)
[[noreturn]] void throw_bad_result(const char* op, const char* expected, const nn::Value& got);
template <typename R>
R from_value(const nn::Value& v, const char* op) {
  if constexpr (std::is_same_v<R, Tensor>) {
    if (!v.is_tensor()) throw_bad_result(op, "a Tensor", v);
    return v.tensor();
  } else if constexpr (std::is_same_v<R, std::vector<Tensor>>) {
    if (!v.is_tuple()) throw_bad_result(op, "a tuple of tensors", v);
    std::vector<Tensor> out;
    for (const auto& e : v.tuple()) {
      if (!e.is_tensor()) throw_bad_result(op, "a tuple of tensors", v);
      out.push_back(e.tensor());
    }
    return out;
  } else {
    static_assert(std::is_same_v<R, std::pair<Tensor, Tensor>>);
    if (!v.is_tuple() || v.tuple().size() != 2 || !v[0].is_tensor() || !v[1].is_tensor())
      throw_bad_result(op, "a tuple of 2 tensors", v);
    return {v[0].tensor(), v[1].tensor()};
  }
}

[[noreturn]] void throw_input_count(const char* op, std::size_t expected, std::size_t got);

// Builds the OpCall and hands it to the innermost mode (popped while it handles the call).
template <typename Fn, typename... A>
nn::Value intercept_value(const char* name, Fn fn, const A&... args) {
  auto owned = std::make_shared<const std::tuple<std::decay_t<A>...>>(args...);
  std::vector<Tensor> inputs;
  (collect(inputs, args), ...);
  const std::size_t n_inputs = inputs.size();
  OpCall::Invoker invoker = [name, fn, owned, n_inputs](const std::vector<Tensor>& in) {
    if (in.size() != n_inputs) throw_input_count(name, n_inputs, in.size());
    auto copy = *owned;
    std::size_t i = 0;
    std::apply([&](auto&... xs) { (replace(xs, in, i), ...); }, copy);
    return std::apply([&](auto&... xs) { return nn::Value(to_value(fn(xs...))); }, copy);
  };
  OpCall call(name, std::vector<nn::Value>{to_value(args)...},
              std::vector<ArgKind>{arg_kind<std::decay_t<A>>()...}, std::move(inputs),
              std::move(invoker));
  PopModeGuard pop;
  return pop.mode()->handle(call);
}

template <typename R, typename Fn, typename... A>
R intercept(const char* name, Fn fn, const A&... args) {
  return from_value<R>(intercept_value(name, std::move(fn), args...), name);
}

}  // namespace fsdp::dispatch::detail

#ifdef FSDP_NO_DISPATCH
// Built without interception (only to measure its cost: bench/ops/README.md).
#define FSDP_DISPATCH(NAME, FN, ...) \
  do {                               \
  } while (0)
#define FSDP_DISPATCH_INPLACE(NAME, FN, SELF, ...) \
  do {                                             \
  } while (0)
#else
// First line of a core op `FN` (in namespace fsdp) returning Tensor, a tensor list or a pair:
// lets the active modes see the call. NAME is the op's name as modes see it.
#define FSDP_DISPATCH(NAME, FN, ...)                                                           \
  do {                                                                                         \
    if (::fsdp::dispatch::any_mode_active()) [[unlikely]]                                      \
      return ::fsdp::dispatch::detail::intercept<decltype(::fsdp::FN(__VA_ARGS__))>(           \
          NAME, [](auto&... xs) -> decltype(auto) { return ::fsdp::FN(xs...); }, __VA_ARGS__); \
  } while (0)

// The same for an in-place op returning its first argument SELF (Tensor&): modes see the call;
// the op's result is SELF, updated by whatever ran.
#define FSDP_DISPATCH_INPLACE(NAME, FN, SELF, ...)                                     \
  do {                                                                                 \
    if (::fsdp::dispatch::any_mode_active()) [[unlikely]] {                            \
      ::fsdp::dispatch::detail::intercept_value(                                       \
          NAME, [](auto&... xs) -> decltype(auto) { return ::fsdp::FN(xs...); }, SELF, \
          __VA_ARGS__);                                                                \
      return SELF;                                                                     \
    }                                                                                  \
  } while (0)
#endif  // FSDP_NO_DISPATCH
