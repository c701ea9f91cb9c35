/*
 * Bench case of knowledge distillation (quant/distill.h): one training step of a small student
 * from a frozen large teacher, as a user writes it, on random data. The PyTorch side is
 * ../shared/anchors/distill.py, with the same models, loss, optimizer and batch.
 *   distill_step  teacher MLP 784-1200-1200-10 forward (eval, inference mode) + student MLP
 *                 784-64-10 forward/backward with the KD loss (T = 4, alpha = 0.9) +
 *                 SGD(lr 0.01, momentum 0.9) step, batch 128
 * Like the anchor, it also times the two halves alone (the teacher's forward, and a plain
 * cross-entropy step of the student), to show where the time goes: the teacher's forward is
 * ~4.8 MFLOP per sample against ~0.3 MFLOP for the student's forward and backward.
 */
#include <memory>

#include "nn/loss.h"
#include "nn/models/mlp.h"
#include "nn/optim/sgd.h"
#include "ops/ops.h"
#include "quant/distill.h"
#include "tools/bench/bench.h"

namespace loom::bench {
namespace {

std::vector<Metric> distill_step(const TimingOptions& timing) {
  constexpr int64_t kBatch = 128;
  auto teacher_model = std::make_shared<nn::MLP>(std::vector<int64_t>{784, 1200, 1200, 10});
  const quant::Teacher teacher(teacher_model);
  nn::MLP student({784, 64, 10});
  nn::SGD optimizer(student.parameters(), nn::SGDOptions{.lr = 0.01, .momentum = 0.9});
  const quant::DistillationOptions kd{.temperature = 4.0, .alpha = 0.9};
  const Tensor x = randn({kBatch, 784}), y = randint(0, 10, {kBatch});

  auto kd_step = [&] {
    optimizer.zero_grad();
    Tensor teacher_logits = teacher(x);
    quant::distillation_loss(student(x), teacher_logits, y, kd).backward();
    optimizer.step();
  };
  auto teacher_forward = [&] { teacher(x); };
  auto student_step = [&] {
    optimizer.zero_grad();
    nn::functional::cross_entropy(student(x), y).backward();
    optimizer.step();
  };
  auto samples_per_s = [&](const std::function<void()>& run) {
    return static_cast<double>(kBatch) / time_median(run, timing).seconds_per_call;
  };
  return {
      {"samples_per_s", samples_per_s(kd_step), "samples/s"},
      {"teacher_fwd_samples_per_s", samples_per_s(teacher_forward), "samples/s"},
      {"student_ce_step_samples_per_s", samples_per_s(student_step), "samples/s"},
  };
}

}  // namespace

std::vector<BenchCase> distill_cases() {
  return {
      BenchCase("distill_step", "samples/s",
                "KD step: teacher MLP 784-1200-1200-10 fwd (eval, no grad) + student 784-64-10 "
                "fwd/bwd/SGD momentum, T 4, alpha 0.9, batch 128 (also the two halves alone)",
                distill_step),
  };
}

}  // namespace loom::bench
