/*
 * 16-bit floating-point storage types: Half (IEEE binary16) and BFloat16.
 *
 * They are storage formats: arithmetic converts to float, computes, and rounds back.
 * Conversions from float round to nearest, ties to even, as PyTorch and the hardware do;
 * NaN stays NaN (quiet) and overflow goes to infinity.
 */
#pragma once

#include <cstdint>
#include <ostream>

#include "core/half_bits.h"

namespace loom {

struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f) : bits(detail::float_to_half_bits(f)) {}  // NOLINT: implicit like a float
  operator float() const { return detail::half_bits_to_float(bits); }
  static Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) : bits(detail::float_to_bf16_bits(f)) {}  // NOLINT: implicit like a float
  operator float() const { return detail::bf16_bits_to_float(bits); }
  static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

inline std::ostream& operator<<(std::ostream& os, Half h) { return os << static_cast<float>(h); }
inline std::ostream& operator<<(std::ostream& os, BFloat16 h) { return os << static_cast<float>(h); }

}  // namespace loom
