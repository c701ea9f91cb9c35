/*
 * Knowledge distillation (Hinton, Vinyals and Dean, "Distilling the Knowledge in a Neural
 * Network", 2015): a small student is trained on a mix of the true labels and the softened
 * output distribution of a large, already trained teacher. The teacher's soft targets say how
 * similar the wrong classes are ("a shirt looks more like a T-shirt than like a sandal"), which
 * the one-hot labels do not; a student trained on them usually ends up more accurate than the
 * same student trained on the labels alone, and it is the usual companion of quantization when
 * a model must shrink (docs/distillation.md).
 *
 *   quant::Teacher teacher(big_model);                 // eval(), runs without recording
 *   quant::DistillationLoss kd({.temperature = 4.0, .alpha = 0.9});
 *   Tensor loss = kd(student(x), teacher(x), y);
 *   loss.backward();                                   // gradients reach the student only
 */
#pragma once

#include <memory>

#include "core/tensor.h"
#include "nn/module.h"

namespace loom::quant {

struct DistillationOptions {
  double temperature = 4.0;  // T > 0: softens both distributions; Hinton et al. use 2 to 20
  double alpha = 0.9;        // in [0, 1]: the weight of the distillation term, 1 - alpha that of CE
};

// The knowledge-distillation loss, a 0-dim tensor of the student's dtype:
//
//   (1 - alpha) * CE(s, y) + alpha * T^2 * KL(softmax(t / T) || softmax(s / T))
//
// with the KL divergence summed over classes and averaged over the batch (torch's
// reduction="batchmean", the usual recipe) and CE the mean cross entropy against the labels.
// The T^2 keeps the soft term's gradient, which scales as 1 / T^2, comparable to the hard
// term's as T changes.
//
// student_logits: floating [N, C]; teacher_logits: floating [N, C] (detached here: no gradient
// ever flows to the teacher; converted to the student's dtype when it differs); labels: Int64
// [N] class indices in [0, C). With alpha = 0 the result is exactly cross_entropy(s, y); with
// alpha = 1 the labels' dtype and shape are still checked but they do not enter the loss.
// Throws loom::Error (naming the shapes or values) when an input is undefined, the logits are
// not 2-D floating tensors of the same shape, labels are not Int64 [N], the tensors are on
// different devices, temperature <= 0 (or not finite), or alpha is outside [0, 1].
Tensor distillation_loss(const Tensor& student_logits, const Tensor& teacher_logits, const Tensor& labels,
                         const DistillationOptions& options = {});

// The loss as a module holding its options (as nn::KLDivLoss holds its own). It has no
// parameters or buffers. The options are checked on construction (throws as above).
class DistillationLoss : public nn::Module {
 public:
  explicit DistillationLoss(DistillationOptions options = {});
  using nn::Module::forward;
  using nn::Module::operator();
  // student, teacher: [N, C]; labels: Int64 [N] -> 0-dim loss. Throws as distillation_loss.
  Tensor forward(const Tensor& student, const Tensor& teacher, const Tensor& labels);
  Tensor operator()(const Tensor& student, const Tensor& teacher, const Tensor& labels) {
    return forward(student, teacher, labels);
  }
  const DistillationOptions& options() const { return options_; }
  std::string extra_repr() const override;

 private:
  DistillationOptions options_;
};

// A frozen teacher: holds a trained model, puts it in eval mode (dropout off, BatchNorm on its
// running statistics) and runs its forward in inference mode, so that nothing is recorded for
// backward (no activations kept, no graph built) and the logits require no gradient.
//
// The teacher's parameters keep their requires_grad flag: inference mode alone already keeps
// them out of every graph, and the model may still be trained elsewhere. If someone switches
// the model back to training mode, the next call puts it in eval again.
class Teacher {
 public:
  // Throws loom::Error when model is null.
  explicit Teacher(std::shared_ptr<nn::Module> model);

  // x: whatever the model's forward takes -> its output (e.g. logits [N, C]), requires_grad
  // false. The output is an inference tensor: read it (as distillation_loss does), do not
  // modify it in place under autograd. Throws what the model's forward throws.
  Tensor operator()(const Tensor& x) const;

  nn::Module& model() const { return *model_; }
  const std::shared_ptr<nn::Module>& model_ptr() const { return model_; }

 private:
  std::shared_ptr<nn::Module> model_;
};

}  // namespace loom::quant
