/*
 * Random numbers: Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as
 * 1, 2, 3", SC'11), a counter-based generator. Element i of a random tensor is a pure
 * function of (seed, offset, i), so the same seed gives the same numbers whatever the
 * thread count, the chunking, or the device (the CUDA kernels use the same function).
 *
 * A Generator holds a seed and an offset; every random op reserves a range of counters by
 * advancing the offset, so consecutive calls draw fresh numbers.
 */
#pragma once

#include <array>
#include <cstdint>
#include <mutex>

namespace loom {

// The Philox-4x32-10 bijection: 4 x 32-bit counter and 2 x 32-bit key -> 4 x 32-bit output.
struct Philox4x32 {
  static inline std::array<uint32_t, 4> generate(uint64_t seed, uint64_t counter_hi, uint64_t counter_lo) {
    uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
    uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      uint64_t p0 = uint64_t{0xD2511F53u} * c0;
      uint64_t p1 = uint64_t{0xCD9E8D57u} * c2;
      uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
      uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
      c0 = hi1 ^ c1 ^ k0;
      c1 = lo1;
      c2 = hi0 ^ c3 ^ k1;
      c3 = lo0;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    return {c0, c1, c2, c3};
  }
};

// Uniform float in [0, 1) from 24 random bits; double in [0, 1) from 53.
inline float uniform_float(uint32_t bits) { return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f); }
inline double uniform_double(uint32_t hi, uint32_t lo) {
  uint64_t bits = (static_cast<uint64_t>(hi) << 32 | lo) >> 11;
  return static_cast<double>(bits) * (1.0 / 9007199254740992.0);
}

class Generator {
 public:
  explicit Generator(uint64_t seed = 67280421310721ull) : seed_(seed) {}

  void manual_seed(uint64_t seed) {
    std::lock_guard<std::mutex> lock(mutex_);
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) {
    std::lock_guard<std::mutex> lock(mutex_);
    seed_ = seed;
    offset_ = offset;
  }

  // Reserves `n` counters (each gives 4 x 32 random bits) and returns (seed, first counter).
  std::array<uint64_t, 2> reserve(uint64_t n) {
    std::lock_guard<std::mutex> lock(mutex_);
    uint64_t first = offset_;
    offset_ += n;
    return {seed_, first};
  }

 private:
  std::mutex mutex_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The process-wide generator used when an op is given none.
Generator& default_generator();

// Seeds the default generator (torch::manual_seed).
void manual_seed(uint64_t seed);

}  // namespace loom
