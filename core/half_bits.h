/*
 * The bit-level conversions between float and the 16-bit floating formats (IEEE binary16 and
 * bfloat16): round to nearest, ties to even; NaN stays NaN (quiet); overflow goes to infinity.
 * C++17 with no Loom dependencies, so that the emulated CUDA headers (core/cuda/emulated),
 * compiled like .cu files, share them with the CPU types of core/half.h.
 */
#pragma once

#include <cstdint>
#include <cstring>

namespace loom {

namespace detail {

inline uint32_t bits_of(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return x;
}
inline float float_of(uint32_t x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

inline uint16_t float_to_bf16_bits(float f) {
  uint32_t x = bits_of(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // quiet NaN
  uint32_t rounding_bias = 0x7fffu + ((x >> 16) & 1u);  // ties to even
  return static_cast<uint16_t>((x + rounding_bias) >> 16);
}

inline float bf16_bits_to_float(uint16_t b) { return float_of(static_cast<uint32_t>(b) << 16); }

inline uint16_t float_to_half_bits(float f) {
  uint32_t x = bits_of(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero) in half: scale so that the integer part is the mantissa.
    // 0.5f * 2^-23 ... adding 2^-1 * 2^-13 shifts the bits into place with hardware RNE.
    float scaled = float_of(abs) + 0.5f;  // 0.5 = 2^-1: ulp of half subnormals is 2^-24
    return static_cast<uint16_t>(sign | (bits_of(scaled) - 0x3f000000u));
  }
  uint32_t mant_odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + mant_odd;  // rebias exponent (127 -> 15) and round to nearest even
  return static_cast<uint16_t>(sign | (abs >> 13));
}

inline float half_bits_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return float_of(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp == 0) {
    // zero or subnormal: value = mant * 2^-24
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return float_of(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace detail

}  // namespace loom
