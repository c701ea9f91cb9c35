/*
 * clip_grad_norm_ and clip_grad_value_ (see clip_grad.h). Clipping runs on every training
 * step over every gradient, so the CPU path reads all gradients in one parallel pass (one
 * pool wake-up for the whole model, flat_parallel.h) and scales them in a second only when
 * the norm is too large.
 */
#include "nn/optim/clip_grad.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/grad_mode.h"
#include "nn/optim/flat_parallel.h"
#include "ops/ops.h"

namespace loom::nn {

namespace {

using optim_detail::FlatRange;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Gradients of `params` that exist, split into those the raw loops can read and write
// (contiguous, on the CPU) and the rest.
struct Grads {
  std::vector<Tensor> fused;
  std::vector<Tensor> other;
  std::vector<int64_t> numels;  // of `fused`
};

Grads collect_grads(const std::vector<Tensor>& params, const char* fn) {
  Grads out;
  for (size_t i = 0; i < params.size(); ++i) {
    LOOM_CHECK(params[i].defined(), fn, ": parameter ", i, " is undefined");
    const Tensor& grad = params[i].grad();
    if (!grad.defined()) continue;
    LOOM_CHECK(grad.dtype() == kFloat32 || grad.dtype() == kFloat64, fn, ": the gradient of parameter ", i,
               " has dtype ", grad.dtype(), "; float32 and float64 gradients are supported");
    if (grad.is_cpu() && grad.is_contiguous()) {
      out.fused.push_back(grad);
      out.numels.push_back(grad.numel());
    } else {
      out.other.push_back(grad);
    }
  }
  return out;
}

enum class NormKind { kTwo, kOne, kInf, kPow };

// sum |x|^p over x[begin, end) (max |x| for kInf; NaN when any x is NaN), in float64.
template <class T, NormKind kKind>
double partial_norm(const T* x, int64_t begin, int64_t end, double p) {
  double acc = 0;
  if constexpr (kKind == NormKind::kTwo) {
#pragma omp simd reduction(+ : acc)
    for (int64_t i = begin; i < end; ++i) acc += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  } else if constexpr (kKind == NormKind::kOne) {
#pragma omp simd reduction(+ : acc)
    for (int64_t i = begin; i < end; ++i) acc += std::abs(static_cast<double>(x[i]));
  } else if constexpr (kKind == NormKind::kInf) {
    int nan = 0;
#pragma omp simd reduction(max : acc) reduction(| : nan)
    for (int64_t i = begin; i < end; ++i) {
      const double a = std::abs(static_cast<double>(x[i]));
      acc = a > acc ? a : acc;
      nan |= a != a;
    }
    if (nan) acc = std::numeric_limits<double>::quiet_NaN();
  } else {
    for (int64_t i = begin; i < end; ++i) acc += std::pow(std::abs(static_cast<double>(x[i])), p);
  }
  return acc;
}

template <NormKind kKind>
double combine(double a, double b) {
  if constexpr (kKind == NormKind::kInf) {
    return (std::isnan(a) || std::isnan(b)) ? std::numeric_limits<double>::quiet_NaN() : std::max(a, b);
  } else {
    return a + b;
  }
}

// sum |x|^p (or max |x|) over all fused gradients: one value per fixed block, computed in
// parallel, then combined in block order.
template <NormKind kKind>
double fused_norm_sum(const Grads& grads, double p) {
  if (grads.fused.empty()) return 0;
  const FlatRange range(grads.numels);
  std::vector<double> per_block(static_cast<size_t>(range.num_blocks()), 0.0);
  parallel_for(0, range.num_blocks(), 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      double acc = 0;
      range.visit_blocks(b, b + 1, [&](size_t k, int64_t begin, int64_t end) {
        const Tensor& g = grads.fused[k];
        const double part = g.dtype() == kFloat32
                                ? partial_norm<float, kKind>(g.data_ptr<float>(), begin, end, p)
                                : partial_norm<double, kKind>(g.data_ptr<double>(), begin, end, p);
        acc = combine<kKind>(acc, part);
      });
      per_block[static_cast<size_t>(b)] = acc;
    }
  });
  double total = 0;
  for (double v : per_block) total = combine<kKind>(total, v);
  return total;
}

