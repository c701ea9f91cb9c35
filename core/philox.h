/*
 * Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) and the
 * maps from its bits to uniform numbers: the one definition that the CPU (core/random.h) and
 * the CUDA kernels (ops/cuda/factories.cu) both call, so that the same (seed, counter) gives
 * the same numbers on every device. C++17 and host/device, for nvcc.
 */
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace loom {

// The Philox-4x32-10 bijection: 4 x 32-bit counter and 2 x 32-bit key -> 4 x 32-bit output.
struct PhiloxLanes {
  uint32_t v[4];
};

LOOM_HOST_DEVICE inline PhiloxLanes philox4x32_10(uint64_t seed, uint64_t counter_hi, uint64_t counter_lo) {
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

// The key and first counter of one random draw. Eagerly they are values. A draw captured into a
// CUDA graph reads them when its kernel runs: `replay_state` points at the graph's device copy of
// its generator's [seed, first counter of this replay], which each replay rewrites before it
// launches (core/cuda/graph.cpp), and `offset` counts from that first counter. A replay then draws
// what the same ops would draw eagerly at that point of the generator's stream.
struct PhiloxArgs {
  uint64_t seed = 0;
  uint64_t offset = 0;
  const uint64_t* replay_state = nullptr;
};

// The (seed, first counter) a kernel draws from, with a captured draw's replay state read.
LOOM_HOST_DEVICE inline PhiloxArgs resolve_philox(PhiloxArgs args) {
  if (args.replay_state != nullptr) {
    args.seed = args.replay_state[0];
    args.offset += args.replay_state[1];
    args.replay_state = nullptr;
  }
  return args;
}

// Uniform float in [0, 1) from 24 random bits; double in [0, 1) from 53 (exact products).
LOOM_HOST_DEVICE inline float uniform_float(uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}
LOOM_HOST_DEVICE inline double uniform_double(uint32_t hi, uint32_t lo) {
  const uint64_t bits = (static_cast<uint64_t>(hi) << 32 | lo) >> 11;
  return static_cast<double>(bits) * (1.0 / 9007199254740992.0);
}

}  // namespace loom
