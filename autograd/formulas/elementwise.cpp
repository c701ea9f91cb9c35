/*
 * Gradients of the elementwise ops. Binary ops record both operands (a number operand as a
 * 0-dim tensor that needs no gradient); the engine sums broadcast gradients back down to each
 * operand's shape. Points where a function has no derivative get PyTorch's convention:
 * relu'(0) = 0, abs'(0) = 0, max/min ties split the gradient evenly, clamp passes the
 * gradient at the bounds.
 */
#include <cmath>

#include "autograd/formulas/formulas.h"

namespace loom::autograd {

namespace {
using C = GradContext<NoAttrs>;
constexpr Save kNone{};
constexpr Save kInput0{.inputs = 0b1};
constexpr Save kInputs01{.inputs = 0b11};
constexpr Save kOutput0{.outputs = 0b1};

}  // namespace

void register_elementwise_formulas() {
  // ---- unary ------------------------------------------------------------------------------
  define_formula<Op::neg>(kNone, [](const C&, const Grads& g) { return Grads{g[0].neg()}; });
  define_formula<Op::exp>(kOutput0, [](const C& c, const Grads& g) { return Grads{g[0] * c.output(0)}; });
  define_formula<Op::log>(kInput0, [](const C& c, const Grads& g) { return Grads{g[0] / c.input(0)}; });
  define_formula<Op::log1p>(kInput0, [](const C& c, const Grads& g) { return Grads{g[0] / (c.input(0) + 1.0)}; });
  define_formula<Op::sqrt>(kOutput0, [](const C& c, const Grads& g) { return Grads{g[0] / (c.output(0) * 2.0)}; });
  // d/dx x^(-1/2) = -1/2 x^(-3/2) = -1/2 y^3
  define_formula<Op::rsqrt>(kOutput0, [](const C& c, const Grads& g) {
    Tensor y = c.output(0);
    return Grads{g[0] * y * y * y * -0.5};
  });
  define_formula<Op::abs>(kInput0, [](const C& c, const Grads& g) { return Grads{g[0] * c.input(0).sign()}; });
  define_formula<Op::sign>(kNone, [](const C&, const Grads& g) { return Grads{zeros_like(g[0])}; });
  define_formula<Op::sin>(kInput0, [](const C& c, const Grads& g) { return Grads{g[0] * c.input(0).cos()}; });
  define_formula<Op::cos>(kInput0, [](const C& c, const Grads& g) { return Grads{g[0] * c.input(0).sin().neg()}; });
  define_formula<Op::tanh>(kOutput0, [](const C& c, const Grads& g) {
    Tensor y = c.output(0);
    return Grads{g[0] * (1.0 - y * y)};
  });
  define_formula<Op::sigmoid>(kOutput0, [](const C& c, const Grads& g) {
    Tensor y = c.output(0);
    return Grads{g[0] * y * (1.0 - y)};
  });
  define_formula<Op::relu>(
      kOutput0, [](const C& c, const Grads& g) { return Grads{threshold_backward(g[0], c.output(0), 0.0)}; });
  // threshold_backward(g, self, t) is linear in g with a mask that is constant in self almost
  // everywhere: d/dg = threshold_backward(., self, t), d/dself = 0 (as PyTorch defines it).
  define_formula<Op::threshold_backward>(
      Save{.inputs = 0b10}, [](const GradContext<ThresholdAttrs>& c, const Grads& g) {
        Tensor self = c.input(1);
        Tensor d_grad =
            if_needed(c.needs_grad(0), [&] { return threshold_backward(g[0], self, c.attrs().threshold); });
        Tensor d_self = if_needed(c.needs_grad(1), [&] { return zeros_like(self); });
        return Grads{d_grad, d_self};
      });
  // silu = x s(x): d/dx = s + x s (1 - s)
  define_formula<Op::silu>(kInput0, [](const C& c, const Grads& g) {
    Tensor x = c.input(0), s = x.sigmoid();
    return Grads{g[0] * (s * (x * (1.0 - s) + 1.0))};
  });
  define_formula<Op::gelu>(Save{.inputs = 0b1}, [](const GradContext<GeluAttrs>& c, const Grads& g) {
    return Grads{gelu_backward(g[0], c.input(0), c.attrs().tanh_approximation ? "tanh" : "none")};
  });
  // gelu_backward(g, x) = g * gelu'(x): d/dg = gelu'(x), d/dx = g * gelu''(x), with
  //   erf form:  gelu''(x) = phi(x) (2 - x^2)
  //   tanh form: gelu''(x) = (1 - t^2) (u' + x/2 (u'' - 2 t u'^2)), t = tanh(u),
  //              u = k (x + a x^3), u' = k (1 + 3 a x^2), u'' = 6 a k x, k = sqrt(2/pi), a = 0.044715
  define_formula<Op::gelu_backward>(kInputs01, [](const GradContext<GeluAttrs>& c, const Grads& g) {
    const bool use_tanh = c.attrs().tanh_approximation;
    Tensor grad = c.input(0), x = c.input(1);
    Tensor d_grad = if_needed(c.needs_grad(0), [&] { return gelu_backward(g[0], x, use_tanh ? "tanh" : "none"); });
    Tensor d_x = if_needed(c.needs_grad(1), [&] {
      Tensor x2 = x * x, second;
      if (use_tanh) {
        const double k = std::sqrt(2.0 / M_PI), a = 0.044715;
        Tensor t = ((x + x2 * x * a) * k).tanh();
        Tensor du = (x2 * (3 * a) + 1.0) * k, ddu = x * (6 * a * k);
        second = (1.0 - t * t) * (du + x * 0.5 * (ddu - t * du * du * 2.0));
      } else {
        const double inv_sqrt_2pi = 1.0 / std::sqrt(2.0 * M_PI);
        second = (x2 * -0.5).exp() * inv_sqrt_2pi * (2.0 - x2);
      }
      return g[0] * grad * second;
    });
    return Grads{d_grad, d_x};
  });
  define_formula<Op::clamp>(kInput0, [](const GradContext<ClampAttrs>& c, const Grads& g) {
    Tensor x = c.input(0);
    Tensor keep = ones(x.sizes(), x.options().dtype(kBool));
    if (c.attrs().min) keep = keep.logical_and(x.ge(*c.attrs().min));
    if (c.attrs().max) keep = keep.logical_and(x.le(*c.attrs().max));
    return Grads{where(keep, g[0], 0.0)};
  });

  // ---- binary -----------------------------------------------------------------------------
  define_formula<Op::add>(kNone, [](const C& c, const Grads& g) {
    return Grads{c.needs_grad(0) ? g[0] : Tensor(), c.needs_grad(1) ? g[0] : Tensor()};
  });
  define_formula<Op::sub>(kNone, [](const C& c, const Grads& g) {
    return Grads{c.needs_grad(0) ? g[0] : Tensor(), c.needs_grad(1) ? g[0].neg() : Tensor()};
  });
  define_formula<Op::mul>(kInputs01, [](const C& c, const Grads& g) {
    return Grads{if_needed(c.needs_grad(0), [&] { return g[0] * c.input(1); }),
                 if_needed(c.needs_grad(1), [&] { return g[0] * c.input(0); })};
  });
  define_formula<Op::div>(kInputs01, [](const C& c, const Grads& g) {
    Tensor b = c.input(1);
    return Grads{if_needed(c.needs_grad(0), [&] { return g[0] / b; }),
                 if_needed(c.needs_grad(1), [&] { return g[0].neg() * c.input(0) / (b * b); })};
  });
  // d/da a^b = b a^(b-1) (0 where b = 0, as PyTorch); d/db a^b = a^b log a (0 where a = 0, b >= 0)
  define_formula<Op::pow>(kInputs01, [](const C& c, const Grads& g) {
    Tensor a = c.input(0), b = c.input(1);
    return Grads{if_needed(c.needs_grad(0), [&] { return where(b.eq(0), 0.0, g[0] * b * a.pow(b - 1.0)); }),
                 if_needed(c.needs_grad(1), [&] {
                   return where(a.eq(0).logical_and(b.ge(0)), 0.0, g[0] * a.pow(b) * a.log());
                 })};
  });
  define_formula<Op::maximum>(kInputs01, [](const C& c, const Grads& g) {
    Tensor a = c.input(0), b = c.input(1);
    Tensor share_a = where(a.gt(b), 1.0, a.eq(b).to(a.dtype()) * 0.5);
    return Grads{if_needed(c.needs_grad(0), [&] { return g[0] * share_a; }),
                 if_needed(c.needs_grad(1), [&] { return g[0] * (1.0 - share_a); })};
  });
  define_formula<Op::minimum>(kInputs01, [](const C& c, const Grads& g) {
    Tensor a = c.input(0), b = c.input(1);
    Tensor share_a = where(a.lt(b), 1.0, a.eq(b).to(a.dtype()) * 0.5);
    return Grads{if_needed(c.needs_grad(0), [&] { return g[0] * share_a; }),
                 if_needed(c.needs_grad(1), [&] { return g[0] * (1.0 - share_a); })};
  });
  // inputs (cond, a, b)
  define_formula<Op::where>(Save{.inputs = 0b1}, [](const C& c, const Grads& g) {
    Tensor cond = c.input(0);
    return Grads{Tensor(), if_needed(c.needs_grad(1), [&] { return where(cond, g[0], 0.0); }),
                 if_needed(c.needs_grad(2), [&] { return where(cond, 0.0, g[0]); })};
  });
}

}  // namespace loom::autograd
