/*
 * Gradients of the reductions: each output element's gradient goes back to the input
 * elements it was reduced from, broadcast over the reduced dims.
 */
#include "autograd/formulas/formulas.h"

namespace loom::autograd {

void register_reduction_formulas() {
  define_formula<Op::sum>(Save{}, [](const GradContext<ReduceAttrs>& c, const Grads& g) {
    const ReduceAttrs& a = c.attrs();
    return Grads{unsqueeze_reduced(g[0], c.input_sizes(0), a.dims, a.keepdim).expand(c.input_sizes(0))};
  });
}

}  // namespace loom::autograd
