/*
 * Gradients of the reductions: each output element's gradient goes back to the input
 * elements it was reduced from, broadcast over the reduced dims. Where the derivative is not
 * unique, PyTorch's convention: amax/amin split the gradient evenly among tied elements,
 * max/min along a dim give it all to the element whose index they returned.
 */
#include "autograd/formulas/formulas.h"

namespace loom::autograd {

namespace {

using ReduceContext = GradContext<ReduceAttrs>;

// g (shaped like the reduction's output) with the reduced dims back as size 1.
Tensor keepdim_grad(const ReduceContext& c, const Tensor& g) {
  return unsqueeze_reduced(g, c.input_sizes(0), c.attrs().dims, c.attrs().keepdim);
}

// amax/amin: y = x at the extreme elements, so the gradient goes to the elements equal to y,
// divided by how many there are.
Grads extreme_grad(const ReduceContext& c, const Grads& g) {
  const ReduceAttrs& a = c.attrs();
  Tensor x = c.input(0);
  Tensor share = x.eq(keepdim_grad(c, c.output(0))).to(x.dtype());
  return Grads{share * (keepdim_grad(c, g[0]) / share.sum(a.dims, /*keepdim=*/true))};
}

// max/min along a dim: the gradient goes to the element at the returned index, picked by
// comparing the indices with a range along the dim (a one-hot mask; where() keeps it
// differentiable in g for double backward).
Grads arg_extreme_grad(const GradContext<ArgReduceAttrs>& c, const Grads& g) {
  const ArgReduceAttrs& a = c.attrs();
  IntArrayRef sizes = c.input_sizes(0);
  if (sizes.empty()) return Grads{g[0]};  // a 0-dim input is its own max
  Tensor indices = c.output(1), grad = g[0];
  if (!a.keepdim) {
    indices = indices.unsqueeze(a.dim);
    grad = grad.unsqueeze(a.dim);
  }
  DimVector range_shape(sizes.size(), 1);
  range_shape[static_cast<size_t>(a.dim)] = sizes[static_cast<size_t>(a.dim)];
  Tensor range = arange(sizes[static_cast<size_t>(a.dim)], indices.options());
  return Grads{where(range.view(range_shape).eq(indices), grad, 0.0)};
}

}  // namespace

void register_reduction_formulas() {
  define_formula<Op::sum>(Save{}, [](const ReduceContext& c, const Grads& g) {
    return Grads{keepdim_grad(c, g[0]).expand(c.input_sizes(0))};
  });

  // d/dx_i prod(x) = prod_{j != i} x_j. Without zeros that is y / x_i. With zeros:
  //  - x_i != 0: y / x_i, which is 0 since y = 0;
  //  - x_i == 0: the product of the non-zero elements when x_i is the only zero, else 0.
  // y is the saved output (with its history under create_graph), so the second derivative is
  // also right with one zero: d/dx_k (y / x_i) = prod_{j != i, k} x_j. With two zeros or more
  // the second derivative between two zeros is missed (it is 0 here, not prod of the others).
  define_formula<Op::prod>(Save{.inputs = 0b1, .outputs = 0b1}, [](const ReduceContext& c, const Grads& g) {
    const ReduceAttrs& a = c.attrs();
    Tensor x = c.input(0), y = keepdim_grad(c, c.output(0));
    Tensor zero = x.eq(0);
    Tensor safe_x = where(zero, 1.0, x);
    Tensor nonzero_prod = safe_x.prod(a.dims, /*keepdim=*/true);
    Tensor single_zero = zero.sum(a.dims, /*keepdim=*/true).eq(1);
    Tensor at_zero = where(single_zero, nonzero_prod, 0.0);
    return Grads{keepdim_grad(c, g[0]) * where(zero, at_zero, y / safe_x)};
  });

  define_formula<Op::amax>(Save{.inputs = 0b1, .outputs = 0b1}, extreme_grad);
  define_formula<Op::amin>(Save{.inputs = 0b1, .outputs = 0b1}, extreme_grad);

  // d/dx var = 2 (x - mean) / (n - correction)
  define_formula<Op::var>(Save{.inputs = 0b1}, [](const GradContext<VarAttrs>& c, const Grads& g) {
    const VarAttrs& a = c.attrs();
    IntArrayRef sizes = c.input_sizes(0);
    int64_t n = 1;
    for (int64_t d : a.dims) n *= sizes[static_cast<size_t>(d)];
    Tensor x = c.input(0);
    Tensor centered = x - x.mean(a.dims, /*keepdim=*/true);
    Tensor grad = unsqueeze_reduced(g[0], sizes, a.dims, a.keepdim);
    // n <= correction gives inf/NaN, as the forward does
    return Grads{grad * centered * (2.0 / static_cast<double>(n - a.correction))};
  });

  define_formula<Op::max_dim>(Save{.outputs = 0b10}, arg_extreme_grad);
  define_formula<Op::min_dim>(Save{.outputs = 0b10}, arg_extreme_grad);
}

}  // namespace loom::autograd
