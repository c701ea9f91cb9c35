/*
 * Gradient of copy: inputs (dst's old value, src). The old value is overwritten and gets
 * nothing; src gets the gradient, which the engine brings back to src's shape (copy_
 * broadcasts), dtype and device (to() is a copy). fill has no tensor input to differentiate:
 * fill_ on a tensor in the graph is recorded as a copy of a constant.
 */
#include "autograd/formulas/formulas.h"

namespace loom::autograd {

void register_copy_formulas() {
  define_formula<Op::copy>(Save{}, [](const GradContext<NoAttrs>& c, const Grads& g) {
    return Grads{Tensor(), c.needs_grad(1) ? g[0] : Tensor()};
  });
}

}  // namespace loom::autograd
