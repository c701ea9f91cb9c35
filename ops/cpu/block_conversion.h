/*
 * Conversion of runs of elements into a block of the compute type and back, for the CPU
 * kernels that compute in another type than the storage one (16-bit floats in float).
 *
 * Converting element by element inside an op's loop does not vectorise for Half (its scalar
 * conversion branches), so the kernels convert a block at a time: Half with the hardware
 * instructions (vcvtph2ps / vcvtps2ph, which round to nearest even like loom::Half), BFloat16
 * with bit arithmetic that the compiler vectorises. Other types convert with static_cast.
 */
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <type_traits>

#if defined(__AVX512F__) || defined(__F16C__)
#include <immintrin.h>
#endif

#include "core/half.h"

namespace loom::cpu {

template <class T>
inline constexpr bool kIsReducedFloat = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// dst[j] = V(src[j * stride]) for j < n (stride in elements; 0 broadcasts src[0]).
template <class T, class V = float>
inline void widen_block(const T* src, int64_t stride, V* __restrict dst, int64_t n) {
  if (stride == 0) {
    std::fill(dst, dst + n, static_cast<V>(src[0]));
    return;
  }
  int64_t j = 0;
  if (stride == 1) {
    if constexpr (std::is_same_v<T, Half> && std::is_same_v<V, float>) {
#if defined(__AVX512F__)
      for (; j + 16 <= n; j += 16)
        _mm512_storeu_ps(dst + j, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + j))));
#elif defined(__F16C__)
      for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(dst + j, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + j))));
#endif
    }
    if constexpr (std::is_same_v<T, BFloat16>) {
      for (; j < n; ++j) dst[j] = static_cast<V>(std::bit_cast<float>(static_cast<uint32_t>(src[j].bits) << 16));
    }
    for (; j < n; ++j) dst[j] = static_cast<V>(src[j]);
  } else {
    for (; j < n; ++j) dst[j] = static_cast<V>(src[j * stride]);
  }
}

// dst[j * stride] = T(src[j]) for j < n.
template <class T, class V = float>
inline void narrow_block(const V* __restrict src, T* dst, int64_t stride, int64_t n) {
  int64_t j = 0;
  if constexpr (std::is_same_v<T, Half> && std::is_same_v<V, float>) {
    if (stride == 1) {
#if defined(__AVX512F__)
      for (; j + 16 <= n; j += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + j),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + j), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#elif defined(__F16C__)
      for (; j + 8 <= n; j += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + j),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + j), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
    }
  }
  if (stride == 1) {
    for (; j < n; ++j) dst[j] = static_cast<T>(src[j]);
  } else {
    for (; j < n; ++j) dst[j * stride] = static_cast<T>(src[j]);
  }
}

}  // namespace loom::cpu
