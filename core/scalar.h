// Scalar: a number passed to a tensor op (mul(t, 2), t + 0.5), keeping what libtorch's
// c10::Scalar keeps: whether it is a bool, an integer or a floating value. The op's result dtype
// depends on it (torch's "wrapped number" promotion): an int32 tensor times 2 stays int32, times
// 2.0 becomes float32.
#pragma once

#include <concepts>
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace fsdp {

class Scalar {
 public:
  enum class Kind : std::uint8_t { Bool, Integral, Floating };

  // Implicit from every C++ arithmetic type, each to its own kind (no ambiguity between int and
  // double overloads, as libtorch's).
  Scalar(bool b) : kind_(Kind::Bool), i_(b ? 1 : 0), d_(b ? 1.0 : 0.0) {}  // NOLINT: implicit
  template <std::integral T>
  requires(!std::same_as<T, bool>) Scalar(T v)  // NOLINT: implicit
      : kind_(Kind::Integral), i_(static_cast<std::int64_t>(v)), d_(static_cast<double>(v)) {}
  template <std::floating_point T>
  Scalar(T v)  // NOLINT: implicit
      : kind_(Kind::Floating), i_(0), d_(static_cast<double>(v)) {}

  Kind kind() const { return kind_; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_integral() const { return kind_ == Kind::Integral; }
  bool is_floating_point() const { return kind_ == Kind::Floating; }

  double to_double() const { return d_; }
  std::int64_t to_int() const {
    return kind_ == Kind::Floating ? static_cast<std::int64_t>(d_) : i_;
  }
  bool to_bool() const { return d_ != 0.0; }

  // -s of the same kind (a bool negates as the integer it is, as Python's -True is -1).
  Scalar operator-() const;

  // As Python prints it: 2, 2.0, True.
  std::string str() const;

 private:
  Kind kind_;
  std::int64_t i_;  // the integer value (bool, integral)
  double d_;        // the value as a double (every kind)
};

// The dtype of `tensor_dtype` op `s` under torch's wrapped-number rule: the scalar only raises
// the category (bool < integral < floating): an integral or bool tensor with a floating scalar
// gives the default float dtype (float32), a bool tensor with an integral scalar int64, anything
// else the tensor's dtype (float16 * 2.0 stays float16, int32 * 2 stays int32).
DType scalar_result_type(DType tensor_dtype, const Scalar& s);

}  // namespace fsdp
