/*
 * Loss functions, as torch.nn.functional (loom::nn::functional) and as modules that hold their
 * options (loom::nn::CrossEntropyLoss, ...), with torch 1.13's semantics and defaults.
 *
 * They are composites of recorded ops, so autograd differentiates them with no formulas of
 * their own. The reduction is loom's Reduction (Mean, the default, Sum or None); kl_div takes
 * KLDivReduction, which adds torch's "batchmean" (the mathematically correct KL per sample).
 *
 * Unlike torch, the elementwise losses (mse, l1, smooth_l1, huber, the binary cross entropies
 * and kl_div) do not broadcast the target: torch only warns about a mismatch, which is almost
 * always a bug ([N, 1] against [N] silently becomes [N, N]), so here it throws, naming both
 * shapes.
 */
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "nn/module.h"
#include "ops/nn_ops.h"

namespace loom::nn {

// torch's reduction="batchmean" exists only for kl_div: the summed loss divided by the batch
// size (input.size(0)), which is the KL divergence per sample; Mean divides by every element.
enum class KLDivReduction { None, Mean, Sum, BatchMean };

struct CrossEntropyOptions {
  Tensor weight = {};              // [C] rescaling of each class, or undefined
  int64_t ignore_index = -100;     // class-index targets equal to it count for nothing
  double label_smoothing = 0.0;    // in [0, 1]: mixes the target with the uniform distribution
  Reduction reduction = Reduction::Mean;
};

struct NLLLossOptions {
  Tensor weight = {};
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::Mean;
};

struct BCEWithLogitsLossOptions {
  Tensor weight = {};      // rescales each element's loss; broadcast to the input's shape
  Tensor pos_weight = {};  // weight of the positive term, broadcast along the last dim ([C])
  Reduction reduction = Reduction::Mean;
};

struct BCELossOptions {
  Tensor weight = {};  // rescales each element's loss; broadcast to the input's shape
  Reduction reduction = Reduction::Mean;
};

struct KLDivLossOptions {
  KLDivReduction reduction = KLDivReduction::Mean;
  bool log_target = false;  // the target holds log-probabilities
};

namespace functional {

// input: logits [C], [N, C] or [N, C, d1, ...]. target either
//  - class indices, int64 of input's shape without the class dim ([], [N], [N, d1, ...]), or
//  - class probabilities, floating, of input's exact shape (ignore_index must then be
//    negative, as in torch; label smoothing mixes the probabilities with the uniform one).
// Returns a 0-dim loss, or the per-element loss of the target's batch shape for None.
// Throws loom::Error on shapes that do not fit (naming both), a non-int64 index target,
// a weight that is not [C], or label_smoothing outside [0, 1].
Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyOptions& options = {});

// input: log-probabilities [C], [N, C] or [N, C, d1, ...]; target: int64 class indices of
// input's shape without the class dim. The mean divides by the summed weights of the targets
// that are not ignored. Throws as cross_entropy.
Tensor nll_loss(const Tensor& input, const Tensor& target, const NLLLossOptions& options = {});

// (input - target)^2, reduced. input floating, target of the same shape (throws otherwise).
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

// |input - target|, reduced. input floating, target of the same shape (throws otherwise).
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

// With d = input - target: 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (Girshick's
// Fast R-CNN loss); beta = 0 is l1_loss, as torch. Throws if beta < 0 or the shapes differ.
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                      double beta = 1.0);

// With d = input - target: 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta), which is
// delta * smooth_l1_loss(beta = delta). Throws if delta <= 0 or the shapes differ.
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                  double delta = 1.0);

// Binary cross entropy of probabilities: -weight (y log x + (1 - y) log(1 - x)), each log
// clamped at -100 as torch does, so that x = 0 or 1 gives a finite loss. The gradient is the
// clamped loss's own: (x - y) / (x (1 - x)) inside, 0 where a log is clamped (torch instead caps
// x (1 - x) at 1e-12). Prefer binary_cross_entropy_with_logits, which is exact for saturated
// logits. input and target floating of the same shape, input in [0, 1] (checked: throws,
// naming the range found, which reads the tensor back from its device); weight broadcastable.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                            Reduction reduction = Reduction::Mean);
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const BCELossOptions& options);

