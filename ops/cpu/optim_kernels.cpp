/*
 * CPU kernels of the multi-tensor optimizer ops (ops/optim_ops.h). Each element's update is
 * computed in registers by one loop over raw pointers, specialised at compile time on the
 * terms in use, and all the tensors' elements are processed in one parallel range
 * (flat_range.h), so results do not depend on the thread count; each share runs through
 * with_vector_isa (AVX2 code in portable builds). These are the loops nn::Adam,
 * nn::SGD and nn::clip_grad_norm_ ran before the ops existed, moved here unchanged: CPU
 * training stays byte-identical.
 */
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/flat_range.h"
#include "ops/cpu/vector_isa.h"
#include "ops/dispatch.h"
#include "ops/optim_ops.h"

namespace loom::cpu {

namespace {

// Calls f(std::integral_constant<unsigned, terms>{}) for terms < kCount: a chain of direct
// calls, which with_vector_isa's flatten inlines and compiles for its ISA (through a table of
// function pointers it could not).
template <unsigned kCount, class F>
void visit_variant(unsigned terms, const F& f) {
  [&]<unsigned... kTerms>(std::integer_sequence<unsigned, kTerms...>) {
    (void)((terms == kTerms ? (f(std::integral_constant<unsigned, kTerms>{}), true) : false) || ...);
  }
  (std::make_integer_sequence<unsigned, kCount>{});
}

std::vector<int64_t> numels_of(const std::vector<Tensor>& tensors) {
  std::vector<int64_t> numels;
  numels.reserve(tensors.size());
  for (const Tensor& t : tensors) numels.push_back(t.numel());
  return numels;
}

// ---- Adam / AdamW --------------------------------------------------------------------------

enum AdamTerm : unsigned {
  kDecoupled = 1,  // AdamW's p *= 1 - lr * weight_decay
  kL2 = 2,         // Adam's g += weight_decay * p
  kAmsgrad = 4,
  kNumAdamVariants = 8,
};

// One tensor's share of a fused step.
struct AdamItem {
  void* param;
  const void* grad;
  void* exp_avg;
  void* exp_avg_sq;
  void* max_exp_avg_sq;  // null without amsgrad
  AdamStepFactors factors;
};

// Square roots of x[0, n) in place, correctly rounded. This file is compiled with
// -fno-math-errno (ops/CMakeLists.txt): with errno to set for negative inputs GCC keeps
// std::sqrt scalar; without, the loop becomes the hardware's vector square root for whatever
// ISA it is compiled or dispatched for.
template <class T>
void sqrt_in_place(T* __restrict x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::sqrt(x[i]);
}

// Elements per tile: the loop runs in three passes over a tile (moments, square roots,
// parameter), small enough that the second and third passes read from L1.
constexpr int64_t kTile = 256;

template <class T, unsigned kTerms>
void adam_loop(const AdamItem& item, const AdamStepOptions& h, int64_t begin, int64_t end) {
  T* __restrict p = static_cast<T*>(item.param);
  const T* __restrict g = static_cast<const T*>(item.grad);
  T* __restrict m = static_cast<T*>(item.exp_avg);
  T* __restrict v = static_cast<T*>(item.exp_avg_sq);
  T* __restrict v_max = static_cast<T*>(item.max_exp_avg_sq);
  const T sign = h.maximize ? T(-1) : T(1);  // multiplying by -1 is an exact negation
  const T decay = static_cast<T>(1.0 - h.lr * h.weight_decay), wd = static_cast<T>(h.weight_decay);
  const T b1 = static_cast<T>(h.beta1), one_minus_b1 = static_cast<T>(1.0 - h.beta1);
  const T b2 = static_cast<T>(h.beta2), one_minus_b2 = static_cast<T>(1.0 - h.beta2);
  const T eps = static_cast<T>(h.eps), inv_bc2_sqrt = static_cast<T>(item.factors.inv_bias_corr2_sqrt);
  const T neg_step_size = static_cast<T>(-item.factors.step_size);
  alignas(64) T root[kTile];
  for (int64_t t0 = begin; t0 < end; t0 += kTile) {
    const int64_t n = std::min(kTile, end - t0);
    T* __restrict pt = p + t0;
    const T* __restrict gt = g + t0;
    T* __restrict mt = m + t0;
    T* __restrict vt = v + t0;
    for (int64_t i = 0; i < n; ++i) {
      T gi = sign * gt[i];
      if constexpr ((kTerms & kDecoupled) != 0) pt[i] = pt[i] * decay;
      if constexpr ((kTerms & kL2) != 0) gi = gi + wd * pt[i];
      mt[i] = mt[i] * b1 + one_minus_b1 * gi;
      const T vi = vt[i] * b2 + one_minus_b2 * gi * gi;
      vt[i] = vi;
      if constexpr ((kTerms & kAmsgrad) != 0) {
        const T old = v_max[t0 + i];
        // torch.maximum: a NaN in either operand wins.
        const T larger = (vi > old || vi != vi) ? vi : old;
        v_max[t0 + i] = larger;
        root[i] = larger;
      } else {
        root[i] = vi;
      }
    }
    sqrt_in_place(root, n);
    for (int64_t i = 0; i < n; ++i) pt[i] = pt[i] + neg_step_size * mt[i] / (root[i] * inv_bc2_sqrt + eps);
  }
}

// GradScaler's flag of the capturable forms: a nonzero found_inf skips the whole step.
bool skipped(const Tensor& found_inf) {
  return found_inf.defined() && found_inf.data_ptr<float>()[0] != 0.0f;
}

// The step counts, lr and found_inf of the capturable form live in CPU memory here: the kernel
// reads them as it runs, like the CUDA one, and then takes the host path.
void fused_adam_kernel(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                       const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                       const std::vector<Tensor>& max_exp_avg_sqs,
                       const std::vector<AdamStepFactors>& host_factors,
                       const std::vector<Tensor>& step_counts, const Tensor& lr, const Tensor& found_inf,
                       const AdamStepOptions& host_options) {
  if (skipped(found_inf)) return;
  AdamStepOptions options = host_options;
  if (lr.defined()) options.lr = lr.data_ptr<double>()[0];
  std::vector<AdamStepFactors> counted;
  for (const Tensor& count : step_counts)
    counted.push_back(adam_step_factors(options, ++count.data_ptr<int64_t>()[0]));
  const std::vector<AdamStepFactors>& factors = step_counts.empty() ? host_factors : counted;
  unsigned terms = 0;
  if (options.decoupled)
    terms |= kDecoupled;
  else if (options.weight_decay != 0)
    terms |= kL2;
  if (options.amsgrad) terms |= kAmsgrad;
  std::vector<AdamItem> items(params.size());
  for (size_t i = 0; i < params.size(); ++i)
    items[i] = {params[i].data_ptr(), grads[i].data_ptr(), exp_avgs[i].data_ptr(), exp_avg_sqs[i].data_ptr(),
                options.amsgrad ? max_exp_avg_sqs[i].data_ptr() : nullptr, factors[i]};
  FlatRange(numels_of(params)).parallel_visit([&](size_t k, int64_t begin, int64_t end) {
    with_vector_isa([&] {
      visit_variant<kNumAdamVariants>(terms, [&](auto kTerms) {
        if (params[k].dtype() == kFloat32)
          adam_loop<float, decltype(kTerms)::value>(items[k], options, begin, end);
        else
          adam_loop<double, decltype(kTerms)::value>(items[k], options, begin, end);
      });
    });
  });
}

// ---- SGD -----------------------------------------------------------------------------------

enum SgdTerm : unsigned {
  kWeightDecay = 1,
  kMomentum = 2,
  kFirstStep = 4,  // the momentum buffer starts as the first direction, not from zero
  kNesterov = 8,
  kNumSgdVariants = 16,
};

template <class T, unsigned kTerms>
void sgd_loop(const Tensor& param, const Tensor& grad, const Tensor* buffer, const SgdStepOptions& h,
              int64_t begin, int64_t end) {
  T* __restrict p = param.data_ptr<T>();
  const T* __restrict g = grad.data_ptr<T>();
  T* __restrict buf = buffer != nullptr ? buffer->data_ptr<T>() : nullptr;
  // Negation by multiplying with -1 is exact, so maximize costs no branch in the loop.
  const T sign = h.maximize ? T(-1) : T(1);
  const T wd = static_cast<T>(h.weight_decay), mom = static_cast<T>(h.momentum);
  [[maybe_unused]] const T keep = static_cast<T>(1.0 - h.dampening);
  const T neg_lr = static_cast<T>(-h.lr);
  for (int64_t i = begin; i < end; ++i) {
    T d = sign * g[i];
    if constexpr ((kTerms & kWeightDecay) != 0) d = d + wd * p[i];
    if constexpr ((kTerms & kMomentum) != 0) {
      T b;
      if constexpr ((kTerms & kFirstStep) != 0)
        b = d;
      else
        b = buf[i] * mom + keep * d;
      buf[i] = b;
      if constexpr ((kTerms & kNesterov) != 0)
        d = d + mom * b;
      else
        d = b;
    }
    p[i] = p[i] + neg_lr * d;
  }
}

void fused_sgd_kernel(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                      const std::vector<Tensor>& momentum_buffers, const Tensor& lr, const Tensor& found_inf,
                      const SgdStepOptions& host_options) {
  if (skipped(found_inf)) return;
  SgdStepOptions options = host_options;
  if (lr.defined()) options.lr = lr.data_ptr<double>()[0];  // the capturable form's, in CPU memory here
  unsigned terms = 0;
  if (options.weight_decay != 0) terms |= kWeightDecay;
  if (options.momentum != 0) {
    terms |= kMomentum;
    if (options.first_step) terms |= kFirstStep;
    if (options.nesterov) terms |= kNesterov;
  }
  FlatRange(numels_of(params)).parallel_visit([&](size_t k, int64_t begin, int64_t end) {
    const Tensor* buffer = options.momentum != 0 ? &momentum_buffers[k] : nullptr;
    with_vector_isa([&] {
      visit_variant<kNumSgdVariants>(terms, [&](auto kTerms) {
        if (params[k].dtype() == kFloat32)
          sgd_loop<float, decltype(kTerms)::value>(params[k], grads[k], buffer, options, begin, end);
        else
          sgd_loop<double, decltype(kTerms)::value>(params[k], grads[k], buffer, options, begin, end);
      });
    });
  });
}

// ---- gradient norm and scaling -------------------------------------------------------------

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

// One value per fixed block, computed in parallel, then combined in block order.
template <NormKind kKind>
double norm_reduce(const std::vector<Tensor>& tensors, double p) {
  const FlatRange range(numels_of(tensors));
  std::vector<double> per_block(static_cast<size_t>(range.num_blocks()), 0.0);
  parallel_for(0, range.num_blocks(), 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      double acc = 0;
      range.visit_blocks(b, b + 1, [&](size_t k, int64_t begin, int64_t end) {
        const Tensor& t = tensors[k];
        const double part = t.dtype() == kFloat32
                                ? partial_norm<float, kKind>(t.data_ptr<float>(), begin, end, p)
                                : partial_norm<double, kKind>(t.data_ptr<double>(), begin, end, p);
        acc = combine<kKind>(acc, part);
      });
      per_block[static_cast<size_t>(b)] = acc;
    }
  });
  double total = 0;
  for (double v : per_block) total = combine<kKind>(total, v);
  return total;
}

