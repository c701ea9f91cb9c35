/*
 * Fake quantization: the kernels (see fake_quantize_kernels.h; the ops and their autograd
 * nodes are in fake_quantize.cpp).
 *
 * One kernel family serves per-tensor and per-channel alike. x is seen as [outer, C, inner]
 * (per-tensor: C = 1, inner = numel) and walked in runs of consecutive elements whose
 * parameters are addressed the same way: with inner > 1 a run lies in one channel and uses
 * scale[c] throughout (the hot case: per-tensor, and conv/linear weights along axis 0); with
 * inner == 1 (channels last) a run is a piece of one row of C elements and element k uses
 * scale[c0 + k]. Either way the inner loop is a single pass over contiguous memory, with the
 * parameters loaded contiguously too, which the compiler vectorises.
 *
 * The arithmetic is torch 1.13's CPU kernels' (aten/src/ATen/native/quantized/cpu/kernels/
 * QuantizedOpKernels.cpp), operation for operation in float32, so that results agree bit for
 * bit: inv_scale = 1.0f / scale is computed once, x * inv_scale is rounded half to even, and
 * the learnable backward adds the zero point *before* rounding, as torch does there. Where
 * torch converts an out-of-range float to int64 (undefined behaviour; x86 gives INT64_MIN)
 * these kernels clamp in float instead; for NaN they reproduce what x86 does (NaN lands on
 * quant_min and counts as below the range).
 */
#include "quant/fake_quantize_kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/parallel.h"
#include "ops/cpu/vector_isa.h"
#include "ops/ops.h"