// Binary cross entropy of sigmoid(input) against target in [0, 1], computed from the logits
// without overflow: (1 - y) x + (1 + (p - 1) y) softplus(-x), times weight (p = pos_weight).
// input and target floating of the same shape; weight broadcastable to it; pos_weight
// broadcastable along the last dim (usually [C]). Throws on shapes that do not fit.
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                                        const Tensor& pos_weight = {}, Reduction reduction = Reduction::Mean);
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BCEWithLogitsLossOptions& options);

// KL(target || exp(input)) pointwise, input holding log-probabilities:
//   target * (log target - input)  (0 where target is 0), or with log_target
//   exp(target) * (target - input).
// Mean averages over all elements, as torch (which warns that BatchMean is usually meant).
// input and target floating of the same shape (throws otherwise).
Tensor kl_div(const Tensor& input, const Tensor& target, KLDivReduction reduction = KLDivReduction::Mean,
              bool log_target = false);
Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction, bool log_target = false);

}  // namespace functional

// ---- modules ---------------------------------------------------------------------------------
// Each holds its options; a class weight (or pos_weight) is registered as a buffer, as torch
// does, so that to(device) moves it and state_dict() holds it. forward(input, target) and
// operator()(input, target) call the functional form.

class CrossEntropyLoss : public Module {
 public:
  explicit CrossEntropyLoss(CrossEntropyOptions options = {});
  using Module::forward;
  using Module::operator();
  Tensor forward(const Tensor& input, const Tensor& target);
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  const CrossEntropyOptions& options() const { return options_; }

 private:
  CrossEntropyOptions options_;
};

class NLLLoss : public Module {
 public:
  explicit NLLLoss(NLLLossOptions options = {});
  using Module::forward;
  using Module::operator();
  Tensor forward(const Tensor& input, const Tensor& target);
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  const NLLLossOptions& options() const { return options_; }

 private:
  NLLLossOptions options_;
};

class MSELoss : public Module {
 public:
  explicit MSELoss(Reduction reduction = Reduction::Mean) : reduction_(reduction) {}
  using Module::forward;
  using Module::operator();
  Tensor forward(const Tensor& input, const Tensor& target);
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  Reduction reduction() const { return reduction_; }

 private:
  Reduction reduction_;
};

class L1Loss : public Module {
 public:
  explicit L1Loss(Reduction reduction = Reduction::Mean) : reduction_(reduction) {}
  using Module::forward;
  using Module::operator();
  Tensor forward(const Tensor& input, const Tensor& target);
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  Reduction reduction() const { return reduction_; }

 private:
  Reduction reduction_;
};

// Throws if beta < 0.
class SmoothL1Loss : public Module {
 public:
  explicit SmoothL1Loss(Reduction reduction = Reduction::Mean, double beta = 1.0);
  using Module::forward;
  using Module::operator();
  Tensor forward(const Tensor& input, const Tensor& target);
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  Reduction reduction() const { return reduction_; }
  double beta() const { return beta_; }

 private:
  Reduction reduction_;
  double beta_;
};

// Throws if delta <= 0.
class HuberLoss : public Module {
 public:
  explicit HuberLoss(Reduction reduction = Reduction::Mean, double delta = 1.0);
  using Module::forward;
  using Module::operator();
  Tensor forward(const Tensor& input, const Tensor& target);
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  Reduction reduction() const { return reduction_; }
  double delta() const { return delta_; }

 private:
  Reduction reduction_;
  double delta_;
};

class BCELoss : public Module {
 public:
  explicit BCELoss(BCELossOptions options = {});
  using Module::forward;
  using Module::operator();
  Tensor forward(const Tensor& input, const Tensor& target);
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  const BCELossOptions& options() const { return options_; }

 private:
  BCELossOptions options_;
};

class BCEWithLogitsLoss : public Module {
 public:
  explicit BCEWithLogitsLoss(BCEWithLogitsLossOptions options = {});
  using Module::forward;
  using Module::operator();
  Tensor forward(const Tensor& input, const Tensor& target);
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  const BCEWithLogitsLossOptions& options() const { return options_; }

 private:
  BCEWithLogitsLossOptions options_;
};

class KLDivLoss : public Module {
 public:
  explicit KLDivLoss(KLDivLossOptions options = {}) : options_(options) {}
  using Module::forward;
  using Module::operator();
  Tensor forward(const Tensor& input, const Tensor& target);
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  const KLDivLossOptions& options() const { return options_; }

 private:
  KLDivLossOptions options_;
};

}  // namespace loom::nn
