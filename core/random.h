/*
 * Random numbers: Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as
 * 1, 2, 3", SC'11), a counter-based generator. Element i of a random tensor is a pure
 * function of (seed, offset, i), so the same seed gives the same numbers whatever the
 * thread count, the chunking, or the device (the CUDA kernels use the same function).
 *
 * A Generator holds a seed and an offset; every random op reserves a range of counters by
 * advancing the offset, so consecutive calls draw fresh numbers. A random op captured into a
 * CUDA graph reserves its counters at each replay instead (core/cuda_graph.h).
 */
#pragma once

#include <array>
#include <cstdint>
#include <memory>
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
  // The seed and the next counter. Shared, because a CUDA graph whose capture drew from this
  // generator draws from it again at every replay (core/cuda_graph.h), and may outlive it.
  class State {
   public:
    explicit State(uint64_t seed) : seed_(seed) {}
    // Reserves `n` counters (each gives 4 x 32 random bits) and returns (seed, first counter).
    std::array<uint64_t, 2> reserve(uint64_t n) {
      std::lock_guard<std::mutex> lock(mutex_);
      const uint64_t first = offset_;
      offset_ += n;
      return {seed_, first};
    }
    std::array<uint64_t, 2> get() const {
      std::lock_guard<std::mutex> lock(mutex_);
      return {seed_, offset_};
    }
    void set(uint64_t seed, uint64_t offset) {
      std::lock_guard<std::mutex> lock(mutex_);
      seed_ = seed;
      offset_ = offset;
    }

   private:
    mutable std::mutex mutex_;
    uint64_t seed_;
    uint64_t offset_ = 0;
  };

  explicit Generator(uint64_t seed = 67280421310721ull) : state_(std::make_shared<State>(seed)) {}
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  void manual_seed(uint64_t seed) { state_->set(seed, 0); }
  uint64_t seed() const { return state_->get()[0]; }
  uint64_t offset() const { return state_->get()[1]; }
  void set_state(uint64_t seed, uint64_t offset) { state_->set(seed, offset); }

  // Reserves `n` counters (each gives 4 x 32 random bits) and returns (seed, first counter).
  std::array<uint64_t, 2> reserve(uint64_t n) { return state_->reserve(n); }

  const std::shared_ptr<State>& shared_state() const { return state_; }

 private:
  std::shared_ptr<State> state_;
};

// The process-wide generator used when an op is given none.
Generator& default_generator();

// Seeds the default generator (torch::manual_seed).
void manual_seed(uint64_t seed);

}  // namespace loom
