/*
 * Adam's and AdamW's step (see adam.h). Each element's update — decay, both moments, the
 * AMSGrad maximum, the bias-corrected step — is computed in registers by one loop over raw
 * pointers, specialised at compile time on the terms in use, and every parameter's elements
 * are processed in one parallel range (flat_parallel.h). The bias corrections depend on each
 * parameter's own step count (a parameter that had no gradient on some step lags behind, as
 * in torch), so they are computed per parameter, outside the loop.
 */
#include "nn/optim/adam.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <type_traits>
#include <utility>

#include "core/grad_mode.h"
#include "nn/optim/flat_parallel.h"
#include "nn/optim/step_common.h"
#include "ops/ops.h"

namespace loom::nn {

namespace {

using optim_detail::check_all_grads;
using optim_detail::FlatRange;
using optim_detail::fusable;
using optim_detail::group_flag;
using optim_detail::state_tensor;

constexpr const char* kStep = "step";
constexpr const char* kExpAvg = "exp_avg";
constexpr const char* kExpAvgSq = "exp_avg_sq";
constexpr const char* kMaxExpAvgSq = "max_exp_avg_sq";

enum AdamTerm : unsigned {
  kDecoupled = 1,  // AdamW's p *= 1 - lr * weight_decay
  kL2 = 2,         // Adam's g += weight_decay * p
  kAmsgrad = 4,
  kNumVariants = 8,
};

struct AdamHyper {
  double lr, beta1, beta2, eps, weight_decay;
  bool amsgrad, maximize;
};

// One parameter's share of a fused step, with the step-dependent factors already worked out.
struct AdamItem {
  void* param;
  const void* grad;
  void* exp_avg;
  void* exp_avg_sq;
  void* max_exp_avg_sq;  // null without amsgrad
  DType dtype;
  unsigned terms;
  const AdamHyper* hyper;
  double step_size;            // lr / (1 - beta1^t)
  double inv_bias_corr2_sqrt;  // 1 / sqrt(1 - beta2^t)
};

// Square roots of x[0, n) in place, correctly rounded. GCC does not vectorise std::sqrt (it
// keeps the errno path for negative inputs), so the hardware instruction is called directly
// where the target has it; the scalar tail gives the same, correctly rounded, results.
template <class T>
void sqrt_in_place(T* x, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_sqrt_ps(_mm512_loadu_ps(x + i)));
  } else {
    for (; i + 8 <= n; i += 8) _mm512_storeu_pd(x + i, _mm512_sqrt_pd(_mm512_loadu_pd(x + i)));
  }
#elif defined(__AVX__)
  if constexpr (std::is_same_v<T, float>) {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_sqrt_ps(_mm256_loadu_ps(x + i)));
  } else {
    for (; i + 4 <= n; i += 4) _mm256_storeu_pd(x + i, _mm256_sqrt_pd(_mm256_loadu_pd(x + i)));
  }
#endif
  for (; i < n; ++i) x[i] = std::sqrt(x[i]);
}

// Elements per tile: the loop runs in three passes over a tile (moments, square roots,
// parameter), small enough that the second and third passes read from L1.
constexpr int64_t kTile = 256;

