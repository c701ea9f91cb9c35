/*
 * The vectorisable folds of one unit-stride run that the reductions (reduction_kernels.cpp)
 * are built from: sum, product, sum of squared deviations, max/min and the position of a value.
 * Each keeps kLanes independent accumulators, which the compiler turns into vector registers
 * (a single running accumulator would be a serial chain), and folds them by halving at the end.
 * Sums split rows longer than kPairwiseBlock in halves, so that long rows add up pairwise.
 */
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace loom::cpu::reduction {

constexpr int64_t kLanes = 32;            // independent accumulators in a row loop
constexpr int64_t kPairwiseBlock = 8192;  // rows longer than this are split in halves

// Integers accumulate in uint64 so that overflow wraps (as PyTorch's int64 sums) without UB.
template <class Acc>
using lane_t = std::conditional_t<std::is_integral_v<Acc>, uint64_t, Acc>;

// Folds the kLanes accumulators a[0..W) into one by halving, each level a loop of constant
// length that the compiler vectorises (a plain `for (w = W / 2; w; w /= 2)` loop it does not).
template <int64_t W, class L, class Op>
inline L fold_lanes(L* a, const Op& op) {
  if constexpr (W == 1) {
    return a[0];
  } else {
    for (int64_t j = 0; j < W / 2; ++j) a[j] = op(a[j], a[j + W / 2]);
    return fold_lanes<W / 2>(a, op);
  }
}

// Sum of p[0..n) in Acc: kLanes independent accumulators, split in halves above kPairwiseBlock.
template <class Acc, class V>
Acc row_sum(const V* __restrict p, int64_t n) {
  if (n > kPairwiseBlock) {
    const int64_t half = (n / 2 + kLanes - 1) / kLanes * kLanes;
    return static_cast<Acc>(row_sum<Acc>(p, half) + row_sum<Acc>(p + half, n - half));
  }
  using L = lane_t<Acc>;
  if (n < kLanes / 2) {  // short rows ([N, 3] over dim 1): the lanes would cost more than they save
    L s = 0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<L>(static_cast<Acc>(p[i]));
    return static_cast<Acc>(s);
  }
  L a[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) a[j] += static_cast<L>(static_cast<Acc>(p[i + j]));
  for (int64_t j = 0; i + j < n; ++j) a[j] += static_cast<L>(static_cast<Acc>(p[i + j]));
  return static_cast<Acc>(fold_lanes<kLanes>(a, [](L x, L y) { return x + y; }));
}

template <class Acc, class V>
Acc row_prod(const V* __restrict p, int64_t n) {
  using L = lane_t<Acc>;
  L a[kLanes];
  std::fill(a, a + kLanes, L{1});
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) a[j] *= static_cast<L>(static_cast<Acc>(p[i + j]));
  for (int64_t j = 0; i + j < n; ++j) a[j] *= static_cast<L>(static_cast<Acc>(p[i + j]));
  return static_cast<Acc>(fold_lanes<kLanes>(a, [](L x, L y) { return x * y; }));
}

// Sum of (p[k] - mean)^2 in double.
template <class V>
double row_squared_deviation(const V* __restrict p, int64_t n, double mean) {
  if (n > kPairwiseBlock) {
    const int64_t half = (n / 2 + kLanes - 1) / kLanes * kLanes;
    return row_squared_deviation(p, half, mean) + row_squared_deviation(p + half, n - half, mean);
  }
  double a[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) {
      const double d = static_cast<double>(p[i + j]) - mean;
      a[j] += d * d;
    }
  for (int64_t j = 0; i + j < n; ++j) {
    const double d = static_cast<double>(p[i + j]) - mean;
    a[j] += d * d;
  }
  return fold_lanes<kLanes>(a, [](double x, double y) { return x + y; });
}

// max (kMax) or min, where NaN wins: `better(x, a)` is x > a (x < a), or x is NaN.
template <bool kMax, class V>
inline bool wins(V x, V a) {
  if constexpr (kMax) {
    return x > a || x != x;  // NOLINT: x != x is the NaN test that vectorises
  } else {
    return x < a || x != x;  // NOLINT
  }
}

template <bool kMax, class V>
constexpr V extreme_identity() {
  if constexpr (std::numeric_limits<V>::has_infinity) {
    return kMax ? -std::numeric_limits<V>::infinity() : std::numeric_limits<V>::infinity();
  } else {
    return kMax ? std::numeric_limits<V>::lowest() : std::numeric_limits<V>::max();
  }
}

template <bool kMax, class V>
V row_extreme(const V* __restrict p, int64_t n, V init) {
  V a[kLanes];
  std::fill(a, a + kLanes, init);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) a[j] = wins<kMax>(p[i + j], a[j]) ? p[i + j] : a[j];
  for (int64_t j = 0; i + j < n; ++j) a[j] = wins<kMax>(p[i + j], a[j]) ? p[i + j] : a[j];
  return fold_lanes<kLanes>(a, [](V x, V y) { return wins<kMax>(y, x) ? y : x; });
}

// Position of the first element of p[0..n) equal to `target` (the first NaN when target is NaN);
// it must be there. Blocks of kLanes are tested with a vectorised OR before the scalar search.
template <class V>
int64_t find_first(const V* __restrict p, int64_t n, V target) {
  const bool nan = target != target;  // NOLINT: NaN test
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    int hit = 0;
    if (nan) {
      for (int64_t j = 0; j < kLanes; ++j) hit |= p[i + j] != p[i + j];  // NOLINT
    } else {
      for (int64_t j = 0; j < kLanes; ++j) hit |= p[i + j] == target;
    }
    if (hit) break;
  }
  for (; i < n; ++i)
    if (nan ? p[i] != p[i] : p[i] == target) return i;  // NOLINT
  return n - 1;                                         // not reached: target came from p
}

}  // namespace loom::cpu::reduction
