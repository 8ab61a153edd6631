#include "core/scalar.h"

#include <fmt/format.h>

namespace fsdp {

Scalar Scalar::operator-() const {
  switch (kind_) {
    case Kind::Floating:
      return Scalar(-d_);
    case Kind::Bool:
    case Kind::Integral:
      return Scalar(-i_);
  }
  return *this;
}

std::string Scalar::str() const {
  switch (kind_) {
    case Kind::Bool:
      return i_ ? "True" : "False";
    case Kind::Integral:
      return std::to_string(i_);
    case Kind::Floating: {
      std::string s = fmt::format("{}", d_);
      if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // Python's 2.0, not 2
      return s;
    }
  }
  return {};
}

DType scalar_result_type(DType tensor_dtype, const Scalar& s) {
  if (s.is_floating_point()) return is_floating(tensor_dtype) ? tensor_dtype : DType::Float32;
  if (s.is_integral() && tensor_dtype == DType::Bool) return DType::Int64;
  return tensor_dtype;
}

}  // namespace fsdp