template <class T, unsigned kTerms>
void adam_loop(const AdamItem& item, int64_t begin, int64_t end) {
  T* __restrict p = static_cast<T*>(item.param);
  const T* __restrict g = static_cast<const T*>(item.grad);
  T* __restrict m = static_cast<T*>(item.exp_avg);
  T* __restrict v = static_cast<T*>(item.exp_avg_sq);
  T* __restrict v_max = static_cast<T*>(item.max_exp_avg_sq);
  const AdamHyper& h = *item.hyper;
  const T sign = h.maximize ? T(-1) : T(1);  // multiplying by -1 is an exact negation
  const T decay = static_cast<T>(1.0 - h.lr * h.weight_decay), wd = static_cast<T>(h.weight_decay);
  const T b1 = static_cast<T>(h.beta1), one_minus_b1 = static_cast<T>(1.0 - h.beta1);
  const T b2 = static_cast<T>(h.beta2), one_minus_b2 = static_cast<T>(1.0 - h.beta2);
  const T eps = static_cast<T>(h.eps), inv_bc2_sqrt = static_cast<T>(item.inv_bias_corr2_sqrt);
  const T neg_step_size = static_cast<T>(-item.step_size);
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

using AdamLoop = void (*)(const AdamItem&, int64_t, int64_t);

template <class T, size_t... kTerms>
constexpr std::array<AdamLoop, kNumVariants> adam_loops(std::index_sequence<kTerms...>) {
  return {&adam_loop<T, static_cast<unsigned>(kTerms)>...};
}

constexpr auto kFloatLoops = adam_loops<float>(std::make_index_sequence<kNumVariants>());
constexpr auto kDoubleLoops = adam_loops<double>(std::make_index_sequence<kNumVariants>());

AdamHyper read_hyper(const ParamGroup& group, size_t g, const char* name) {
  AdamHyper h{group.option("lr"),
              group.option("beta1"),
              group.option("beta2"),
              group.option("eps"),
              group.option("weight_decay"),
              group_flag(group, "amsgrad", name, g),
              group_flag(group, "maximize", name, g)};
  LOOM_CHECK(h.lr >= 0, name, ": group ", g, " has an invalid learning rate lr=", h.lr, " (expected >= 0)");
  LOOM_CHECK(h.eps >= 0, name, ": group ", g, " has an invalid eps=", h.eps, " (expected >= 0)");
  LOOM_CHECK(h.beta1 >= 0 && h.beta1 < 1, name, ": group ", g, " has an invalid beta1=", h.beta1,
             " (expected in [0, 1))");
  LOOM_CHECK(h.beta2 >= 0 && h.beta2 < 1, name, ": group ", g, " has an invalid beta2=", h.beta2,
             " (expected in [0, 1))");
  LOOM_CHECK(h.weight_decay >= 0, name, ": group ", g, " has an invalid weight_decay=", h.weight_decay,
             " (expected >= 0)");
  return h;
}

template <class Options>
std::map<std::string, double> defaults_of(const Options& o) {
  return {{"lr", o.lr},
          {"beta1", o.beta1},
          {"beta2", o.beta2},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"amsgrad", o.amsgrad ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

// The same update with tensor ops, for parameters the fused loop cannot reach (GPU memory,
// non-contiguous views). Slower: one pass and one temporary per term.
void adam_by_ops(Tensor& p, const Tensor& grad, std::map<std::string, Tensor>& state, const AdamHyper& h,
                 bool decoupled, const AdamItem& factors, const char* name) {
  auto zeros_like_p = [&] { return zeros(p.sizes(), p.options()); };
  Tensor& m = state_tensor(state, kExpAvg, p, name, zeros_like_p);
  Tensor& v = state_tensor(state, kExpAvgSq, p, name, zeros_like_p);
  Tensor g = h.maximize ? grad.neg() : grad;
  if (decoupled)
    p.mul_(1.0 - h.lr * h.weight_decay);
  else if (h.weight_decay != 0)
    g = g.add(p, h.weight_decay);
  m.mul_(h.beta1).add_(g, 1.0 - h.beta1);
  v.mul_(h.beta2).add_(g.mul(g), 1.0 - h.beta2);
  Tensor second = v;
  if (h.amsgrad) {
    Tensor& v_max = state_tensor(state, kMaxExpAvgSq, p, name, zeros_like_p);
    v_max.copy_(v_max.maximum(v));
    second = v_max;
  }
  Tensor denom = second.sqrt().mul_(factors.inv_bias_corr2_sqrt).add_(h.eps);
  p.add_(m.div(denom), -factors.step_size);
}

}  // namespace

Adam::Adam(std::vector<ParamGroup> param_groups, std::map<std::string, double> defaults, bool decoupled)
    : Optimizer(std::move(param_groups), std::move(defaults)), decoupled_(decoupled) {
  for (size_t g = 0; g < this->param_groups().size(); ++g)
    read_hyper(this->param_groups()[g], g, decoupled_ ? "AdamW" : "Adam");
}

Adam::Adam(std::vector<ParamGroup> param_groups, AdamOptions options)
    : Adam(std::move(param_groups), defaults_of(options), false) {}

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam(std::vector<ParamGroup>{ParamGroup(std::move(params))}, defaults_of(options), false) {}

AdamW::AdamW(std::vector<ParamGroup> param_groups, AdamWOptions options)
    : Adam(std::move(param_groups), defaults_of(options), true) {}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : Adam(std::vector<ParamGroup>{ParamGroup(std::move(params))}, defaults_of(options), true) {}

void Adam::step() {
  const char* name = decoupled_ ? "AdamW" : "Adam";
  NoGradGuard no_grad;
  std::vector<ParamGroup>& groups = param_groups();
  std::vector<AdamHyper> hypers;
  hypers.reserve(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) hypers.push_back(read_hyper(groups[g], g, name));

  check_all_grads(groups, name);

  std::vector<AdamItem> items;
  std::vector<int64_t> numels;
  std::vector<Tensor> written;     // whose version counters the fused loop must bump
  std::vector<Tensor> contiguous;  // gradients copied to be contiguous, alive until the loop ran
  for (size_t g = 0; g < groups.size(); ++g) {
    const AdamHyper& h = hypers[g];
    for (size_t i = 0; i < groups[g].params.size(); ++i) {
      Tensor& p = groups[g].params[i];
      if (!p.grad().defined()) continue;
      const Tensor& grad = p.grad();
      ParamState& state = state_of(p);

      // The step count stays on the CPU (as torch's non-capturable Adam keeps it), so the
      // bias corrections are plain doubles whatever the parameter's device.
      auto step_it = state.find(kStep);
      if (step_it == state.end()) step_it = state.emplace(kStep, scalar_tensor(0, kInt64)).first;
      Tensor& step = step_it->second;
      LOOM_CHECK(step.is_cpu() && step.dtype() == kInt64 && step.numel() == 1, name,
                 ": state 'step' of parameter ", i, " of group ", g, " should be one int64 on the CPU, got ",
                 step.dtype(), " ", step.sizes(), " on ", step.device());
      const int64_t t = ++step.data_ptr<int64_t>()[0];
      step.storage()->bump_version();

      AdamItem item{};
      item.hyper = &h;
      item.step_size = h.lr / (1.0 - std::pow(h.beta1, static_cast<double>(t)));
      item.inv_bias_corr2_sqrt = 1.0 / std::sqrt(1.0 - std::pow(h.beta2, static_cast<double>(t)));
      if (!fusable(p)) {
        adam_by_ops(p, grad, state, h, decoupled_, item, name);
        continue;
      }

      Tensor g_data = grad.contiguous();
      if (!g_data.is_same(grad)) contiguous.push_back(g_data);
      auto zeros_like_p = [&] { return zeros(p.sizes(), p.options()); };
      Tensor& m = state_tensor(state, kExpAvg, p, name, zeros_like_p);
      Tensor& v = state_tensor(state, kExpAvgSq, p, name, zeros_like_p);
      item.param = p.data_ptr();
      item.grad = g_data.data_ptr();
      item.exp_avg = m.data_ptr();
      item.exp_avg_sq = v.data_ptr();
      item.dtype = p.dtype();
      written.push_back(p);
      written.push_back(m);
      written.push_back(v);
      if (decoupled_)
        item.terms |= kDecoupled;
      else if (h.weight_decay != 0)
        item.terms |= kL2;
      if (h.amsgrad) {
        Tensor& v_max = state_tensor(state, kMaxExpAvgSq, p, name, zeros_like_p);
        item.max_exp_avg_sq = v_max.data_ptr();
        item.terms |= kAmsgrad;
        written.push_back(v_max);
      }
      items.push_back(item);
      numels.push_back(p.numel());
    }
  }
  if (items.empty()) return;

  FlatRange(numels).parallel_visit([&](size_t k, int64_t begin, int64_t end) {
    const AdamItem& item = items[k];
    (item.dtype == kFloat32 ? kFloatLoops : kDoubleLoops)[item.terms](item, begin, end);
  });
  // The loop wrote through raw pointers; autograd must still see that these tensors changed.
  for (const Tensor& t : written) t.storage()->bump_version();
}

}  // namespace loom::nn