template <NormKind kKind>
double norm_sum(const Grads& grads, double p) {
  double total = fused_norm_sum<kKind>(grads, p);
  for (const Tensor& g : grads.other) {
    double part;
    if constexpr (kKind == NormKind::kInf)
      part = g.abs().max().to(kCPU).item<double>();
    else
      part = std::pow(g.norm(p).to(kCPU).item<double>(), p);
    total = combine<kKind>(total, part);
  }
  return total;
}

// Applies f(T* x, begin, end) to every fused gradient in one parallel range and `other(g)` to
// each of the others; bumps every gradient's version.
template <class Fused, class Other>
void update_grads(const Grads& grads, const Fused& f, const Other& other) {
  if (!grads.fused.empty()) {
    FlatRange(grads.numels).parallel_visit([&](size_t k, int64_t begin, int64_t end) {
      const Tensor& g = grads.fused[k];
      if (g.dtype() == kFloat32)
        f(g.data_ptr<float>(), begin, end);
      else
        f(g.data_ptr<double>(), begin, end);
    });
    // Written through raw pointers: the version counters must still record the change.
    for (const Tensor& g : grads.fused) g.storage()->bump_version();
  }
  for (Tensor g : grads.other) other(g);
}

}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  LOOM_CHECK(max_norm >= 0, "clip_grad_norm_: max_norm must be >= 0, got ", max_norm);
  LOOM_CHECK(norm_type > 0, "clip_grad_norm_: norm_type must be > 0 or infinity, got ", norm_type);
  NoGradGuard no_grad;
  const Grads grads = collect_grads(params, "clip_grad_norm_");
  if (grads.fused.empty() && grads.other.empty()) return 0.0;

  double total;
  if (norm_type == kInf) {
    total = norm_sum<NormKind::kInf>(grads, norm_type);
  } else if (norm_type == 2.0) {
    total = std::sqrt(norm_sum<NormKind::kTwo>(grads, norm_type));
  } else if (norm_type == 1.0) {
    total = norm_sum<NormKind::kOne>(grads, norm_type);
  } else {
    total = std::pow(norm_sum<NormKind::kPow>(grads, norm_type), 1.0 / norm_type);
  }
  LOOM_CHECK(!error_if_nonfinite || std::isfinite(total), "clip_grad_norm_: the total norm of order ",
             norm_type, " of the gradients is ", total,
             ", so they cannot be clipped; to scale them by the non-finite norm anyway, pass "
             "error_if_nonfinite = false");

  const double coef = max_norm / (total + 1e-6);
  if (coef >= 1.0) return total;  // torch multiplies by min(coef, 1): nothing to do
  update_grads(
      grads,
      [coef](auto* x, int64_t begin, int64_t end) {
        using T = std::remove_pointer_t<decltype(x)>;
        const T c = static_cast<T>(coef);
        for (int64_t i = begin; i < end; ++i) x[i] = x[i] * c;
      },
      [coef](Tensor& g) { g.mul_(coef); });
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  LOOM_CHECK(clip_value >= 0, "clip_grad_value_: clip_value must be >= 0, got ", clip_value);
  NoGradGuard no_grad;
  const Grads grads = collect_grads(params, "clip_grad_value_");
  update_grads(
      grads,
      [clip_value](auto* x, int64_t begin, int64_t end) {
        using T = std::remove_pointer_t<decltype(x)>;
        const T hi = static_cast<T>(clip_value), lo = -hi;
        // Written so that a NaN element fails both comparisons and stays NaN (torch's clamp).
        for (int64_t i = begin; i < end; ++i) {
          const T v = x[i] < lo ? lo : x[i];
          x[i] = v > hi ? hi : v;
        }
      },
      [clip_value](Tensor& g) { g.clamp_(-clip_value, clip_value); });
}

}  // namespace loom::nn
