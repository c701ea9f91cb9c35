/*
 * Fake quantization: the kernels and their backward nodes (see fake_quantize.h).
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
#include "quant/fake_quantize.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "autograd/autograd_meta.h"
#include "autograd/recorder.h"
#include "autograd/saved_tensor.h"
#include "core/grad_mode.h"
#include "core/parallel.h"
#include "ops/dim_geometry.h"
#include "ops/ops.h"

namespace loom::quant {

namespace {

using autograd::Grads;
using autograd::Node;
using autograd::SavedTensor;

// Bounds on quant_min/quant_max: every integer of the range, and the difference of any two,
// is then exact in float32, so float arithmetic gives what torch's int64/double arithmetic gives.
constexpr int64_t kMaxQuantBound = int64_t{1} << 23;

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
    for_each_run(b, e, layout, [&](int64_t rb, int64_t re, int64_t c, bool per_element) {
      uint8_t* m = kMask ? mask + rb : nullptr;
      const float *s = p.scale.data() + c, *inv = p.inv_scale.data() + c, *z = p.zero_point.data() + c;
      if (per_element)
        forward_run<kMask, true>(x + rb, y + rb, m, re - rb, s, inv, z, p.qmin, p.qmax);
      else
        forward_run<kMask, false>(x + rb, y + rb, m, re - rb, s, inv, z, p.qmin, p.qmax);
    });
  });
}

struct ForwardResult {
  Tensor out;
  Tensor mask;  // Bool, defined when asked for
};

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

// ---- straight-through backward ------------------------------------------------------------

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

class FakeQuantizeBackward final : public Node {
 public:
  FakeQuantizeBackward(std::string name, const Tensor& mask) : name_(std::move(name)), mask_(mask, false) {}
  std::string name() const override { return name_; }

  Grads apply(Grads&& grads) override {
    Grads out;
    if (!needs_input_grad(0)) {
      out.emplace_back();
      return out;
    }
    const Tensor mask = mask_.unpack(*this);
    // Under create_graph the gradient itself is differentiated: dx = dy * mask, recorded.
    if (GradMode::is_enabled() && grads[0].requires_grad())
      out.push_back(grads[0] * mask.to(kFloat32));
    else
      out.push_back(ste_backward(grads[0], mask));
    return out;
  }
  void release_saved() override { mask_.release(); }
  void collect_saved(std::vector<Tensor>& out) const override {
    if (mask_.data().defined()) out.push_back(mask_.data());
  }
  void move_saved_out(std::vector<Tensor>& out) override { out.push_back(mask_.take()); }

 private:
  std::string name_;
  SavedTensor mask_;
};

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

struct LsqInputs {
  const float* x;
  const float* dy;
  float* dx;  // null when x needs no gradient
  const QParams* p;
  float grad_factor;
};

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

// dx (when `in.dx`), and the per-channel sums of the scale and zero-point gradients. The range is
// cut into a fixed number of chunks, each with its own partial sums, added in chunk order after:
// the result does not depend on which thread ran which chunk.
void lsq_backward_kernel(const LsqInputs& in, int64_t n, const Layout& layout, std::vector<double>& dscale,
                         std::vector<double>& dzp) {
  const int64_t channels = layout.channels;
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(get_num_threads(), n / kParallelGrain));
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

Tensor float_tensor_like(const std::vector<double>& v, const Tensor& like) {
  Tensor t = empty(like.sizes(), kFloat32);
  float* p = t.data_ptr<float>();
  for (size_t i = 0; i < v.size(); ++i) p[i] = static_cast<float>(v[i]);
  return t;
}

// ---- validation -----------------------------------------------------------------------------

void check_input(const Tensor& x, const char* fn) {
  LOOM_CHECK(x.defined(), fn, ": x is an undefined tensor");
  LOOM_CHECK(x.dtype() == kFloat32, fn, ": expected a float32 x, got ", x.dtype(), " with shape ", x.sizes());
  LOOM_CHECK(x.is_cpu(), fn, ": only CPU tensors are supported, got x on ", x.device());
}

void check_range(int64_t qmin, int64_t qmax, bool learnable, const char* fn) {
  LOOM_CHECK(qmin < qmax, fn, ": expected quant_min < quant_max, got quant_min = ", qmin,
             ", quant_max = ", qmax);
  LOOM_CHECK(qmin >= -kMaxQuantBound && qmax <= kMaxQuantBound, fn, ": quant_min and quant_max must lie in [",
             -kMaxQuantBound, ", ", kMaxQuantBound, "] (exact in float32), got [", qmin, ", ", qmax, "]");
  LOOM_CHECK(!learnable || (qmin <= 0 && qmax >= 0), fn,
             ": the range [quant_min, quant_max] must contain 0 for ",
             "learnable fake quantization (as in torch), got [", qmin, ", ", qmax, "]");
}

// A scale the kernels can use: positive, finite, with a finite reciprocal.
void check_scale_value(float s, int64_t channel, const char* fn) {
  const std::string which = channel < 0 ? "scale" : "scale[" + std::to_string(channel) + "]";
  LOOM_CHECK(s > 0 && std::isfinite(s) && std::isfinite(1.0f / s), fn, ": ", which,
             " must be positive and finite (with a finite reciprocal), got ", s);
}

void check_zero_point_value(int64_t zp, int64_t channel, int64_t qmin, int64_t qmax, const char* fn) {
  const std::string which = channel < 0 ? "zero_point" : "zero_point[" + std::to_string(channel) + "]";
  LOOM_CHECK(zp >= qmin && zp <= qmax, fn, ": ", which, " = ", zp, " is outside [quant_min, quant_max] = [",
             qmin, ", ", qmax, "]");
}

// A one-element ([] or [1]) qparam tensor.
void check_scalar_param(const Tensor& t, const char* name, const char* fn) {
  LOOM_CHECK(t.defined(), fn, ": ", name, " is an undefined tensor");
  LOOM_CHECK(t.numel() == 1 && t.dim() <= 1, fn, ": expected a one-element ", name,
             " ([] or [1]), got shape ", t.sizes());
}

// A [C] qparam tensor.
void check_channel_param(const Tensor& t, int64_t channels, int64_t axis, const char* name, const char* fn) {
  LOOM_CHECK(t.defined(), fn, ": ", name, " is an undefined tensor");
  LOOM_CHECK(t.dim() == 1 && t.size(0) == channels, fn, ": expected ", name, " of shape [", channels,
             "] (x.size(", axis, ")), got ", t.sizes());
}

void check_integer_zero_point(const Tensor& zp, const char* fn) {
  LOOM_CHECK(zp.dtype() == kInt32 || zp.dtype() == kInt64, fn,
             ": expected an int32 or int64 zero_point, got ", zp.dtype());
}

// The axis in [0, dim) and the [outer, C, inner] layout along it.
Layout channel_layout(const Tensor& x, int64_t& axis, const char* fn) {
  LOOM_CHECK(x.dim() >= 1, fn, ": x must have at least one dimension, got a 0-dim tensor");
  LOOM_CHECK(axis >= -x.dim() && axis < x.dim(), fn, ": axis ", axis, " is out of range for x of shape ",
             x.sizes(), " (expected [", -x.dim(), ", ", x.dim() - 1, "])");
  if (axis < 0) axis += x.dim();
  const DimGeometry g = geometry_around(x, axis);
  return Layout{g.size, g.inner};
}

Layout tensor_layout(const Tensor& x) {
  return Layout{1, std::max<int64_t>(x.numel(), 1)};
}

// Floats of a Float32 [C] or one-element tensor, on the CPU.
std::vector<float> float_values(const Tensor& t) {
  Tensor c = t.detach().to(kCPU).contiguous();
  const float* p = c.data_ptr<float>();
  return std::vector<float>(p, p + c.numel());
}

// x's values, contiguous, without x's autograd history (the node records x's edge itself).
Tensor contiguous_data(const Tensor& x) {
  Tensor d = x.detach();
  return d.is_contiguous() ? d : d.contiguous();
}

QParams make_params(const std::vector<float>& scale, const std::vector<float>& zero_point, int64_t qmin,
                    int64_t qmax) {
  QParams p;
  p.scale = scale;
  p.zero_point = zero_point;
  p.inv_scale.resize(scale.size());
  for (size_t c = 0; c < scale.size(); ++c) p.inv_scale[c] = 1.0f / scale[c];
  p.qmin = static_cast<float>(qmin);
  p.qmax = static_cast<float>(qmax);
  return p;
}

// The non-learnable forward and, when recording, its straight-through node.
Tensor fake_quant_ste(const Tensor& x, const Layout& layout, const QParams& p, const char* node_name) {
  const bool record = GradMode::is_enabled() && x.requires_grad();
  ForwardResult r = fake_quant_forward(contiguous_data(x), layout, p, record);
  if (record) {
    autograd::install_autograd();
    auto node = std::make_shared<FakeQuantizeBackward>(node_name, r.mask);
    node->add_input(autograd::gradient_edge(x), x);
    node->add_output_meta(r.out);
    autograd::set_history(r.out, node, 0);
  }
  return r.out;
}

// ---- learnable ------------------------------------------------------------------------------

class LearnableFakeQuantizeBackward final : public Node {
 public:
  LearnableFakeQuantizeBackward(std::string name, const Tensor& x, const Tensor& scale,
                                const Tensor& zero_point, Layout layout, int64_t qmin, int64_t qmax,
                                double grad_factor, bool per_channel)
      : name_(std::move(name)),
        x_(x, false),
        scale_(scale, false),
        zero_point_(zero_point, false),
        layout_(layout),
        qmin_(qmin),
        qmax_(qmax),
        grad_factor_(grad_factor),
        per_channel_(per_channel) {}
  std::string name() const override { return name_; }

  Grads apply(Grads&& grads) override {
    LOOM_CHECK(
        !(GradMode::is_enabled() && grads[0].requires_grad()), name_,
        ": a second derivative through learnable fake quantization is not supported (torch 1.13 has none "
        "either); run this backward without create_graph");
    const Tensor x = x_.unpack(*this);
    const Tensor scale = scale_.unpack(*this), zero_point = zero_point_.unpack(*this);
    const std::vector<float> s = float_values(scale);
    std::vector<float> z = float_values(zero_point);
    const float qmin = static_cast<float>(qmin_), qmax = static_cast<float>(qmax_);
    for (float& v : z) {
      // torch 1.13: the per-channel backward rounds the zero point (half to even) and clamps it;
      // the per-tensor one truncates zero_point + 0.5 after clamping.
      if (per_channel_)
        v = std::clamp(round_half_even(v), qmin, qmax);
      else
        v = std::trunc(std::clamp(v + 0.5f, qmin, qmax));
    }
    const QParams p = make_params(s, z, qmin_, qmax_);
    const Tensor dy = grads[0].to(kCPU).to(kFloat32).contiguous();
    Tensor dx = needs_input_grad(0) ? empty(x.sizes(), kFloat32) : Tensor();
    LsqInputs in{x.data_ptr<float>(), dy.data_ptr<float>(), dx.defined() ? dx.data_ptr<float>() : nullptr, &p,
                 static_cast<float>(grad_factor_)};
    std::vector<double> dscale, dzp;
    lsq_backward_kernel(in, x.numel(), layout_, dscale, dzp);
    Grads out;
    out.push_back(dx);
    out.push_back(needs_input_grad(1) ? float_tensor_like(dscale, scale) : Tensor());
    out.push_back(needs_input_grad(2) ? float_tensor_like(dzp, zero_point) : Tensor());
    return out;
  }
  void release_saved() override {
    x_.release();
    scale_.release();
    zero_point_.release();
  }
  void collect_saved(std::vector<Tensor>& out) const override {
    for (const SavedTensor* t : {&x_, &scale_, &zero_point_})
      if (t->data().defined()) out.push_back(t->data());
  }
  void move_saved_out(std::vector<Tensor>& out) override {
    for (SavedTensor* t : {&x_, &scale_, &zero_point_}) out.push_back(t->take());
  }

 private:
  std::string name_;
  SavedTensor x_, scale_, zero_point_;
  Layout layout_;
  int64_t qmin_, qmax_;
  double grad_factor_;
  bool per_channel_;
};

// The learnable forward: the non-learnable one with the rounded, clamped zero point.
Tensor fake_quant_learnable(const Tensor& x, const Tensor& scale, const Tensor& zero_point,
                            const Layout& layout, const std::vector<float>& s, const std::vector<float>& z,
                            int64_t qmin, int64_t qmax, double grad_factor, bool per_channel,
                            const char* node_name) {
  std::vector<float> zr(z.size());
  for (size_t c = 0; c < z.size(); ++c)
    zr[c] = std::clamp(round_half_even(z[c]), static_cast<float>(qmin), static_cast<float>(qmax));
  const bool record =
      GradMode::is_enabled() && (x.requires_grad() || scale.requires_grad() || zero_point.requires_grad());
  const Tensor xc = contiguous_data(x);
  ForwardResult r = fake_quant_forward(xc, layout, make_params(s, zr, qmin, qmax), false);
  if (record) {
    autograd::install_autograd();
    // scale and zero_point are kept as they are (their values are read again in backward, with
    // the saved-tensor check that they were not modified in place since).
    auto node = std::make_shared<LearnableFakeQuantizeBackward>(node_name, xc, scale, zero_point, layout,
                                                                qmin, qmax, grad_factor, per_channel);
    node->add_input(autograd::gradient_edge(x), x);
    node->add_input(autograd::gradient_edge(scale), scale);
    node->add_input(autograd::gradient_edge(zero_point), zero_point);
    node->add_output_meta(r.out);
    autograd::set_history(r.out, node, 0);
  }
  return r.out;
}

void check_learnable_params(const std::vector<float>& s, const std::vector<float>& z, bool per_channel,
                            const char* fn) {
  for (size_t c = 0; c < s.size(); ++c)
    check_scale_value(s[c], per_channel ? static_cast<int64_t>(c) : -1, fn);
  for (size_t c = 0; c < z.size(); ++c)
    LOOM_CHECK(std::isfinite(z[c]), fn, ": ",
               per_channel ? "zero_point[" + std::to_string(c) + "]" : "zero_point", " must be finite, got ",
               z[c]);
}

void check_learnable_grad_factor(double grad_factor, const char* fn) {
  LOOM_CHECK(std::isfinite(grad_factor), fn, ": grad_factor must be finite, got ", grad_factor);
}

}  // namespace

// ---- public API -----------------------------------------------------------------------------

Tensor fake_quantize_per_tensor(const Tensor& x, float scale, int32_t zero_point, int64_t quant_min,
                                int64_t quant_max) {
  constexpr const char* kFn = "fake_quantize_per_tensor";
  check_input(x, kFn);
  check_range(quant_min, quant_max, false, kFn);
  check_scale_value(scale, -1, kFn);
  check_zero_point_value(zero_point, -1, quant_min, quant_max, kFn);
  return fake_quant_ste(x, tensor_layout(x),
                        make_params({scale}, {static_cast<float>(zero_point)}, quant_min, quant_max),
                        "FakeQuantizePerTensorBackward");
}

Tensor fake_quantize_per_tensor(const Tensor& x, const Tensor& scale, const Tensor& zero_point,
                                int64_t quant_min, int64_t quant_max) {
  constexpr const char* kFn = "fake_quantize_per_tensor";
  check_scalar_param(scale, "scale", kFn);
  LOOM_CHECK(scale.dtype() == kFloat32, kFn, ": expected a float32 scale, got ", scale.dtype());
  check_scalar_param(zero_point, "zero_point", kFn);
  check_integer_zero_point(zero_point, kFn);
  const float s = scale.item<float>();
  const int64_t zp = zero_point.item<int64_t>();
  // Range-check before narrowing to int32 (the float overload checks it against the range).
  check_input(x, kFn);
  check_range(quant_min, quant_max, false, kFn);
  check_zero_point_value(zp, -1, quant_min, quant_max, kFn);
  return fake_quantize_per_tensor(x, s, static_cast<int32_t>(zp), quant_min, quant_max);
}

Tensor fake_quantize_per_channel(const Tensor& x, const Tensor& scale, const Tensor& zero_point, int64_t axis,
                                 int64_t quant_min, int64_t quant_max) {
  constexpr const char* kFn = "fake_quantize_per_channel";
  check_input(x, kFn);
  check_range(quant_min, quant_max, false, kFn);
  const Layout layout = channel_layout(x, axis, kFn);
  check_channel_param(scale, layout.channels, axis, "scale", kFn);
  LOOM_CHECK(scale.dtype() == kFloat32, kFn, ": expected a float32 scale, got ", scale.dtype());
  check_channel_param(zero_point, layout.channels, axis, "zero_point", kFn);
  check_integer_zero_point(zero_point, kFn);
  const std::vector<float> s = float_values(scale);
  const std::vector<int64_t> zp = zero_point.to_vector<int64_t>();
  std::vector<float> z(zp.size());
  for (size_t c = 0; c < s.size(); ++c) {
    check_scale_value(s[c], static_cast<int64_t>(c), kFn);
    check_zero_point_value(zp[c], static_cast<int64_t>(c), quant_min, quant_max, kFn);
    z[c] = static_cast<float>(zp[c]);
  }
  return fake_quant_ste(x, layout, make_params(s, z, quant_min, quant_max), "FakeQuantizePerChannelBackward");
}

Tensor fake_quantize_learnable_per_tensor(const Tensor& x, const Tensor& scale, const Tensor& zero_point,
                                          int64_t quant_min, int64_t quant_max, double grad_factor) {
  constexpr const char* kFn = "fake_quantize_learnable_per_tensor";
  check_input(x, kFn);
  check_range(quant_min, quant_max, true, kFn);
  check_learnable_grad_factor(grad_factor, kFn);
  check_scalar_param(scale, "scale", kFn);
  LOOM_CHECK(scale.dtype() == kFloat32, kFn, ": expected a float32 scale, got ", scale.dtype());
  check_scalar_param(zero_point, "zero_point", kFn);
  LOOM_CHECK(zero_point.dtype() == kFloat32, kFn,
             ": expected a float32 zero_point (a learnable parameter), got ", zero_point.dtype());
  const std::vector<float> s = float_values(scale), z = float_values(zero_point);
  check_learnable_params(s, z, false, kFn);
  return fake_quant_learnable(x, scale, zero_point, tensor_layout(x), s, z, quant_min, quant_max, grad_factor,
                              false, "FakeQuantizeLearnablePerTensorBackward");
}

Tensor fake_quantize_learnable_per_channel(const Tensor& x, const Tensor& scale, const Tensor& zero_point,
                                           int64_t axis, int64_t quant_min, int64_t quant_max,
                                           double grad_factor) {
  constexpr const char* kFn = "fake_quantize_learnable_per_channel";
  check_input(x, kFn);
  check_range(quant_min, quant_max, true, kFn);
  check_learnable_grad_factor(grad_factor, kFn);
  const Layout layout = channel_layout(x, axis, kFn);
  check_channel_param(scale, layout.channels, axis, "scale", kFn);
  LOOM_CHECK(scale.dtype() == kFloat32, kFn, ": expected a float32 scale, got ", scale.dtype());
  check_channel_param(zero_point, layout.channels, axis, "zero_point", kFn);
  LOOM_CHECK(zero_point.dtype() == kFloat32, kFn,
             ": expected a float32 zero_point (a learnable parameter), got ", zero_point.dtype());
  const std::vector<float> s = float_values(scale), z = float_values(zero_point);
  check_learnable_params(s, z, true, kFn);
  return fake_quant_learnable(x, scale, zero_point, layout, s, z, quant_min, quant_max, grad_factor, true,
                              "FakeQuantizeLearnablePerChannelBackward");
}

}  // namespace loom::quant
