/*
 * SGD's step (see sgd.h). The update of each element — weight decay, momentum buffer,
 * Nesterov look-ahead, the parameter itself — is computed in registers by one loop over raw
 * pointers, specialised at compile time on which of those terms are on, and every
 * parameter's elements are processed in one parallel range (flat_parallel.h).
 */
#include "nn/optim/sgd.h"

#include <array>
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

constexpr const char* kName = "SGD";
constexpr const char* kBuffer = "momentum_buffer";

// Which terms of the update a loop computes.
enum SgdTerm : unsigned {
  kWeightDecay = 1,
  kMomentum = 2,
  kFirstStep = 4,  // the momentum buffer starts as the first direction, not from zero
  kNesterov = 8,
  kNumVariants = 16,
};

struct SgdHyper {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, maximize;
};

// One parameter's share of a fused step.
struct SgdItem {
  void* param;
  const void* grad;
  void* buffer;  // null without momentum
  DType dtype;
  unsigned terms;
  const SgdHyper* hyper;
};

template <class T, unsigned kTerms>
void sgd_loop(const SgdItem& item, int64_t begin, int64_t end) {
  T* __restrict p = static_cast<T*>(item.param);
  const T* __restrict g = static_cast<const T*>(item.grad);
  T* __restrict buf = static_cast<T*>(item.buffer);
  const SgdHyper& h = *item.hyper;
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

using SgdLoop = void (*)(const SgdItem&, int64_t, int64_t);

template <class T, size_t... kTerms>
constexpr std::array<SgdLoop, kNumVariants> sgd_loops(std::index_sequence<kTerms...>) {
  return {&sgd_loop<T, static_cast<unsigned>(kTerms)>...};
}

constexpr auto kFloatLoops = sgd_loops<float>(std::make_index_sequence<kNumVariants>());
constexpr auto kDoubleLoops = sgd_loops<double>(std::make_index_sequence<kNumVariants>());

SgdHyper read_hyper(const ParamGroup& group, size_t g) {
  SgdHyper h{group.option("lr"),
             group.option("momentum"),
             group.option("dampening"),
             group.option("weight_decay"),
             group_flag(group, "nesterov", kName, g),
             group_flag(group, "maximize", kName, g)};
  LOOM_CHECK(h.lr >= 0, kName, ": group ", g, " has an invalid learning rate lr=", h.lr,
             " (expected >= 0; SGDOptions.lr has no default and must be given)");
  LOOM_CHECK(h.momentum >= 0, kName, ": group ", g, " has an invalid momentum ", h.momentum,
             " (expected >= 0)");
  LOOM_CHECK(h.dampening >= 0, kName, ": group ", g, " has an invalid dampening ", h.dampening,
             " (expected >= 0)");
  LOOM_CHECK(h.weight_decay >= 0, kName, ": group ", g, " has an invalid weight_decay ", h.weight_decay,
             " (expected >= 0)");
  LOOM_CHECK(!h.nesterov || (h.momentum > 0 && h.dampening == 0), kName, ": group ", g,
             ": Nesterov momentum requires momentum > 0 and dampening = 0, got momentum=", h.momentum,
             ", dampening=", h.dampening);
  return h;
}

std::map<std::string, double> defaults_of(const SGDOptions& o) {
  return {{"lr", o.lr},
          {"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

// The same update with tensor ops, for parameters the fused loop cannot reach (GPU memory,
// non-contiguous views). Slower: one pass and one temporary per term.
void sgd_by_ops(Tensor& p, const Tensor& grad, std::map<std::string, Tensor>& state, const SgdHyper& h) {
  Tensor d = h.maximize ? grad.neg() : grad;
  if (h.weight_decay != 0) d = d.add(p, h.weight_decay);
  if (h.momentum != 0) {
    if (!state.contains(kBuffer)) {
      state[kBuffer] = d.clone();
    } else {
      Tensor& buf = state_tensor(state, kBuffer, p, kName, [] { return Tensor(); });
      buf.mul_(h.momentum).add_(d, 1.0 - h.dampening);
    }
    const Tensor& buf = state[kBuffer];
    d = h.nesterov ? d.add(buf, h.momentum) : buf;
  }
  p.add_(d, -h.lr);
}

}  // namespace

SGD::SGD(std::vector<ParamGroup> param_groups, SGDOptions options)
    : Optimizer(std::move(param_groups), defaults_of(options)), options_(options) {
  for (size_t g = 0; g < this->param_groups().size(); ++g) read_hyper(this->param_groups()[g], g);
}

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : SGD(std::vector<ParamGroup>{ParamGroup(std::move(params))}, options) {}

void SGD::step() {
  NoGradGuard no_grad;
  std::vector<ParamGroup>& groups = param_groups();
  std::vector<SgdHyper> hypers;
  hypers.reserve(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) hypers.push_back(read_hyper(groups[g], g));

  check_all_grads(groups, kName);

  std::vector<SgdItem> items;
  std::vector<int64_t> numels;
  std::vector<Tensor> written;     // whose version counters the fused loop must bump
  std::vector<Tensor> contiguous;  // gradients copied to be contiguous, alive until the loop ran
  for (size_t g = 0; g < groups.size(); ++g) {
    const SgdHyper& h = hypers[g];
    for (size_t i = 0; i < groups[g].params.size(); ++i) {
      Tensor& p = groups[g].params[i];
      if (!p.grad().defined()) continue;
      const Tensor& grad = p.grad();
      if (!fusable(p)) {
        ParamState scratch;
        sgd_by_ops(p, grad, h.momentum != 0 ? state_of(p) : scratch, h);
        continue;
      }
      Tensor g_data = grad.contiguous();
      if (!g_data.is_same(grad)) contiguous.push_back(g_data);
      SgdItem item{p.data_ptr(), g_data.data_ptr(), nullptr, p.dtype(), 0, &h};
      if (h.weight_decay != 0) item.terms |= kWeightDecay;
      if (h.momentum != 0) {
        item.terms |= kMomentum;
        ParamState& state = state_of(p);
        if (!state.contains(kBuffer)) item.terms |= kFirstStep;
        // On the first step the loop writes every element, so the buffer needs no zeroing.
        Tensor& buf = state_tensor(state, kBuffer, p, kName, [&] { return empty(p.sizes(), p.options()); });
        item.buffer = buf.data_ptr();
        if (h.nesterov) item.terms |= kNesterov;
        written.push_back(buf);
      }
      items.push_back(item);
      numels.push_back(p.numel());
      written.push_back(p);
    }
  }
  if (items.empty()) return;

  FlatRange(numels).parallel_visit([&](size_t k, int64_t begin, int64_t end) {
    const SgdItem& item = items[k];
    (item.dtype == kFloat32 ? kFloatLoops : kDoubleLoops)[item.terms](item, begin, end);
  });
  // The loop wrote through raw pointers; autograd must still see that these tensors changed.
  for (const Tensor& t : written) t.storage()->bump_version();
}

}  // namespace loom::nn
