/*
 * Tests of quant/distill.h: the distillation loss against PyTorch 1.13 values and its
 * gradient against torch's and against float64 finite differences, the teacher getting no
 * gradient, alpha = 0 being plain cross entropy, the module form, the Teacher wrapper, and the
 * errors on inputs that do not fit.
 *
 * Inputs are made by a formula both sides can write, seq(shape, a, b, s)[i] = s * sin(a * i + b)
 * in row-major order. The reference values were printed by /usr/bin/python3 (torch 1.13) with
 *
 *   def seq(shape, a, b, s=1.0):
 *       n = math.prod(shape)
 *       return (torch.sin(torch.arange(n, dtype=torch.float64) * a + b) * s).reshape(shape)
 *   def kd(s, t, y, T, alpha):
 *       return (F.kl_div(F.log_softmax(s / T, -1), F.softmax(t / T, -1), reduction="batchmean")
 *               * alpha * T * T + (1 - alpha) * F.cross_entropy(s, y))
 *   s = seq([4, 5], 0.7, 0.1, 2.0).requires_grad_(); t = seq([4, 5], 0.3, 0.5, 3.0)
 *   y = torch.tensor([1, 0, 4, 2])
 *   for T, a in [(4.0, 0.9), (1.0, 0.5), (2.0, 1.0), (4.0, 0.0), (0.5, 0.3)]: print(kd(s, t, y, T, a).item())
 *   kd(s, t, y, 4.0, 0.9).backward(); print(s.grad)
 */
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "nn/loss.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "quant/distill.h"
#include "tests/autograd/autograd_test_util.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

Tensor seq(IntArrayRef shape, double a, double b, double s = 1.0, DType dtype = kFloat64) {
  const int64_t n = shape_numel(shape);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = s * std::sin(a * static_cast<double>(i) + b);
  return make(v, shape, dtype);
}

Tensor student(DType dtype = kFloat64) {
  return seq({4, 5}, 0.7, 0.1, 2.0, dtype);
}
Tensor teacher(DType dtype = kFloat64) {
  return seq({4, 5}, 0.3, 0.5, 3.0, dtype);
}
Tensor labels() {
  return tensor<int64_t>({1, 0, 4, 2});
}

void check_error(const std::string& message, const std::vector<std::string>& parts) {
  CAPTURE(message);
  REQUIRE_FALSE(message.empty());  // it threw a loom::Error
  for (const std::string& part : parts) CHECK_MESSAGE(message.find(part) != std::string::npos, part);
}

}  // namespace

TEST_CASE("distillation_loss matches torch for several temperatures and alphas") {
  struct Case {
    double temperature, alpha, expected;
  };
  // kd(s, t, y, T, alpha).item() from the script in the header comment
  const std::vector<Case> cases = {{4.0, 0.9, 0.6618870446870444},
                                   {1.0, 0.5, 1.4263314796421749},
                                   {2.0, 1.0, 0.422426637804278},
                                   {4.0, 0.0, 2.5034852744558678},
                                   {0.5, 0.3, 1.8254627664725618}};
  for (const Case& c : cases) {
    CAPTURE(c.temperature);
    CAPTURE(c.alpha);
    const quant::DistillationOptions options{.temperature = c.temperature, .alpha = c.alpha};
    const Tensor loss = quant::distillation_loss(student(), teacher(), labels(), options);
    CHECK(loss.dim() == 0);
    CHECK(loss.dtype() == kFloat64);
    check_close(loss, {c.expected}, {1e-12, 1e-12});
    // float32 inputs give a float32 loss within float32's tolerance
    const Tensor loss32 = quant::distillation_loss(student(kFloat32), teacher(kFloat32), labels(), options);
    CHECK(loss32.dtype() == kFloat32);
    check_close(loss32, {c.expected});
  }
  // the defaults are T = 4, alpha = 0.9
  check_close(quant::distillation_loss(student(), teacher(), labels()), {0.6618870446870444}, {1e-12, 1e-12});
  // a float32 teacher (as an eval-mode model gives) is converted to a float64 student's dtype
  check_close(quant::distillation_loss(student(), teacher(kFloat32), labels()), {0.6618870446870444},
              {1e-6, 1e-6});
}

