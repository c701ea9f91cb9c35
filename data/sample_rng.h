/*
 * Randomness for the data layer that depends on nothing but position.
 *
 * SampleRng is the random stream of one sample's transforms: Philox-4x32-10 (core/random.h)
 * keyed by the loader's seed and counted by (epoch, dataset index, draw). The k-th draw for a
 * sample is a pure function of (seed, epoch, index, k), so an augmented sample is the same
 * whichever worker makes it, in whatever order, and resuming mid-epoch redraws exactly what an
 * uninterrupted run would have drawn.
 *
 * The samplers' permutations use the same generator under another key (kSamplerStream).
 */
#pragma once

#include <array>
#include <cstdint>

#include "core/random.h"

namespace loom::data {

// Keys of the independent streams derived from one seed.
inline constexpr uint64_t kTransformStream = 0x7472616e73666f72ull;  // "transfor"
inline constexpr uint64_t kSamplerStream = 0x73616d706c657273ull;    // "samplers"

// SplitMix64's finaliser: spreads (seed, stream) over the 64-bit Philox key, so that seeds 0, 1,
// 2 ... give unrelated streams.
constexpr uint64_t mix_key(uint64_t seed, uint64_t stream) {
  uint64_t z = seed ^ stream;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A counter-based stream: block b of the stream (hi, lo) is Philox(key, hi, lo + b).
class PhiloxStream {
 public:
  PhiloxStream(uint64_t key, uint64_t counter_hi, uint64_t counter_lo)
      : key_(key), hi_(counter_hi), lo_(counter_lo) {}

  uint32_t next_u32() {
    if (used_ == 4) {
      buffer_ = Philox4x32::generate(key_, hi_, lo_ + block_++);
      used_ = 0;
    }
    return buffer_[used_++];
  }
  uint64_t next_u64() {
    const uint64_t hi = next_u32();
    return hi << 32 | next_u32();
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0); }
  // Uniform integer in [0, n), n >= 1 (Lemire's multiply-shift; the bias, n / 2^64, is nil).
  uint64_t below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next_u64()) * n) >> 64);
  }

 private:
  uint64_t key_, hi_, lo_;
  uint64_t block_ = 0;
  std::array<uint32_t, 4> buffer_{};
  int used_ = 4;
};

// The random stream of sample `index` in `epoch` under `seed`. Up to 2^20 blocks (4M draws)
// per sample before the stream would run into the next index's.
class SampleRng {
 public:
  SampleRng(uint64_t seed, int64_t epoch, int64_t index)
      : stream_(mix_key(seed, kTransformStream), static_cast<uint64_t>(epoch),
                static_cast<uint64_t>(index) << 20) {}

  uint32_t next_u32() { return stream_.next_u32(); }
  double uniform() { return stream_.uniform(); }
  // Uniform integer in [low, high), high > low.
  int64_t randint(int64_t low, int64_t high) {
    return low + static_cast<int64_t>(stream_.below(static_cast<uint64_t>(high - low)));
  }
  bool bernoulli(double p) { return uniform() < p; }

 private:
  PhiloxStream stream_;
};

}  // namespace loom::data
