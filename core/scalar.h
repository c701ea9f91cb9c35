/*
 * Scalar: a number passed to an op (x + 2, x * 0.5, fill_(true)). It remembers whether it
 * was written as a bool, an integer or a floating value, because type promotion depends
 * on it as in PyTorch: int_tensor * 2 stays integral, int_tensor * 0.5 becomes float32.
 */
#pragma once

#include <concepts>
#include <cstdint>
#include <ostream>

#include "core/dtype.h"
#include "core/numeric_cast.h"

namespace loom {

class Scalar {
 public:
  enum class Kind : uint8_t { Bool, Int, Float };

  Scalar() : Scalar(int64_t{0}) {}
  Scalar(bool v) : kind_(Kind::Bool), i_(v), d_(v) {}  // NOLINT: implicit, like a number literal
  template <std::integral T>
    requires(!std::same_as<T, bool>)
  Scalar(T v) : kind_(Kind::Int), i_(static_cast<int64_t>(v)), d_(static_cast<double>(v)) {}  // NOLINT
  template <std::floating_point T>
  Scalar(T v) : kind_(Kind::Float), i_(saturating_int(static_cast<double>(v))), d_(static_cast<double>(v)) {}  // NOLINT
  Scalar(Half v) : Scalar(static_cast<float>(v)) {}      // NOLINT
  Scalar(BFloat16 v) : Scalar(static_cast<float>(v)) {}  // NOLINT

  Kind kind() const { return kind_; }
  bool is_floating() const { return kind_ == Kind::Float; }
  bool is_integral() const { return kind_ == Kind::Int; }
  bool is_bool() const { return kind_ == Kind::Bool; }

  double to_double() const { return d_; }
  int64_t to_int() const { return i_; }
  bool to_bool() const { return kind_ == Kind::Float ? d_ != 0.0 : i_ != 0; }

  // The value as C++ type T (integers keep full 64-bit precision).
  template <class T>
  T to() const {
    if constexpr (std::is_same_v<T, bool>) {
      return to_bool();
    } else if constexpr (std::is_integral_v<T>) {
      return kind_ == Kind::Float ? numeric_cast<T>(d_) : static_cast<T>(i_);  // core/numeric_cast.h
    } else {
      return static_cast<T>(kind_ == Kind::Float ? d_ : static_cast<double>(i_));
    }
  }

  // The dtype PyTorch would give a 0-dim tensor of this value: bool, int64 or float32.
  DType default_dtype() const {
    return kind_ == Kind::Bool ? DType::Bool : kind_ == Kind::Int ? DType::Int64 : DType::Float32;
  }

  // A double as int64 the way a C cast would, where that cast is defined; NaN is 0 and values
  // beyond the range saturate (a plain cast is undefined behaviour there: item() of a NaN hit it).
  static int64_t saturating_int(double v) {
    if (v != v) return 0;
    if (v >= 9223372036854775808.0) return INT64_MAX;
    if (v < -9223372036854775808.0) return INT64_MIN;
    return static_cast<int64_t>(v);
  }

 private:
  Kind kind_;
  int64_t i_;
  double d_;
};

inline std::ostream& operator<<(std::ostream& os, const Scalar& s) {
  if (s.is_bool()) return os << (s.to_bool() ? "true" : "false");
  if (s.is_integral()) return os << s.to_int();
  return os << s.to_double();
}

}  // namespace loom
