/*
 * 16-bit floating-point storage types: Half (IEEE binary16) and BFloat16.
 *
 * They are storage formats: arithmetic converts to float, computes, and rounds back.
 * Conversions from float round to nearest, ties to even, as PyTorch and the hardware do;
 * NaN stays NaN (quiet) and overflow goes to infinity.
 */
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <ostream>

namespace loom {

namespace detail {

inline uint16_t float_to_bf16_bits(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // quiet NaN
  uint32_t rounding_bias = 0x7fffu + ((x >> 16) & 1u);  // ties to even
  return static_cast<uint16_t>((x + rounding_bias) >> 16);
}

inline float bf16_bits_to_float(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

inline uint16_t float_to_half_bits(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero) in half: scale so that the integer part is the mantissa.
    // 0.5f * 2^-23 ... adding 2^-1 * 2^-13 shifts the bits into place with hardware RNE.
    float scaled = std::bit_cast<float>(abs) + 0.5f;  // 0.5 = 2^-1: ulp of half subnormals is 2^-24
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(scaled) - 0x3f000000u));
  }
  uint32_t mant_odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + mant_odd;  // rebias exponent (127 -> 15) and round to nearest even
  return static_cast<uint16_t>(sign | (abs >> 13));
}

inline float half_bits_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp == 0) {
    // zero or subnormal: value = mant * 2^-24
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace detail

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
