/*
 * Element types. One X-macro list drives the enum, the names, the sizes and the
 * C++ type mapping, so adding a dtype is one line here (plus kernels that accept it).
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string_view>

#include "core/error.h"
#include "core/half.h"

namespace loom {

// _(C++ type, enum name, short name)
#define LOOM_FORALL_DTYPES(_)      \
  _(float, Float32, float32)       \
  _(double, Float64, float64)      \
  _(::loom::Half, Float16, float16) \
  _(::loom::BFloat16, BFloat16, bfloat16) \
  _(int8_t, Int8, int8)            \
  _(uint8_t, UInt8, uint8)         \
  _(int32_t, Int32, int32)         \
  _(int64_t, Int64, int64)         \
  _(bool, Bool, bool)

enum class DType : uint8_t {
#define LOOM_DTYPE_ENUM(type, name, short_name) name,
  LOOM_FORALL_DTYPES(LOOM_DTYPE_ENUM)
#undef LOOM_DTYPE_ENUM
};

#define LOOM_DTYPE_COUNT(type, name, short_name) +1
inline constexpr int kNumDTypes = 0 LOOM_FORALL_DTYPES(LOOM_DTYPE_COUNT);
#undef LOOM_DTYPE_COUNT

// libtorch-style aliases: loom::kFloat32, loom::kInt64, ...
inline constexpr DType kFloat32 = DType::Float32, kFloat = DType::Float32, kFloat64 = DType::Float64,
                       kDouble = DType::Float64, kFloat16 = DType::Float16, kHalf = DType::Float16,
                       kBFloat16 = DType::BFloat16, kInt8 = DType::Int8, kUInt8 = DType::UInt8,
                       kInt32 = DType::Int32, kInt = DType::Int32, kInt64 = DType::Int64,
                       kLong = DType::Int64, kBool = DType::Bool;

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
#define LOOM_DTYPE_NAME(type, name, short_name) \
  case DType::name:                           \
    return #short_name;
    LOOM_FORALL_DTYPES(LOOM_DTYPE_NAME)
#undef LOOM_DTYPE_NAME
  }
  return "?";
}

constexpr size_t dtype_size(DType t) {
  switch (t) {
#define LOOM_DTYPE_SIZE(type, name, short_name) \
  case DType::name:                           \
    return sizeof(type);
    LOOM_FORALL_DTYPES(LOOM_DTYPE_SIZE)
#undef LOOM_DTYPE_SIZE
  }
  return 0;
}

constexpr bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}
constexpr bool is_integral(DType t, bool include_bool = false) {
  return !is_floating(t) && (include_bool || t != DType::Bool);
}

inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

// C++ type -> DType
template <class T>
struct DTypeOf;
#define LOOM_DTYPE_OF(type, name, short_name) \
  template <>                               \
  struct DTypeOf<type> {                    \
    static constexpr DType value = DType::name; \
  };
LOOM_FORALL_DTYPES(LOOM_DTYPE_OF)
#undef LOOM_DTYPE_OF
template <class T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

// Type in which arithmetic on T is carried out: float for the 16-bit types.
template <class T>
struct OpMath {
  using type = T;
};
template <>
struct OpMath<Half> {
  using type = float;
};
template <>
struct OpMath<BFloat16> {
  using type = float;
};
template <class T>
using opmath_t = typename OpMath<T>::type;

// PyTorch's promotion lattice: bool < integers < floating; within a category the wider type
// wins; u8 with i8 gives i32 here (Loom has no int16); f16 with bf16 gives f32.
DType promote_types(DType a, DType b);

template <class T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) for the C++ type of `t`. `what` names the op in the error for a dtype
// the caller does not accept.
template <class F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
#define LOOM_DTYPE_CASE(type, name, short_name) \
  case DType::name:                           \
    return f(TypeTag<type>{});
    LOOM_FORALL_DTYPES(LOOM_DTYPE_CASE)
#undef LOOM_DTYPE_CASE
  }
  LOOM_FAIL("unknown dtype ", static_cast<int>(t));
}

// Floating dtypes only (f32, f64, f16, bf16).
template <class F>
decltype(auto) visit_floating_dtype(DType t, std::string_view op, F&& f) {
  switch (t) {
    case DType::Float32:
      return f(TypeTag<float>{});
    case DType::Float64:
      return f(TypeTag<double>{});
    case DType::Float16:
      return f(TypeTag<Half>{});
    case DType::BFloat16:
      return f(TypeTag<BFloat16>{});
    default:
      LOOM_FAIL(op, ": expected a floating-point tensor (float32, float64, float16, bfloat16), got ", t);
  }
}

// Every dtype but bool.
template <class F>
decltype(auto) visit_numeric_dtype(DType t, std::string_view op, F&& f) {
  LOOM_CHECK(t != DType::Bool, op, ": not supported for bool tensors");
  return visit_dtype(t, std::forward<F>(f));
}

}  // namespace loom
