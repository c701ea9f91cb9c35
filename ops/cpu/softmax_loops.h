/*
 * The vector loops of softmax and log_softmax (nn_kernels.cpp), as plain loops over restrict
 * arrays. The kernels run them through with_vector_isa, so that a portable build runs them as
 * AVX2 code on a CPU that has it (Eigen expressions would stay SSE2 there: Eigen chooses its
 * packets at compile time). The arrays of one call overlap nowhere: through a lambda's captures
 * GCC could not tell, and would not vectorise.
 */
#pragma once

#include <cstdint>
#include <limits>

#include "ops/cpu/vector_isa.h"
#include "ops/cpu/vector_sum_loops.h"

namespace loom::cpu::softmax_loops {

// ---- the last-dim loops: one row at a time ------------------------------------------------------

// max(x[0..n)), -inf when n is 0. GCC does not vectorise an OpenMP max reduction without
// -ffinite-math-only, so the loop keeps kLanes running maxima, each updated as m = m > x ? m : x: the
// semantics of the vector max instructions, which it then uses. A NaN in the row makes the softmax NaN either
// way, through exp(x - max).
template <class A>
inline A row_max_loop(const A* __restrict x, int64_t n) {
  constexpr int64_t kLanes = 64 / sizeof(A);
  A lanes[kLanes];
  for (int64_t j = 0; j < kLanes; ++j) lanes[j] = -std::numeric_limits<A>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
    for (int64_t j = 0; j < kLanes; ++j) lanes[j] = lanes[j] > x[i + j] ? lanes[j] : x[i + j];
  }
  for (; i < n; ++i) lanes[0] = lanes[0] > x[i] ? lanes[0] : x[i];
  A m = lanes[0];
  for (int64_t j = 1; j < kLanes; ++j) m = m > lanes[j] ? m : lanes[j];
  return m;
}
template <class A>
A row_max(const A* x, int64_t n) {
  return with_vector_isa([=] { return row_max_loop(x, n); });
}

// y[i] *= s over [0, n).
template <class A>
inline void scale_row_loop(A* __restrict y, A s, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] *= s;
}
template <class A>
void scale_row(A* y, A s, int64_t n) {
  with_vector_isa([=] { scale_row_loop(y, s, n); });
}

// y[i] = x[i] - c over [0, n); y overlaps no part of x.
template <class A>
inline void shifted_row_loop(const A* __restrict x, A* __restrict y, A c, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] - c;
}
template <class A>
void shifted_row(const A* x, A* y, A c, int64_t n) {
  with_vector_isa([=] { shifted_row_loop(x, y, c, n); });
}

// The last-dim backward rows: softmax's gx = y * (g - s), and log_softmax's gx = g - e * s with
// e = exp(y) already in gx.
template <class A>
inline void softmax_grad_row_loop(const A* __restrict g, const A* __restrict y, A* __restrict gx, A s,
                                  int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) gx[i] = y[i] * (g[i] - s);
}
template <class A>
inline void log_softmax_grad_row_loop(const A* __restrict g, A* __restrict gx, A s, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) gx[i] = g[i] - gx[i] * s;
}

// ---- the blocked (non-last dim) loops: one row of a block of w columns at a time ------------------

// acc[j] = max(acc[j], x[j]) (the vector max instruction's semantics, as row_max_loop).
template <class A>
inline void max_into_loop(A* __restrict acc, const A* __restrict x, int64_t w) {
#pragma omp simd
  for (int64_t j = 0; j < w; ++j) acc[j] = acc[j] > x[j] ? acc[j] : x[j];
}
// y[j] = x[j] - c[j]
template <class A>
inline void subtract_loop(const A* __restrict x, const A* __restrict c, A* __restrict y, int64_t w) {
#pragma omp simd
  for (int64_t j = 0; j < w; ++j) y[j] = x[j] - c[j];
}
// acc[j] += x[j]
template <class A>
inline void add_into_loop(A* __restrict acc, const A* __restrict x, int64_t w) {
#pragma omp simd
  for (int64_t j = 0; j < w; ++j) acc[j] += x[j];
}
// acc[j] += g[j] * y[j]
template <class A>
inline void add_products_loop(A* __restrict acc, const A* __restrict g, const A* __restrict y, int64_t w) {
#pragma omp simd
  for (int64_t j = 0; j < w; ++j) acc[j] += g[j] * y[j];
}
// y[j] *= c[j]
template <class A>
inline void multiply_by_loop(A* __restrict y, const A* __restrict c, int64_t w) {
#pragma omp simd
  for (int64_t j = 0; j < w; ++j) y[j] *= c[j];
}
// softmax's gx[j] = y[j] * (g[j] - s[j]); log_softmax's gx[j] = g[j] - e[j] * s[j], e = exp(y) in gx.
template <class A>
inline void softmax_grad_columns_loop(const A* __restrict g, const A* __restrict y, const A* __restrict s,
                                      A* __restrict gx, int64_t w) {
#pragma omp simd
  for (int64_t j = 0; j < w; ++j) gx[j] = y[j] * (g[j] - s[j]);
}
template <class A>
inline void log_softmax_grad_columns_loop(const A* __restrict g, const A* __restrict s, A* __restrict gx,
                                          int64_t w) {
#pragma omp simd
  for (int64_t j = 0; j < w; ++j) gx[j] = g[j] - gx[j] * s[j];
}

}  // namespace loom::cpu::softmax_loops
