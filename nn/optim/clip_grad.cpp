/*
 * clip_grad_norm_ and clip_grad_value_ (see clip_grad.h). Clipping runs on every training
 * step over every gradient, so the contiguous gradients of each device are read by one
 * foreach_norm_reduce call and scaled by one foreach_mul_ call (ops/optim_ops.h): one parallel
 * pass each on the CPU, a handful of launches on CUDA. On CUDA the clip factor is computed on
 * the device too, so the only read back to the host is the norm that the function returns.
 */
#include "nn/optim/clip_grad.h"

#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include "core/grad_mode.h"
#include "nn/optim/step_common.h"
#include "ops/cpu/flat_range.h"
#include "ops/ops.h"

namespace loom::nn {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Gradients of `params` that exist: the contiguous ones by device (the foreach ops take them
// in one call per device) and the rest.
struct Grads {
  std::vector<std::pair<Device, std::vector<Tensor>>> contiguous;
  std::vector<Tensor> other;
  bool empty() const { return contiguous.empty() && other.empty(); }
};

Grads collect_grads(const std::vector<Tensor>& params, const char* fn) {
  Grads out;
  for (size_t i = 0; i < params.size(); ++i) {
    LOOM_CHECK(params[i].defined(), fn, ": parameter ", i, " is undefined");
    const Tensor& grad = params[i].grad();
    if (!grad.defined()) continue;
    LOOM_CHECK(grad.dtype() == kFloat32 || grad.dtype() == kFloat64, fn, ": the gradient of parameter ", i,
               " has dtype ", grad.dtype(), "; float32 and float64 gradients are supported");
    if (grad.is_contiguous())
      optim_detail::batch_for(out.contiguous, grad.device()).push_back(grad);
    else
      out.other.push_back(grad);
  }
  return out;
}

// Combines two partial results of the reduction that foreach_norm_reduce makes.
double combine(double a, double b, double norm_type) {
  if (norm_type != kInf) return a + b;
  return (std::isnan(a) || std::isnan(b)) ? std::numeric_limits<double>::quiet_NaN() : std::max(a, b);
}

// (sum |x|^p)^(1/p) from the sum (the max itself for infinity), on the host or the device.
double root(double sum, double p) {
  if (p == kInf || p == 1.0) return sum;
  return p == 2.0 ? std::sqrt(sum) : std::pow(sum, 1.0 / p);
}
Tensor root(const Tensor& sum, double p) {
  if (p == kInf || p == 1.0) return sum;
  return p == 2.0 ? sum.sqrt() : sum.pow(1.0 / p);
}

// The norm of gradients that all sit on one device, clipped without reading anything back:
// torch's foreach clip_grad_norm_, where the factor min(max_norm / (norm + 1e-6), 1) stays a
// device scalar (multiplying by 1 leaves every value, NaN included, as it was). The contiguous
// gradients go through the foreach ops, the others through tensor ops, still on the device.
Tensor clip_on_device(const Grads& grads, Device device, double max_norm, double norm_type) {
  const TensorOptions f64 = TensorOptions(kFloat64).device(device);
  Tensor sum = grads.contiguous.empty() ? zeros({}, f64)
                                        : foreach_norm_reduce(grads.contiguous[0].second, norm_type, device);
  for (const Tensor& g : grads.other) {
    // maximum keeps a NaN, as the infinity norm's reduction does.
    if (norm_type == kInf) sum = maximum(sum, g.abs().amax().to(kFloat64));
    else sum = sum.add(g.norm(norm_type).to(kFloat64).pow(norm_type));
  }
  const Tensor norm = root(sum, norm_type);
  const Tensor coef = full({}, max_norm, f64).div(norm.add(1e-6)).clamp({}, 1.0);
  if (!grads.contiguous.empty()) foreach_mul_(grads.contiguous[0].second, coef);
  for (Tensor g : grads.other) g.mul_(coef.to(g.dtype()));
  return norm;
}

void check_clip_arguments(const char* fn, double max_norm, double norm_type) {
  LOOM_CHECK(max_norm >= 0, fn, ": max_norm must be >= 0, got ", max_norm);
  LOOM_CHECK(norm_type > 0, fn, ": norm_type must be > 0 or infinity, got ", norm_type);
}

}  // namespace

Tensor clip_grad_norm_on_device_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  constexpr const char* kFn = "clip_grad_norm_on_device_";
  check_clip_arguments(kFn, max_norm, norm_type);
  NoGradGuard no_grad;
  const Grads grads = collect_grads(params, kFn);  // every parameter defined
  if (grads.empty()) return Tensor();
  const Device device = grads.contiguous.empty() ? grads.other[0].device() : grads.contiguous[0].first;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& grad = params[i].grad();
    LOOM_CHECK(!grad.defined() || grad.device() == device, kFn, ": the gradients are on ", device, " and ",
               grad.device(), " (parameter ", i, "); the device form takes gradients on one device");
  }
  return clip_on_device(grads, device, max_norm, norm_type);
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  check_clip_arguments("clip_grad_norm_", max_norm, norm_type);
  NoGradGuard no_grad;
  const Grads grads = collect_grads(params, "clip_grad_norm_");
  if (grads.empty()) return 0.0;
  if (grads.other.empty() && grads.contiguous.size() == 1 && grads.contiguous[0].first.is_cuda() &&
      !error_if_nonfinite)
    // The one synchronisation of this path: the norm is returned as a double (torch's .item()).
    return clip_on_device(grads, grads.contiguous[0].first, max_norm, norm_type).to(kCPU).item<double>();

  // Each device's sum read back (no wait on the CPU), then the others', in order.
  double sum = 0;
  for (const auto& [device, list] : grads.contiguous)
    sum = combine(sum, foreach_norm_reduce(list, norm_type, device).to(kCPU).item<double>(), norm_type);
  for (const Tensor& g : grads.other) {
    const double part = norm_type == kInf ? g.abs().max().to(kCPU).item<double>()
                                          : std::pow(g.norm(norm_type).to(kCPU).item<double>(), norm_type);
    sum = combine(sum, part, norm_type);
  }
  const double total = root(sum, norm_type);
  LOOM_CHECK(!error_if_nonfinite || std::isfinite(total), "clip_grad_norm_: the total norm of order ",
             norm_type, " of the gradients is ", total,
             ", so they cannot be clipped; to scale them by the non-finite norm anyway, pass "
             "error_if_nonfinite = false");

  const double coef = max_norm / (total + 1e-6);
  if (coef >= 1.0) return total;  // torch multiplies by min(coef, 1): nothing to do
  for (const auto& [device, list] : grads.contiguous)
    foreach_mul_(list, full({}, coef, TensorOptions(kFloat64).device(device)));
  for (Tensor g : grads.other) g.mul_(coef);
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  LOOM_CHECK(clip_value >= 0, "clip_grad_value_: clip_value must be >= 0, got ", clip_value);
  NoGradGuard no_grad;
  const Grads grads = collect_grads(params, "clip_grad_value_");
  auto clamp_span = [clip_value](auto* x, int64_t begin, int64_t end) {
    using T = std::remove_pointer_t<decltype(x)>;
    const T hi = static_cast<T>(clip_value), lo = -hi;
    // Written so that a NaN element fails both comparisons and stays NaN (torch's clamp).
    for (int64_t i = begin; i < end; ++i) {
      const T v = x[i] < lo ? lo : x[i];
      x[i] = v > hi ? hi : v;
    }
  };
  for (const auto& entry : grads.contiguous) {
    // Not a structured binding: the lambda below captures the list, which clang before 16 refuses.
    const auto& list = entry.second;
    if (!entry.first.is_cpu()) {
      for (Tensor g : list) g.clamp_(-clip_value, clip_value);
      continue;
    }
    // One parallel range over all CPU gradients (ops/cpu/flat_range.h).
    std::vector<int64_t> numels;
    for (const Tensor& g : list) numels.push_back(g.numel());
    cpu::FlatRange(numels).parallel_visit([&](size_t k, int64_t begin, int64_t end) {
      const Tensor& g = list[k];
      if (g.dtype() == kFloat32)
        clamp_span(g.data_ptr<float>(), begin, end);
      else
        clamp_span(g.data_ptr<double>(), begin, end);
    });
    // Written through raw pointers: the version counters must still record the change.
    for (const Tensor& g : list) g.storage()->bump_version();
  }
  for (Tensor g : grads.other) g.clamp_(-clip_value, clip_value);
}

}  // namespace loom::nn
