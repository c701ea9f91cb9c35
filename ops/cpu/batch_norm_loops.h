/*
 * The vector loops of batch norm (norm_kernels.cpp), written as plain loops over restrict arrays
 * and run through with_vector_isa, so that a portable build runs them as AVX2 code on a CPU that
 * has it (Eigen expressions would stay SSE2 there: Eigen chooses its packets at compile time).
 *
 * Contiguous (NCHW) activations are normalised one run of S = H * W values at a time, with one
 * channel's scalars; channels_last ones one row of C values at a time, with per-channel arrays.
 * Sums are taken in A (float or double) over blocks of kSumBlock values, lane by lane, and the
 * blocks are added up in double, so that a long run loses no more than a short one.
 */
#pragma once

#include <algorithm>
#include <cstdint>

#include "ops/cpu/vector_isa.h"
#include "ops/cpu/vector_sum_loops.h"

namespace loom::cpu::batch_norm_loops {

constexpr int64_t kSumBlock = 4096;

namespace detail {

template <class A>
inline A block_centered_squares(const A* __restrict x, A mean, int64_t n) {
  A s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) {
    const A d = x[i] - mean;
    s += d * d;
  }
  return s;
}

template <class A>
inline void block_gradient_sums(const A* __restrict gy, const A* __restrict x, A mean, int64_t n, A& sum_gy,
                                A& sum_gy_centered) {
  A s = 0, sc = 0;
#pragma omp simd reduction(+ : s, sc)
  for (int64_t i = 0; i < n; ++i) {
    s += gy[i];
    sc += gy[i] * (x[i] - mean);
  }
  sum_gy = s;
  sum_gy_centered = sc;
}

// Calls f(begin, length) for the blocks of [0, n) in order.
template <class F>
inline void for_each_block(int64_t n, const F& f) {
  for (int64_t i = 0; i < n; i += kSumBlock) f(i, std::min(kSumBlock, n - i));
}

// The elementwise loops take their arrays as restrict parameters: through a lambda's captures
// GCC could not tell that the output aliases no input, and would not vectorise.
template <class A>
inline void scale_shift(const A* __restrict x, A* __restrict y, A scale, A shift, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale + shift;
}

template <class A>
inline void input_gradient(const A* __restrict gy, const A* __restrict x, A* __restrict gx, A k, A mean_gy,
                           A mean, A proj, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) gx[i] = k * (gy[i] - mean_gy - (x[i] - mean) * proj);
}

template <class A>
inline void scale_shift_row(const A* __restrict x, A* __restrict y, const A* __restrict scale,
                            const A* __restrict shift, int64_t c) {
#pragma omp simd
  for (int64_t j = 0; j < c; ++j) y[j] = x[j] * scale[j] + shift[j];
}

template <class A>
inline void input_gradient_row(const A* __restrict gy, const A* __restrict x, A* __restrict gx,
                               const A* __restrict k, const A* __restrict mean_gy, const A* __restrict mean,
                               const A* __restrict proj, int64_t c) {
#pragma omp simd
  for (int64_t j = 0; j < c; ++j) gx[j] = k[j] * (gy[j] - mean_gy[j] - (x[j] - mean[j]) * proj[j]);
}

template <class A>
inline void add_row(double* __restrict sums, const A* __restrict x, int64_t c) {
#pragma omp simd
  for (int64_t j = 0; j < c; ++j) sums[j] += static_cast<double>(x[j]);
}

template <class A>
inline void add_centered_squares_row(double* __restrict sums, const A* __restrict x, const A* __restrict mean,
                                     int64_t c) {
#pragma omp simd
  for (int64_t j = 0; j < c; ++j) {
    const A d = x[j] - mean[j];
    sums[j] += static_cast<double>(d * d);
  }
}

