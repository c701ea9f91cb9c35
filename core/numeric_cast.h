/*
 * numeric_cast<To>(from): the one definition of a value conversion between element types,
 * shared by every backend (CPU loops, CUDA kernels, the emulated CUDA build).
 *
 * Why it exists: a float that does not fit the integer type it is converted to is undefined
 * behaviour in C++, and hardware disagrees about it. x86 (and so PyTorch's CPU backend) turns
 * -1.0f -> uint8 into 255, while the GPU's cvt.rzi.u8 saturates it to 0; the first run of
 * Loom's CUDA tests on an H100 found exactly that. Loom defines it once, as PyTorch does on the
 * CPU: a floating value is truncated toward zero to int64 (NaN -> 0; beyond the int64 range ->
 * INT64_MIN, what x86's cvttsd2si gives) and then wrapped to the target's width, two's
 * complement. So -1.0 -> uint8 255, -3.7 -> uint8 253, 300.0 -> uint8 44, 200.0 -> int8 -56.
 * To bool is `value != 0` (NaN -> true). Everything else is the plain C++ conversion.
 *
 * C++17 and host/device, so that nvcc-compiled .cu files can include it.
 */
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/host_device.h"

namespace loom {

// A finite or non-finite double to int64 as defined above.
LOOM_HOST_DEVICE inline int64_t float_to_int64_wrapping(double v) {
  if (v != v) return 0;
  if (v >= 9223372036854775808.0 || v < -9223372036854775808.0) return INT64_MIN;
  return static_cast<int64_t>(v);
}

// To and From are arithmetic types (16-bit float types convert through float first).
template <class To, class From>
LOOM_HOST_DEVICE inline To numeric_cast(From v) {
  if constexpr (std::is_same<To, bool>::value) {
    return v != From(0);
  } else if constexpr (std::is_integral<To>::value && std::is_floating_point<From>::value) {
    // Two's-complement wrap through the unsigned type: defined for every value.
    using U = typename std::make_unsigned<To>::type;
    return static_cast<To>(static_cast<U>(static_cast<uint64_t>(float_to_int64_wrapping(static_cast<double>(v)))));
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace loom