namespace loom::quant::detail {

namespace {

// Clamps an integral q to [qmin, qmax]; NaN becomes qmin (torch casts it to int64, which on x86
// gives INT64_MIN, which its clamp then raises to quant_min).
inline float clamp_q(float q, float qmin, float qmax) {
  const float c = q > qmin ? q : qmin;
  return c < qmax ? c : qmax;
}

// torch's fake_quantize_tensor_cachemask_kernel for one element:
//   qval = z_point + nearbyint(x * inv_scale);  out = (clamp(qval) - z_point) * scale;
//   mask = quant_min <= qval <= quant_max.
inline bool fake_quant_element(float x, float scale, float inv_scale, float zp, float qmin, float qmax,
                               float& out) {
  const float q = round_half_even(x * inv_scale) + zp;
  out = (clamp_q(q, qmin, qmax) - zp) * scale;
  return (q >= qmin) & (q <= qmax);  // & rather than &&: no branch, so the loop vectorises
}

// ---- forward -------------------------------------------------------------------------------

// mask: the Bool mask tensor's bytes (GCC vectorises byte stores, not bool ones).
template <bool kMask, bool kPerElement>
void forward_run(const float* __restrict x, float* __restrict y, uint8_t* __restrict mask, int64_t n,
                 const float* __restrict scale, const float* __restrict inv_scale, const float* __restrict zp,
                 float qmin, float qmax) {
  if constexpr (kPerElement) {
    for (int64_t i = 0; i < n; ++i) {
      const bool inside = fake_quant_element(x[i], scale[i], inv_scale[i], zp[i], qmin, qmax, y[i]);
      if constexpr (kMask) mask[i] = inside;
    }
  } else {
    const float s = *scale, inv = *inv_scale, z = *zp;
    for (int64_t i = 0; i < n; ++i) {
      const bool inside = fake_quant_element(x[i], s, inv, z, qmin, qmax, y[i]);
      if constexpr (kMask) mask[i] = inside;
    }
  }
}

template <bool kMask>
void forward_kernel(const float* x, float* y, uint8_t* mask, int64_t n, const Layout& layout,
                    const QParams& p) {
  parallel_for(0, n, kParallelGrain, [&](int64_t b, int64_t e) {
    // AVX2 in portable builds: SSE2 has no vector rounding for the nearbyint.
    cpu::with_vector_isa([&] {
      for_each_run(b, e, layout, [&](int64_t rb, int64_t re, int64_t c, bool per_element) {
        uint8_t* m = kMask ? mask + rb : nullptr;
        const float *s = p.scale.data() + c, *inv = p.inv_scale.data() + c, *z = p.zero_point.data() + c;
        if (per_element)
          forward_run<kMask, true>(x + rb, y + rb, m, re - rb, s, inv, z, p.qmin, p.qmax);
        else
          forward_run<kMask, false>(x + rb, y + rb, m, re - rb, s, inv, z, p.qmin, p.qmax);
      });
    });
  });
}



// ---- straight-through backward ------------------------------------------------------------


// ---- learnable (LSQ) backward ---------------------------------------------------------------

// torch's fake_quantize_learnable_{tensor,channel}_grad_kernel_cpu for one element, in its
// order of float operations.
inline void lsq_element(float x, float dy, float scale, float inv_scale, float zp, float qmin, float qmax,
                        float grad_factor, float& dx, float& dscale, float& dzp) {
  const float q = round_half_even(zp + x * inv_scale);
  const bool below = !(q >= qmin);           // NaN counts as below (see clamp_q)
  const bool inside = !below & (q <= qmax);  // & rather than &&: no branch, so the loop vectorises
  const float pass = inside ? 1.0f : 0.0f;   // (a bool-to-float conversion would not vectorise)
  dx = dy * pass;
  // Both sides are computed and then selected: GCC does not move float operations (which may
  // trap) out of a branch, so a conditional computation would keep the loop scalar.
  const float xfq = (clamp_q(q, qmin, qmax) - zp) * scale;
  const float dscale_in = dy * (xfq - x) * inv_scale * grad_factor;
  const float dscale_small = qmin - zp, dscale_big = qmax - zp;
  const float dscale_out = dy * (below ? dscale_small : dscale_big) * grad_factor;
  const float dzp_out = dy * -1.0f * scale * grad_factor;
  dscale = inside ? dscale_in : dscale_out;
  dzp = inside ? 0.0f : dzp_out;
}

// The sum of n floats in double, with independent partial sums so that the adds overlap.
inline double sum_floats(const float* v, int64_t n) {
  double s[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s[0] += v[i];
    s[1] += v[i + 1];
    s[2] += v[i + 2];
    s[3] += v[i + 3];
  }
  for (; i < n; ++i) s[0] += v[i];
  return (s[0] + s[1]) + (s[2] + s[3]);
}


// One run; adds the run's scale and zero-point gradients into acc_scale[c], acc_zp[c]. dx is
// computed either way (into a buffer when x needs no gradient): a loop with dead stores
// removed took a shape GCC no longer vectorised.
template <bool kPerElement>
void lsq_run(const LsqInputs& in, int64_t b, int64_t e, int64_t c, double* acc_scale, double* acc_zp) {
  const QParams& p = *in.p;
  const float* __restrict x = in.x;
  const float* __restrict dy = in.dy;
  float* __restrict dx = in.dx;
  if constexpr (kPerElement) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t ch = c + (i - b);
      float dxi, ds, dz;
      lsq_element(x[i], dy[i], p.scale[ch], p.inv_scale[ch], p.zero_point[ch], p.qmin, p.qmax, in.grad_factor,
                  dxi, ds, dz);
      if (dx) dx[i] = dxi;
      acc_scale[ch] += ds;
      acc_zp[ch] += dz;
    }
  } else {
    // Elementwise into a block buffer (vectorised), then summed: the sums do not hold the
    // elementwise loop back.
    constexpr int64_t kBlock = 1024;
    float ds[kBlock], dz[kBlock], dxb[kBlock];
    const float s = p.scale[c], inv = p.inv_scale[c], z = p.zero_point[c];
    const float qmin = p.qmin, qmax = p.qmax, grad_factor = in.grad_factor;
    double sum_s = 0, sum_z = 0;
    for (int64_t b0 = b; b0 < e; b0 += kBlock) {
      const int64_t len = std::min(kBlock, e - b0);
      for (int64_t k = 0; k < len; ++k)
        lsq_element(x[b0 + k], dy[b0 + k], s, inv, z, qmin, qmax, grad_factor, dxb[k], ds[k], dz[k]);
      if (dx) std::copy(dxb, dxb + len, dx + b0);
      sum_s += sum_floats(ds, len);
      sum_z += sum_floats(dz, len);
    }
    acc_scale[c] += sum_s;
    acc_zp[c] += sum_z;
  }
}

}  // namespace

