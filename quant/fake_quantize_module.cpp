/* FakeQuantize (see fake_quantize_module.h). */
#include "quant/fake_quantize_module.h"

#include <cmath>
#include <sstream>

#include "core/error.h"
#include "core/grad_mode.h"
#include "ops/ops.h"
#include "quant/fake_quantize.h"

namespace loom::quant {

FakeQuantize::FakeQuantize(std::unique_ptr<Observer> observer, bool learnable)
    : observer_(std::move(observer)), learnable_(learnable) {
  LOOM_CHECK(observer_ != nullptr, "FakeQuantize: null observer");
  LOOM_CHECK(!learnable || observer_->options().axis < 0,
             "FakeQuantize: learnable ranges are per tensor; the observer is per channel (axis ",
             observer_->options().axis, ")");
  if (learnable_) {
    scale = register_parameter("scale", ones({1}));
    zero_point = register_parameter("zero_point", zeros({1}));
  }
}

bool FakeQuantize::calibrated() const { return (learnable_ && initialised_) || observer_->observed(); }

QParams FakeQuantize::qparams() const {
  QParams qp = observer_->qparams();  // throws when nothing was observed
  if (learnable_ && initialised_) {
    NoGradGuard no_grad;
    // The learned zero point is a float (it gets a gradient); the integer model rounds it, as
    // torch's convert does, and keeps it in range.
    const float s = std::fabs(scale.item<float>());
    const double zp = std::nearbyint(zero_point.item<float>());
    qp.scale = full({1}, std::max(s, 1e-12f));
    qp.zero_point =
        full({1}, static_cast<double>(std::clamp<int64_t>(static_cast<int64_t>(zp), qp.quant_min, qp.quant_max)))
            .to(DType::Int32);
  }
  return qp;
}

Tensor FakeQuantize::forward(const Tensor& x) {
  if (observer_on_) {
    NoGradGuard no_grad;
    observer_->observe(x.detach());
  }
  if (!fake_quant_on_) return x;
  if (learnable_) {
    if (!initialised_) {
      // LSQ starts from the observed range: the first batch decides where learning begins.
      NoGradGuard no_grad;
      QParams qp = observer_->qparams();
      scale.copy_(qp.scale.to(DType::Float32));
      zero_point.copy_(qp.zero_point.to(DType::Float32));
      initialised_ = true;
    }
    // The integer range is fixed by the observer's options: no need to recompute its qparams.
    const auto [quant_min, quant_max] = observer_->quant_range();
    // LSQ's gradient scale 1 / sqrt(numel * qmax) keeps the range's step size comparable to
    // the weights' (Esser et al. 2020, section 2.2).
    const double grad_factor = 1.0 / std::sqrt(static_cast<double>(x.numel()) * static_cast<double>(quant_max));
    return fake_quantize_learnable_per_tensor(x, scale, zero_point, quant_min, quant_max, grad_factor);
  }
  const QParams qp = observer_->qparams();
  if (qp.per_channel())
    return fake_quantize_per_channel(x, qp.scale, qp.zero_point, qp.axis, qp.quant_min, qp.quant_max);
  return fake_quantize_per_tensor(x, qp.scale_at(0), qp.zero_point_at(0), qp.quant_min, qp.quant_max);
}

std::string FakeQuantize::extra_repr() const {
  std::ostringstream os;
  os << "observer=" << observer_->name() << ", fake_quant=" << (fake_quant_on_ ? "on" : "off")
     << ", observe=" << (observer_on_ ? "on" : "off");
  if (learnable_) os << ", learnable";
  if (calibrated()) os << ", " << qparams().to_string();
  return os.str();
}

}  // namespace loom::quant