TEST_CASE("distillation_loss is zero-KL when the student equals the teacher") {
  // alpha = 1 leaves only T^2 * KL(p || p) = 0, whatever the labels
  const Tensor loss =
      quant::distillation_loss(teacher(), teacher(), labels(), {.temperature = 3.0, .alpha = 1.0});
  check_close(loss, {0.0}, {0, 1e-14});
}

TEST_CASE("distillation_loss gradient matches torch and float64 finite differences") {
  Tensor s = student().requires_grad_();
  quant::distillation_loss(s, teacher(), labels()).backward();
  // s.grad after kd(s, t, y, 4.0, 0.9).backward() in the script of the header comment
  check_close(s.grad(), {0.002900485374,  0.005295809518,  0.039935554507,  0.003335056149, -0.051466905548,
                         -0.076343660777, -0.065401159846, -0.034697686163, 0.033605703655, 0.142836803131,
                         -0.032803841563, 0.042494412813,  0.045569497207,  0.005298628464, -0.060558696921,
                         -0.005441425544, -0.020497259038, -0.039613190448, 0.013851607312, 0.051700267718},
              {1e-9, 1e-11});

  const Tensor t = teacher();
  for (quant::DistillationOptions options : {quant::DistillationOptions{.temperature = 4.0, .alpha = 0.9},
                                             quant::DistillationOptions{.temperature = 1.0, .alpha = 0.5},
                                             quant::DistillationOptions{.temperature = 0.5, .alpha = 1.0},
                                             quant::DistillationOptions{.temperature = 8.0, .alpha = 0.0}}) {
    CAPTURE(options.temperature);
    CAPTURE(options.alpha);
    auto fn = [&](const std::vector<Tensor>& in) {
      return std::vector{quant::distillation_loss(in[0], t, labels(), options)};
    };
    LOOM_CHECK_GRADCHECK(fn, std::vector{leaf({4, 5}, 31, 2.0)});
  }
}

TEST_CASE("distillation_loss sends no gradient to the teacher's logits") {
  // A teacher whose logits come from a graph that requires grad (as if the user forgot
  // no_grad): the loss detaches them, so neither they nor the teacher's weights get a gradient.
  Tensor w = seq({5, 5}, 0.2, 0.3, 1.0).requires_grad_();
  Tensor t = teacher().matmul(w);
  REQUIRE(t.requires_grad());
  Tensor s = student().requires_grad_();
  Tensor loss = quant::distillation_loss(s, t, labels(), {.temperature = 2.0, .alpha = 1.0});
  loss.backward();
  CHECK(s.grad().defined());
  CHECK_FALSE(w.grad().defined());
  // the loss itself depends on s only: with s detached it requires no grad at all
  CHECK_FALSE(quant::distillation_loss(student(), t, labels()).requires_grad());
}

TEST_CASE("distillation_loss with alpha = 0 is exactly cross entropy") {
  Tensor s1 = student().requires_grad_(), s2 = student().requires_grad_();
  Tensor kd = quant::distillation_loss(s1, teacher(), labels(), {.temperature = 4.0, .alpha = 0.0});
  Tensor ce = nn::functional::cross_entropy(s2, labels());
  CHECK(kd.item<double>() == ce.item<double>());
  kd.backward();
  ce.backward();
  CHECK(values(s1.grad()) == values(s2.grad()));
  // torch: F.cross_entropy(s, y).item() = 2.5034852744558678 (the T = 4, alpha = 0 case above)
  check_close(ce, {2.5034852744558678}, {1e-12, 1e-12});
}

TEST_CASE("DistillationLoss holds its options and calls distillation_loss") {
  quant::DistillationLoss kd({.temperature = 1.0, .alpha = 0.5});
  CHECK(kd.options().temperature == 1.0);
  CHECK(kd.options().alpha == 0.5);
  check_close(kd(student(), teacher(), labels()), {1.4263314796421749}, {1e-12, 1e-12});
  check_close(kd.forward(student(), teacher(), labels()), {1.4263314796421749}, {1e-12, 1e-12});
  CHECK(kd.parameters().empty());
  CHECK(kd.state_dict().empty());
  CHECK(kd.extra_repr() == "temperature=1, alpha=0.5");
  quant::DistillationLoss defaults;
  CHECK(defaults.options().temperature == 4.0);
  CHECK(defaults.options().alpha == 0.9);
}

