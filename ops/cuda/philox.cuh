/*
 * Philox-4x32-10 and the bits-to-uniform maps of core/random.h, as host/device C++17, so that
 * the CUDA random fills draw exactly the numbers the CPU draws for the same (seed, counter).
 * Any change here must be made in core/random.h too (the tests compare the two bit for bit).
 */
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace loom::cuda {

struct PhiloxLanes {
  uint32_t v[4];
};

__host__ __device__ inline PhiloxLanes philox4x32_10(uint64_t seed, uint64_t counter_hi, uint64_t counter_lo) {
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{0xD2511F53u} * c0;
    const uint64_t p1 = uint64_t{0xCD9E8D57u} * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return PhiloxLanes{{c0, c1, c2, c3}};
}

// Uniform float in [0, 1) from 24 random bits; double in [0, 1) from 53 (exact products).
__host__ __device__ inline float uniform_float(uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}
__host__ __device__ inline double uniform_double(uint32_t hi, uint32_t lo) {
  const uint64_t bits = (static_cast<uint64_t>(hi) << 32 | lo) >> 11;
  return static_cast<double>(bits) * (1.0 / 9007199254740992.0);
}

}  // namespace loom::cuda
