/*
 * Gradients of cumsum and sort.
 *
 * cumsum: y_i = sum_{j <= i} x_j, so dL/dx_j = sum_{i >= j} g_i, a cumsum from the end: the
 * gradient flipped, summed, flipped back (as PyTorch's formula).
 * sort: values[i] = x[indices[i]] along the dim, a permutation, so each gradient goes back to
 * where its element came from (a scatter into zeros; the indices are distinct, so scatter_add
 * adds each once). topk, kthvalue and median are sort followed by views or gather: their
 * gradients come from these and the views' formulas.
 */
#include "autograd/formulas/formulas.h"

namespace loom::autograd {

void register_sort_formulas() {
  define_formula<Op::cumsum>(Save{}, [](const GradContext<DimAttrs>& c, const Grads& g) {
    if (c.input_sizes(0).empty()) return Grads{g[0]};  // 0-dim: y = x
    const DimVector dims{c.attrs().dim};
    return Grads{flip(cumsum(flip(g[0], dims), c.attrs().dim), dims)};
  });
  define_formula<Op::sort>(Save{.outputs = 0b10}, [](const GradContext<SortAttrs>& c, const Grads& g) {
    if (c.input_sizes(0).empty()) return Grads{g[0]};
    return Grads{scatter_add(zeros(c.input_sizes(0), g[0].options()), c.attrs().dim, c.output(1), g[0])};
  });
}

}  // namespace loom::autograd
