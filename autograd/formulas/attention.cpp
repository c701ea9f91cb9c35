/*
 * The gradient of the fused attention (ops/attention_ops.h): flash_attention's formula calls
 * its backward op, which recomputes the probabilities from the saved logsumexp instead of
 * keeping the [L, S] matrix. The mask (input 3) gets no gradient: the op refuses a mask that
 * requires one. flash_attention_backward has no formula of its own (a second derivative goes
 * through the written-out attention); it is in the reviewed non-differentiable list.
 */
#include "autograd/formulas/formulas.h"

namespace loom::autograd {

void register_attention_formulas() {
  // inputs (q, k, v, mask), outputs (out, logsumexp)
  define_formula<Op::flash_attention>(
      Save{.inputs = 0b1111, .outputs = 0b11}, [](const GradContext<AttentionAttrs>& c, const Grads& g) {
        const AttentionAttrs& a = c.attrs();
        auto [dq, dk, dv] = flash_attention_backward(g[0], c.input(0), c.input(1), c.input(2), c.output(0),
                                                     c.output(1), c.input(3), a.scale, a.is_causal);
        return Grads{c.needs_grad(0) ? dq : Tensor(), c.needs_grad(1) ? dk : Tensor(),
                     c.needs_grad(2) ? dv : Tensor(), Tensor()};
      });
}

}  // namespace loom::autograd
