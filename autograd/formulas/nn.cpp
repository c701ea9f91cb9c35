/*
 * Gradients of softmax, log_softmax and nll_loss. They call the fused backward kernels
 * (softmax_backward, log_softmax_backward, nll_loss_backward), which are recorded without a
 * formula: first order only, a second derivative through them fails with a clear error.
 * The composites of ops/nn_ops.cpp (cross_entropy, mse_loss, embedding, dropout) are
 * differentiated through the primitives they are written with.
 */
#include "autograd/formulas/formulas.h"

namespace loom::autograd {

namespace {

// The gradient of nll_loss with respect to the class weights w. Per counted sample i (target
// t_i != ignore_index), p_i = logp[i, t_i]; total = sum_i w[t_i] (output 1):
//   none: out_i = -w[t_i] p_i         dw[c] = sum_{i: t_i = c} -g_i p_i
//   sum:  out = sum_i -w[t_i] p_i     dw[c] = sum_{i: t_i = c} -g p_i
//   mean: out = sum_i -w[t_i] p_i / total
//                                     dw[c] = sum_{i: t_i = c} g (-p_i - out) / total
// plus g_total * (number of samples of class c) through total itself.
Tensor nll_loss_weight_grad(const GradContext<NllLossAttrs>& c, const Grads& g) {
  const NllLossAttrs& a = c.attrs();
  Tensor logp = c.input(0), target = c.input(1);
  const int64_t classes = logp.dim() == 1 ? logp.size(0) : logp.size(1);
  // logp with the class dim last, to line up with target.unsqueeze(-1).
  Tensor lp = logp;
  if (logp.dim() > 2) {
    DimVector order{0};
    for (int64_t d = 2; d < logp.dim(); ++d) order.push_back(d);
    order.push_back(1);
    lp = logp.permute(order);
  }
  // hit[..., c]: the sample is counted and its target is class c
  Tensor hit = target.unsqueeze(-1)
                   .eq(arange(0, classes, 1, target.options()))
                   .logical_and(target.ne(a.ignore_index).unsqueeze(-1));
  Tensor picked = where(hit, lp, 0.0).sum({lp.dim() - 1});  // p_i (0 for ignored samples)
  Tensor coef = a.reduction == Reduction::Mean ? (picked.neg() - c.output(0)) * g[0] / c.output(1)
                                               : picked.neg() * g[0];
  Tensor per_class = where(hit, (coef + g[1]).unsqueeze(-1), 0.0);
  if (per_class.dim() == 1) return per_class;  // a single sample: logp [C]
  DimVector sample_dims;
  for (int64_t d = 0; d < per_class.dim() - 1; ++d) sample_dims.push_back(d);
  return per_class.sum(sample_dims);
}

}  // namespace

void register_nn_formulas() {
  // d/dx softmax: y * (g - sum(g * y))
  define_formula<Op::softmax>(Save{.outputs = 0b1}, [](const GradContext<DimAttrs>& c, const Grads& g) {
    return Grads{softmax_backward(g[0], c.output(0), c.attrs().dim)};
  });
  // d/dx log_softmax: g - exp(y) * sum(g)
  define_formula<Op::log_softmax>(Save{.outputs = 0b1}, [](const GradContext<DimAttrs>& c, const Grads& g) {
    return Grads{log_softmax_backward(g[0], c.output(0), c.attrs().dim)};
  });
  // Inputs (logp, target, weight), outputs (out, total_weight). d/dlogp: -w[t_i] g_i (/ total
  // for the mean) at [i, t_i], 0 elsewhere; the target is integer.
  define_formula<Op::nll_loss>(
      Save{.inputs = 0b111, .outputs = 0b11}, [](const GradContext<NllLossAttrs>& c, const Grads& g) {
        const NllLossAttrs& a = c.attrs();
        return Grads{if_needed(c.needs_grad(0),
                               [&] {
                                 return nll_loss_backward(g[0], c.input(0), c.input(1), c.input(2),
                                                          c.output(1), a.ignore_index, a.reduction);
                               }),
                     Tensor(), if_needed(c.needs_grad(2), [&] { return nll_loss_weight_grad(c, g); })};
      });
}

}  // namespace loom::autograd
