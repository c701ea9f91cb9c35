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

#include "core/philox.h"

namespace loom {

// The Philox bijection as an array of its four lanes (core/philox.h has the definition).
struct Philox4x32 {
  static inline std::array<uint32_t, 4> generate(uint64_t seed, uint64_t counter_hi, uint64_t counter_lo) {
    const PhiloxLanes lanes = philox4x32_10(seed, counter_hi, counter_lo);
    return {lanes.v[0], lanes.v[1], lanes.v[2], lanes.v[3]};
  }
};

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