TEST_CASE("Teacher runs its model in eval mode without recording") {
  manual_seed(7);
  // Dropout makes train and eval outputs differ, so eval mode is observable.
  auto model =
      std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 8), std::make_shared<nn::Dropout>(0.5),
                                       std::make_shared<nn::Linear>(8, 3));
  REQUIRE(model->is_training());
  quant::Teacher t(model);
  CHECK_FALSE(model->is_training());
  for (nn::Module* m : model->modules()) CHECK_FALSE(m->is_training());

  const Tensor x = seq({4, 6}, 0.9, 0.2, 1.5, kFloat32);
  const Tensor out = t(x);
  CHECK(out.sizes() == std::vector<int64_t>{4, 3});
  CHECK_FALSE(out.requires_grad());
  CHECK(out.grad_fn() == nullptr);
  // the same as the model's own eval-mode forward, and deterministic (no dropout)
  Tensor reference;
  {
    NoGradGuard no_grad;
    reference = model->forward(x);
  }
  check_close(out, values(reference), {0, 0});
  check_close(t(x), values(out), {0, 0});

  // switched back to training elsewhere, the next call puts it in eval again
  model->train();
  check_close(t(x), values(out), {0, 0});
  CHECK_FALSE(model->is_training());

  // a training step through the loss leaves the teacher's parameters without gradients
  auto student_model = std::make_shared<nn::Linear>(6, 3);
  Tensor loss = quant::distillation_loss((*student_model)(x), t(x), tensor<int64_t>({0, 1, 2, 1}));
  loss.backward();
  for (const Tensor& p : student_model->parameters()) CHECK(p.grad().defined());
  for (const Tensor& p : model->parameters()) {
    CHECK(p.requires_grad());  // untouched: inference mode alone keeps it out of the graph
    CHECK_FALSE(p.grad().defined());
  }
  CHECK(&t.model() == model.get());
}

TEST_CASE("distillation_loss and Teacher reject bad inputs with messages naming them") {
  const Tensor s = student(), t = teacher(), y = labels();
  check_error(error_of([&] {
                quant::distillation_loss(s, seq({4, 6}, 0.3, 0.5), y);
              }),
              {"distillation_loss", "[4, 5]", "[4, 6]"});
  check_error(error_of([&] { quant::distillation_loss(seq({20}, 0.7, 0.1), seq({20}, 0.3, 0.5), y); }),
              {"distillation_loss", "[N, C]", "[20]"});
  check_error(error_of([&] {
                quant::distillation_loss(s, t, tensor<int64_t>({1, 0, 4}));
              }),
              {"distillation_loss", "labels", "[4]", "[3]"});
  check_error(error_of([&] { quant::distillation_loss(s, t, y.to(kFloat32)); }),
              {"distillation_loss", "int64", "labels", "float32"});
  check_error(error_of([&] { quant::distillation_loss(s.to(kInt64), t, y); }),
              {"distillation_loss", "student_logits", "int64"});
  check_error(error_of([&] { quant::distillation_loss(s, t, y, {.temperature = 0.0}); }),
              {"distillation_loss", "temperature", "0"});
  check_error(error_of([&] { quant::distillation_loss(s, t, y, {.temperature = -2.0}); }),
              {"distillation_loss", "temperature", "-2"});
  check_error(error_of([&] { quant::distillation_loss(s, t, y, {.alpha = 1.5}); }),
              {"distillation_loss", "alpha", "1.5"});
  check_error(error_of([&] { quant::distillation_loss(s, t, y, {.alpha = -0.1}); }),
              {"distillation_loss", "alpha", "-0.1"});
  check_error(error_of([&] { quant::distillation_loss(s, Tensor(), y); }),
              {"distillation_loss", "teacher_logits", "undefined"});
  // labels out of range are caught by the cross-entropy term
  CHECK_THROWS_AS(quant::distillation_loss(s, t, tensor<int64_t>({1, 0, 5, 2})), Error);
  check_error(error_of([&] { quant::DistillationLoss({.temperature = 4.0, .alpha = 2.0}); }),
              {"DistillationLoss", "alpha", "2"});
  check_error(error_of([&] { quant::Teacher(nullptr); }), {"Teacher", "null"});
}
