/*
 * The sums that Loom's hand-written vector loops share (batch norm's, the softmax's), as plain
 * loops over restrict arrays that GCC vectorises for whatever ISA the caller is compiled or
 * dispatched for (with_vector_isa). The sum is taken lane by lane in A, so the order differs from
 * a sequential sum; callers that sum long runs add blocks of it up in double.
 */
#pragma once

#include <cstdint>

namespace loom::cpu {

// sum(x[0..n))
template <class A>
inline A sum_loop(const A* __restrict x, int64_t n) {
  A s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return s;
}

// sum(x * y) over [0, n)
template <class A>
inline A dot_loop(const A* __restrict x, const A* __restrict y, int64_t n) {
  A s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += x[i] * y[i];
  return s;
}

}  // namespace loom::cpu