// xc: contiguous Float32.
ForwardResult fake_quant_forward(const Tensor& xc, const Layout& layout, const QParams& p, bool want_mask) {
  ForwardResult r;
  r.out = empty(xc.sizes(), kFloat32);
  const int64_t n = xc.numel();
  if (want_mask) {
    r.mask = empty(xc.sizes(), kBool);
    forward_kernel<true>(xc.data_ptr<float>(), r.out.data_ptr<float>(),
                         reinterpret_cast<uint8_t*>(r.mask.data_ptr<bool>()), n, layout, p);
  } else {
    forward_kernel<false>(xc.data_ptr<float>(), r.out.data_ptr<float>(), nullptr, n, layout, p);
  }
  return r;
}

// dx = dy * mask (a product rather than a select, as torch's backward: NaN * 0 stays NaN).
Tensor ste_backward(const Tensor& dy, const Tensor& mask) {
  Tensor dyc = dy.to(kCPU).to(kFloat32).contiguous();
  Tensor dx = empty(mask.sizes(), kFloat32);
  const float* g = dyc.data_ptr<float>();
  // Read as bytes: GCC does not vectorise loads of bool.
  const uint8_t* m = reinterpret_cast<const uint8_t*>(mask.data_ptr<bool>());
  float* out = dx.data_ptr<float>();
  parallel_for(0, mask.numel(), kParallelGrain, [g, m, out](int64_t b, int64_t e) {
    const float* __restrict gr = g;
    const uint8_t* __restrict mr = m;
    float* __restrict o = out;
    for (int64_t i = b; i < e; ++i) o[i] = gr[i] * static_cast<float>(mr[i]);
  });
  return dx;
}

// dx (when `in.dx`), and the per-channel sums of the scale and zero-point gradients. The range is
// cut into a fixed number of chunks, each with its own partial sums, added in chunk order after:
// the result does not depend on which thread ran which chunk.
void lsq_backward_kernel(const LsqInputs& in, int64_t n, const Layout& layout, std::vector<double>& dscale,
                         std::vector<double>& dzp) {
  const int64_t channels = layout.channels;
  const int64_t chunks = threads_for(n, kParallelGrain);
  std::vector<double> acc(static_cast<size_t>(2 * chunks * channels), 0.0);
  parallel_for(0, chunks, 1, [&](int64_t cb, int64_t ce) {
    for (int64_t k = cb; k < ce; ++k) {
      double* acc_scale = acc.data() + 2 * k * channels;
      double* acc_zp = acc_scale + channels;
      for_each_run(n * k / chunks, n * (k + 1) / chunks, layout,
                   [&](int64_t rb, int64_t re, int64_t c, bool per_element) {
                     if (per_element)
                       lsq_run<true>(in, rb, re, c, acc_scale, acc_zp);
                     else
                       lsq_run<false>(in, rb, re, c, acc_scale, acc_zp);
                   });
    }
  });
  dscale.assign(static_cast<size_t>(channels), 0.0);
  dzp.assign(static_cast<size_t>(channels), 0.0);
  for (int64_t k = 0; k < chunks; ++k)
    for (int64_t c = 0; c < channels; ++c) {
      dscale[c] += acc[2 * k * channels + c];
      dzp[c] += acc[2 * k * channels + channels + c];
    }
}

}  // namespace loom::quant::detail
