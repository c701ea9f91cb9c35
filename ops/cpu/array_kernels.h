/*
 * The CPU loops written with Eigen arrays (transcendentals, GELU and its gradient, layer norm
 * rows), compiled once per instruction set.
 *
 * with_vector_isa (vector_isa.h) widens auto-vectorised loops at run time, but Eigen chooses its
 * packets (SSE2, AVX2, AVX-512) from the compiler's flags when a file is compiled, so in a
 * portable build these loops stayed SSE2 on an AVX2 CPU. array_kernels.cpp is therefore compiled
 * for the build's own target (namespace `compiled`) and, in portable builds, twice more: with
 * -mavx2 -mfma (namespace `avx2`) and with AVX-512 F/BW/VL/DQ (namespace `avx512`), each with
 * Eigen's namespace renamed so that no template of two copies can be merged by the linker. array_kernels<A>()
 * hands out the table vector_isa() chooses. The functions take raw, contiguous arrays; this header includes
 * nothing of Loom or Eigen so that the AVX2 copy shares no inline code with the rest of the library.
 */
#pragma once

#include <cstdint>

namespace loom::cpu {

// A is float or double.
template <class A>
struct ArrayKernels {
  // y[i] = f(x[i]) for i < n; x and y may be the same array.
  using Unary = void (*)(const A* x, A* y, int64_t n);
  Unary exp, log, log1p, sqrt, rsqrt, sin, cos, tanh, sigmoid, silu, gelu, gelu_tanh;

  // out[i] = g[i] * gelu'(x[i]) (the erf or the tanh form); out may be g.
  void (*gelu_backward)(const A* g, const A* x, A* out, int64_t n, bool tanh_approximation);

  // One row of layer_norm: mu and rs = 1 / sqrt(var + eps) of x[0..d), then
  // y = (x - mu) * rs * w + b, where w and b may each be null (1 and 0).
  void (*layer_norm_row)(const A* x, A* y, const A* w, const A* b, int64_t d, A eps, A* mu, A* rs);

  // One row of layer_norm's backward, with g = gy * w (gy where w is null):
  //   xhat = (x - mu) * rs,   gx = rs * (g - mean(g) - xhat * mean(g * xhat)).
  void (*layer_norm_backward_row)(const A* x, const A* gy, const A* w, A mu, A rs, A* xhat, A* gx, int64_t d);

  // Columns [j0, j0 + width) of grad_weight's and grad_bias's sums over a group of rows:
  // sum_w[j] += sum_k gy_rows[k][j0 + j] * xhat[k * d + j0 + j], sum_b[j] += sum_k gy_rows[k][j0 + j].
  void (*layer_norm_parameter_sums)(const A* const* gy_rows, const A* xhat, int64_t d, int64_t group,
                                    int64_t j0, int64_t width, A* sum_w, A* sum_b);
};

// The table for vector_isa(): in a portable build, the AVX2 or AVX-512 copy where the CPU has it.
template <class A>
const ArrayKernels<A>& array_kernels();

// The copies themselves (array_kernels.cpp), for array_kernels() and for tests that compare them.
namespace compiled {
template <class A>
const ArrayKernels<A>& array_kernels_table();
}
namespace avx2 {
template <class A>
const ArrayKernels<A>& array_kernels_table();
}
namespace avx512 {
template <class A>
const ArrayKernels<A>& array_kernels_table();
}

}  // namespace loom::cpu
