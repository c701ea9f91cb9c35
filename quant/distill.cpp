/*
 * The distillation loss and the frozen teacher of quant/distill.h. The loss is a composite of
 * recorded ops (log_softmax, mul, sub, sum and cross_entropy), so autograd differentiates it
 * with no formula of its own; the teacher's half is computed without recording, since no
 * gradient is ever wanted there.
 */
#include "quant/distill.h"

#include <cmath>
#include <sstream>
#include <utility>

#include "core/grad_mode.h"
#include "nn/loss.h"
#include "ops/ops.h"

namespace loom::quant {
namespace {

void check_options(const DistillationOptions& o, const char* op) {
  LOOM_CHECK(std::isfinite(o.temperature) && o.temperature > 0, op,
             ": expected a positive, finite temperature, got ", o.temperature);
  LOOM_CHECK(o.alpha >= 0.0 && o.alpha <= 1.0, op, ": expected alpha in [0, 1], got ", o.alpha);
}

void check_inputs(const Tensor& s, const Tensor& t, const Tensor& y) {
  constexpr const char* op = "distillation_loss";
  LOOM_CHECK(s.defined(), op, ": student_logits is an undefined tensor");
  LOOM_CHECK(t.defined(), op, ": teacher_logits is an undefined tensor");
  LOOM_CHECK(y.defined(), op, ": labels is an undefined tensor");
  LOOM_CHECK(s.dim() == 2, op, ": expected student_logits of shape [N, C], got ", s.sizes());
  LOOM_CHECK(s.is_floating_point(), op, ": expected floating-point student_logits, got ", s.dtype());
  LOOM_CHECK(t.is_floating_point(), op, ": expected floating-point teacher_logits, got ", t.dtype());
  LOOM_CHECK(t.sizes() == s.sizes(), op, ": expected teacher_logits of the student's shape ", s.sizes(),
             ", got ", t.sizes());
  LOOM_CHECK(y.dtype() == kInt64, op, ": expected int64 labels (class indices), got ", y.dtype());
  LOOM_CHECK(y.dim() == 1 && y.size(0) == s.size(0), op, ": expected labels of shape [", s.size(0),
             "] for student_logits ", s.sizes(), ", got ", y.sizes());
  LOOM_CHECK(s.size(0) > 0, op, ": expected a non-empty batch, got student_logits ", s.sizes());
  LOOM_CHECK(t.device() == s.device() && y.device() == s.device(), op,
             ": expected all inputs on one device, got student ", s.device(), ", teacher ", t.device(),
             ", labels ", y.device());
}

}  // namespace

Tensor distillation_loss(const Tensor& student_logits, const Tensor& teacher_logits, const Tensor& labels,
                         const DistillationOptions& options) {
  check_options(options, "distillation_loss");
  check_inputs(student_logits, teacher_logits, labels);
  const double T = options.temperature, alpha = options.alpha;
  // alpha = 0 is plain training: return exactly the cross entropy, and skip the soft term.
  if (alpha == 0.0) return nn::functional::cross_entropy(student_logits, labels);

  // The teacher's soft targets p = softmax(t / T) and log p, computed once without recording:
  // the teacher is a constant of the student's optimisation.
  Tensor p_teacher, log_p_teacher;
  {
    NoGradGuard no_grad;
    log_p_teacher = teacher_logits.detach().to(student_logits.dtype()).div(T).log_softmax(1);
    p_teacher = log_p_teacher.exp();
  }
  // KL(p || q) summed over the batch, q = softmax(s / T), in the form sum p (log p - log q):
  // where p underflows to 0 the term is 0 * (finite), never 0 * log 0, and the difference of
  // the log-probabilities is taken before summing, without the cancellation of
  // sum p log p - sum p log q when the two distributions are close.
  Tensor log_q = student_logits.div(T).log_softmax(1);
  Tensor kl_sum = (p_teacher * (log_p_teacher - log_q)).sum();
  // alpha * T^2 * (batchmean KL), one scalar multiply.
  const double batch = static_cast<double>(student_logits.size(0));
  Tensor soft = kl_sum.mul(alpha * T * T / batch);
  if (alpha == 1.0) return soft;
  return soft + nn::functional::cross_entropy(student_logits, labels).mul(1.0 - alpha);
}

DistillationLoss::DistillationLoss(DistillationOptions options) : options_(options) {
  check_options(options_, "DistillationLoss");
}

Tensor DistillationLoss::forward(const Tensor& student, const Tensor& teacher, const Tensor& labels) {
  return distillation_loss(student, teacher, labels, options_);
}

std::string DistillationLoss::extra_repr() const {
  std::ostringstream os;
  os << "temperature=" << options_.temperature << ", alpha=" << options_.alpha;
  return os.str();
}

Teacher::Teacher(std::shared_ptr<nn::Module> model) : model_(std::move(model)) {
  LOOM_CHECK(model_ != nullptr, "Teacher: expected a model, got a null pointer");
  model_->eval();
}

Tensor Teacher::operator()(const Tensor& x) const {
  // Checking the root's flag is cheap; eval() walks the whole tree, so only when needed.
  if (model_->is_training()) model_->eval();
  InferenceMode inference;
  return model_->forward(x);
}

}  // namespace loom::quant
