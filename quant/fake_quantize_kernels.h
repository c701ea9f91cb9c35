/*
 * The fake-quantization kernels (quant/fake_quantize_kernels.cpp) for the ops and autograd
 * nodes of quant/fake_quantize.cpp: float32 arithmetic that agrees with torch 1.13's CPU
 * kernels bit for bit. Internal to quant/.
 */
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace loom::quant::detail {

// std::nearbyint in the default rounding mode (ties to even), written so that it vectorises on
// any x86-64: adding 2^23 to |v| < 2^23 leaves no fraction bits, so the FPU's own
// round-to-nearest-even rounds it; |v| >= 2^23, inf and NaN are already integral (or NaN) and
// pass through. copysign keeps nearbyint's -0.0 for small negative v.
inline float round_half_even(float v) {
  constexpr float kTwo23 = 8388608.0f;
  const float a = std::fabs(v);
  const float r = std::copysign((a + kTwo23) - kTwo23, v);
  return a < kTwo23 ? r : v;
}

// x as [outer, channels, inner].
struct Layout {
  int64_t channels = 1;
  int64_t inner = 1;
};

// Calls f(begin, end, c, per_element) on the runs covering [b, e) (see the file comment): with
// per_element false every element of the run uses channel c, with it true element i uses
// channel c + (i - begin).
template <class F>
void for_each_run(int64_t b, int64_t e, const Layout& layout, const F& f) {
  if (layout.inner == 1 && layout.channels > 1) {
    for (int64_t i = b; i < e;) {
      const int64_t c = i % layout.channels;
      const int64_t end = std::min(e, i + (layout.channels - c));
      f(i, end, c, true);
      i = end;
    }
    return;
  }
  for (int64_t i = b; i < e;) {
    const int64_t block = i / layout.inner;
    const int64_t end = std::min(e, (block + 1) * layout.inner);
    f(i, end, block % layout.channels, false);
    i = end;
  }
}

// The parameters as the kernels use them: one float32 value per channel.
struct QParams {
  std::vector<float> scale, inv_scale, zero_point;
  float qmin = 0, qmax = 0;
};

struct ForwardResult {
  Tensor out;
  Tensor mask;  // Bool, defined when asked for
};

// xc: contiguous Float32; the mask (Bool) only when want_mask.
ForwardResult fake_quant_forward(const Tensor& xc, const Layout& layout, const QParams& p, bool want_mask);

// dx = dy * mask (a product rather than a select, as torch's backward: NaN * 0 stays NaN).
Tensor ste_backward(const Tensor& dy, const Tensor& mask);

struct LsqInputs {
  const float* x;
  const float* dy;
  float* dx;  // null when x needs no gradient
  const QParams* p;
  float grad_factor;
};

// dx (when `in.dx`), and the per-channel sums of the scale and zero-point gradients, in an
// order that does not depend on the thread count.
void lsq_backward_kernel(const LsqInputs& in, int64_t n, const Layout& layout, std::vector<double>& dscale,
                         std::vector<double>& dzp);

}  // namespace loom::quant::detail
