/*
 * Row buffers for kernels that compute in float (double for float64) whatever the storage
 * dtype: a row of a 16-bit tensor is converted into a per-thread buffer before the math and
 * converted back after it, while a row already in the compute type is used in place.
 *
 *   const A* x = load<A>(src, n, in_buf);   // src itself, or src converted into in_buf
 *   A* y = scratch<A>(dst, n, out_buf);     // dst itself, or out_buf
 *   ... compute y from x ...
 *   store(dst, y, n);                       // converts out_buf into dst; nothing in place
 */
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "ops/cpu/block_conversion.h"

namespace loom::cpu {

// p as compute-type (A) values: p itself when T is A, else converted into buf.
template <class A, class T>
const A* load(const T* p, int64_t n, std::vector<A>& buf) {
  if constexpr (std::is_same_v<T, A>) {
    return p;
  } else {
    buf.resize(static_cast<size_t>(n));
    widen_block(p, 1, buf.data(), n);
    return buf.data();
  }
}

// Where to compute n values of output: dst itself when T is A, else buf (then store()).
template <class A, class T>
A* scratch(T* dst, int64_t n, std::vector<A>& buf) {
  if constexpr (std::is_same_v<T, A>) {
    return dst;
  } else {
    buf.resize(static_cast<size_t>(n));
    return buf.data();
  }
}

// Converts what scratch() gave back into dst; nothing to do when that was dst itself.
template <class A, class T>
void store(T* dst, const A* src, int64_t n) {
  if constexpr (!std::is_same_v<T, A>) {
    narrow_block(src, dst, 1, n);
  }
}

}  // namespace loom::cpu