void foreach_norm_reduce_kernel(const Tensor& out, const std::vector<Tensor>& tensors, double norm_type) {
  double total;
  if (norm_type == std::numeric_limits<double>::infinity())
    total = norm_reduce<NormKind::kInf>(tensors, norm_type);
  else if (norm_type == 2.0)
    total = norm_reduce<NormKind::kTwo>(tensors, norm_type);
  else if (norm_type == 1.0)
    total = norm_reduce<NormKind::kOne>(tensors, norm_type);
  else
    total = norm_reduce<NormKind::kPow>(tensors, norm_type);
  *out.data_ptr<double>() = total;
}

template <class T>
void scale_span(T* x, int64_t begin, int64_t end, double scale) {
  const T c = static_cast<T>(scale);
  for (int64_t i = begin; i < end; ++i) x[i] = x[i] * c;
}

void foreach_mul_kernel(const std::vector<Tensor>& tensors, const Tensor& scale) {
  const double s = *scale.data_ptr<double>();
  FlatRange(numels_of(tensors)).parallel_visit([&](size_t k, int64_t begin, int64_t end) {
    const Tensor& t = tensors[k];
    if (t.dtype() == kFloat32)
      scale_span(t.data_ptr<float>(), begin, end, s);
    else
      scale_span(t.data_ptr<double>(), begin, end, s);
  });
}

}  // namespace

void register_optim_kernels() {
  register_kernel<Op::fused_adam_>(DeviceType::CPU, fused_adam_kernel);
  register_kernel<Op::fused_sgd_>(DeviceType::CPU, fused_sgd_kernel);
  register_kernel<Op::foreach_norm_reduce>(DeviceType::CPU, foreach_norm_reduce_kernel);
  register_kernel<Op::foreach_mul_>(DeviceType::CPU, foreach_mul_kernel);
}

}  // namespace loom::cpu
