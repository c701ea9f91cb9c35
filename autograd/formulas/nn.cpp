/*
 * Gradients of softmax, log_softmax and nll_loss, which call the fused backward kernels
 * (softmax_backward, log_softmax_backward, nll_loss_backward), and the gradients of those
 * kernels, written with elementwise ops and reductions so that create_graph can differentiate
 * them again. The composites of ops/nn_ops.cpp (cross_entropy, mse_loss, embedding, dropout)
 * are differentiated through the primitives they are written with.
 */
#include "autograd/formulas/formulas.h"

namespace loom::autograd {

namespace {

// Which class each counted sample of nll_loss picks: values [N, C, d1, ...] (or [C]) with its
// class dim moved last, and hit[..., c], true where the sample's target is c and not ignored.
struct ClassHits {
  Tensor class_last;
  Tensor hit;
};

ClassHits class_hits(const Tensor& values, const Tensor& target, int64_t ignore_index) {
  const int64_t classes = values.dim() == 1 ? values.size(0) : values.size(1);
  Tensor class_last = values;
  if (values.dim() > 2) {
    DimVector order{0};
    for (int64_t d = 2; d < values.dim(); ++d) order.push_back(d);
    order.push_back(1);
    class_last = values.permute(order);
  }
  Tensor hit = target.unsqueeze(-1)
                   .eq(arange(0, classes, 1, target.options()))
                   .logical_and(target.ne(ignore_index).unsqueeze(-1));
  return {class_last, hit};
}

// values[i, t_i] per sample (0 for ignored samples), shaped like the target.
Tensor at_targets(const ClassHits& h) { return where(h.hit, h.class_last, 0.0).sum({h.class_last.dim() - 1}); }

// sum over the samples i with target c of per_sample[i], per class c: [C].
Tensor sum_per_class(const ClassHits& h, const Tensor& per_sample) {
  Tensor per_class = where(h.hit, per_sample.unsqueeze(-1), 0.0);
  if (per_class.dim() == 1) return per_class;  // a single sample: values [C]
  DimVector sample_dims;
  for (int64_t d = 0; d < per_class.dim() - 1; ++d) sample_dims.push_back(d);
  return per_class.sum(sample_dims);
}

// The gradient of nll_loss with respect to the class weights w. Per counted sample i (target
// t_i != ignore_index), p_i = logp[i, t_i]; total = sum_i w[t_i] (output 1):
//   none: out_i = -w[t_i] p_i         dw[c] = sum_{i: t_i = c} -g_i p_i
//   sum:  out = sum_i -w[t_i] p_i     dw[c] = sum_{i: t_i = c} -g p_i
//   mean: out = sum_i -w[t_i] p_i / total
//                                     dw[c] = sum_{i: t_i = c} g (-p_i - out) / total
// plus g_total * (number of samples of class c) through total itself.
Tensor nll_loss_weight_grad(const GradContext<NllLossAttrs>& c, const Grads& g) {
  const NllLossAttrs& a = c.attrs();
  ClassHits hits = class_hits(c.input(0), c.input(1), a.ignore_index);
  Tensor picked = at_targets(hits);  // p_i
  Tensor coef = a.reduction == Reduction::Mean ? (picked.neg() - c.output(0)) * g[0] / c.output(1)
                                               : picked.neg() * g[0];
  return sum_per_class(hits, coef + g[1]);
}

// d/dy of softmax_backward(grad, y) = y * (grad - sum(grad * y)), against g:
//   g * (grad - sum(grad * y)) - grad * sum(g * y)
Tensor softmax_backward_output_grad(const Tensor& g, const Tensor& grad, const Tensor& y, int64_t dim) {
  return g * (grad - (grad * y).sum({dim}, true)) - grad * (g * y).sum({dim}, true);
}

}  // namespace

void register_nn_formulas() {
  // d/dx softmax: y * (g - sum(g * y))
  define_formula<Op::softmax>(Save{.outputs = 0b1}, [](const GradContext<DimAttrs>& c, const Grads& g) {
    return Grads{softmax_backward(g[0], c.output(0), c.attrs().dim)};
  });
  // inputs (grad, y): linear in grad, with itself as its adjoint
  define_formula<Op::softmax_backward>(Save{.inputs = 0b11}, [](const GradContext<DimAttrs>& c, const Grads& g) {
    const int64_t dim = c.attrs().dim;
    return Grads{if_needed(c.needs_grad(0), [&] { return softmax_backward(g[0], c.input(1), dim); }),
                 if_needed(c.needs_grad(1),
                           [&] { return softmax_backward_output_grad(g[0], c.input(0), c.input(1), dim); })};
  });

  // d/dx log_softmax: g - exp(y) * sum(g)
  define_formula<Op::log_softmax>(Save{.outputs = 0b1}, [](const GradContext<DimAttrs>& c, const Grads& g) {
    return Grads{log_softmax_backward(g[0], c.output(0), c.attrs().dim)};
  });
  // inputs (grad, y): d/dgrad = g - sum(g * exp(y)), d/dy = -g * exp(y) * sum(grad)
  define_formula<Op::log_softmax_backward>(
      Save{.inputs = 0b11}, [](const GradContext<DimAttrs>& c, const Grads& g) {
        const int64_t dim = c.attrs().dim;
        Tensor p = c.input(1).exp();
        return Grads{if_needed(c.needs_grad(0), [&] { return g[0] - (g[0] * p).sum({dim}, true); }),
                     if_needed(c.needs_grad(1), [&] { return (g[0] * p * c.input(0).sum({dim}, true)).neg(); })};
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
  // Inputs (grad, logp, target, weight, total_weight); the result is -w[t_i] grad_i (/ total
  // for the mean) at [i, t_i] and does not depend on logp's values. It is linear in grad: the
  // adjoint reads g at the targets, which is nll_loss of g (summed, then divided by the given
  // total, for the mean).
  define_formula<Op::nll_loss_backward>(
      Save{.inputs = 0b11101}, [](const GradContext<NllLossAttrs>& c, const Grads& g) {
        const NllLossAttrs& a = c.attrs();
        const bool mean = a.reduction == Reduction::Mean;
        Tensor grad = c.input(0), target = c.input(2), weight = c.input(3), total = c.input(4);
        Tensor d_grad = if_needed(c.needs_grad(0) || (mean && c.needs_grad(4)), [&] {
          Tensor loss = nll_loss(g[0], target, weight, a.ignore_index, mean ? Reduction::Sum : a.reduction);
          // a reduced loss's grad may have any one-element shape
          return (mean ? loss / total : loss).reshape(c.input_sizes(0));
        });
        // dw[c] = sum_{i: t_i = c} -grad_i g[i, c] (/ total for the mean)
        Tensor d_weight = if_needed(c.needs_grad(3), [&] {
          ClassHits hits = class_hits(g[0], target, a.ignore_index);
          return sum_per_class(hits, at_targets(hits) * (mean ? grad / total : grad).neg());
        });
        // mean: the result is proportional to 1 / total
        Tensor d_total = if_needed(mean && c.needs_grad(4),
                                   [&] { return (grad * d_grad / total).neg().reshape(c.input_sizes(4)); });
        return Grads{c.needs_grad(0) ? d_grad : Tensor(), Tensor(), Tensor(), d_weight, d_total};
      });
}

}  // namespace loom::autograd