template <class A>
inline void add_gradient_terms_row(double* __restrict sum_gy, double* __restrict sum_gy_centered,
                                   const A* __restrict gy, const A* __restrict x, const A* __restrict mean,
                                   int64_t c) {
#pragma omp simd
  for (int64_t j = 0; j < c; ++j) {
    sum_gy[j] += static_cast<double>(gy[j]);
    sum_gy_centered[j] += static_cast<double>(gy[j] * (x[j] - mean[j]));
  }
}

}  // namespace detail

// sum(x[0..n))
template <class A>
double sum(const A* x, int64_t n) {
  return with_vector_isa([=] {
    double total = 0;
    detail::for_each_block(
        n, [&](int64_t i, int64_t len) { total += static_cast<double>(sum_loop(x + i, len)); });
    return total;
  });
}

// sum((x - mean)^2) over x[0..n)
template <class A>
double centered_squares(const A* x, A mean, int64_t n) {
  return with_vector_isa([=] {
    double total = 0;
    detail::for_each_block(n, [&](int64_t i, int64_t len) {
      total += static_cast<double>(detail::block_centered_squares(x + i, mean, len));
    });
    return total;
  });
}

// sum(gy) and sum(gy * (x - mean)) over [0, n), in one pass.
template <class A>
void gradient_sums(const A* gy, const A* x, A mean, int64_t n, double& sum_gy, double& sum_gy_centered) {
  with_vector_isa([&] {
    double s = 0, sc = 0;
    detail::for_each_block(n, [&](int64_t i, int64_t len) {
      A bs, bsc;
      detail::block_gradient_sums(gy + i, x + i, mean, len, bs, bsc);
      s += static_cast<double>(bs);
      sc += static_cast<double>(bsc);
    });
    sum_gy = s;
    sum_gy_centered = sc;
  });
}

// The output arrays below overlap no input: batch norm's outputs are fresh tensors or row buffers.

// y = x * scale + shift over [0, n).
template <class A>
void scale_shift(const A* x, A* y, A scale, A shift, int64_t n) {
  with_vector_isa([=] { detail::scale_shift(x, y, scale, shift, n); });
}

// gx = k * (gy - mean_gy - (x - mean) * proj) over [0, n).
template <class A>
void input_gradient(const A* gy, const A* x, A* gx, A k, A mean_gy, A mean, A proj, int64_t n) {
  with_vector_isa([=] { detail::input_gradient(gy, x, gx, k, mean_gy, mean, proj, n); });
}

// ---- channels_last rows: per-channel parameters -------------------------------------------------

// y[j] = x[j] * scale[j] + shift[j], j < c.
template <class A>
void scale_shift_row(const A* x, A* y, const A* scale, const A* shift, int64_t c) {
  with_vector_isa([=] { detail::scale_shift_row(x, y, scale, shift, c); });
}

// gx[j] = k[j] * (gy[j] - mean_gy[j] - (x[j] - mean[j]) * proj[j]), j < c.
template <class A>
void input_gradient_row(const A* gy, const A* x, A* gx, const A* k, const A* mean_gy, const A* mean,
                        const A* proj, int64_t c) {
  with_vector_isa([=] { detail::input_gradient_row(gy, x, gx, k, mean_gy, mean, proj, c); });
}

// sums[j] += x[j], j < c (in double).
template <class A>
void add_row(double* sums, const A* x, int64_t c) {
  with_vector_isa([=] { detail::add_row(sums, x, c); });
}

// sums[j] += (x[j] - mean[j])^2, j < c (in double).
template <class A>
void add_centered_squares_row(double* sums, const A* x, const A* mean, int64_t c) {
  with_vector_isa([=] { detail::add_centered_squares_row(sums, x, mean, c); });
}

// sum_gy[j] += gy[j] and sum_gy_centered[j] += gy[j] * (x[j] - mean[j]), j < c (in double).
template <class A>
void add_gradient_terms_row(double* sum_gy, double* sum_gy_centered, const A* gy, const A* x, const A* mean,
                            int64_t c) {
  with_vector_isa([=] { detail::add_gradient_terms_row(sum_gy, sum_gy_centered, gy, x, mean, c); });
}

}  // namespace loom::cpu::batch_norm_loops
