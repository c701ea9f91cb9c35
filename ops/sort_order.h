/*
 * The order that sort (and everything composed of it) follows on every backend, defined once
 * so that the CPU's std::stable_sort and CUDA's bitonic network agree element for element:
 * NaN is greater than every number (torch's rule), and equal keys keep their positions' order.
 * Keys are compared in their arithmetic type (float for the 16-bit floats).
 */
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace loom {

// v != v only for NaN; integers and bool never are.
template <class V>
LOOM_HOST_DEVICE inline bool is_nan_key(V v) {
  return v != v;
}

// Whether key a goes strictly before key b: a < b ascending, a > b descending, NaN greatest.
template <class V>
LOOM_HOST_DEVICE inline bool key_before(V a, V b, bool descending) {
  const bool a_nan = is_nan_key(a), b_nan = is_nan_key(b);
  if (a_nan || b_nan) return descending ? a_nan && !b_nan : b_nan && !a_nan;
  return descending ? b < a : a < b;
}

// The stable order as a strict total order on (key, position) pairs: equal keys (NaN with NaN
// included) by position. A network that sorts by it gives exactly the stable sort.
template <class V>
LOOM_HOST_DEVICE inline bool pair_before(V a, int64_t a_pos, V b, int64_t b_pos, bool descending) {
  if (key_before(a, b, descending)) return true;
  if (key_before(b, a, descending)) return false;
  return a_pos < b_pos;
}

}  // namespace loom
