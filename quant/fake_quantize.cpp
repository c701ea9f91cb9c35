/*
 * Fake quantization: the ops, their checks and their backward nodes (see fake_quantize.h; the
 * kernels are in fake_quantize_kernels.cpp).
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
#include "quant/fake_quantize_kernels.h"

namespace loom::quant {

namespace {

using autograd::Grads;
using autograd::Node;
using autograd::SavedTensor;
using detail::fake_quant_forward;
using detail::ForwardResult;
using detail::Layout;
using detail::LsqInputs;
using detail::lsq_backward_kernel;
using detail::QParams;
using detail::round_half_even;
using detail::ste_backward;

// Bounds on quant_min/quant_max: every integer of the range, and the difference of any two,
// is then exact in float32, so float arithmetic gives what torch's int64/double arithmetic gives.
constexpr int64_t kMaxQuantBound = int64_t{1} << 23;

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
