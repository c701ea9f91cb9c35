/*
 * Every gradient formula, registered once. The formulas live in this folder, one file per op
 * family (the same split as ops/): together they are the one place where derivatives are
 * written, always with forward ops so that create_graph can differentiate them again.
 */
#include "autograd/formulas/formulas.h"

namespace loom::autograd {

void register_formulas() {
  register_view_formulas();
  register_copy_formulas();
  register_elementwise_formulas();
  register_reduction_formulas();
  register_linalg_formulas();
  register_conv_pool_formulas();
  register_norm_formulas();
  register_nn_formulas();
  register_shape_formulas();
  register_attention_formulas();
  register_sort_formulas();
}

Tensor sum_to(const Tensor& grad, IntArrayRef sizes) {
  if (grad.sizes() == sizes) return grad;
  const int64_t lead = grad.dim() - static_cast<int64_t>(sizes.size());
  DimVector dims;
  for (int64_t d = 0; d < grad.dim(); ++d)
    if (d < lead || (sizes[static_cast<size_t>(d - lead)] == 1 && grad.size(d) != 1)) dims.push_back(d);
  Tensor r = dims.empty() ? grad : grad.sum(dims, /*keepdim=*/true);
  return r.view(sizes);
}

Tensor unsqueeze_reduced(const Tensor& grad, IntArrayRef input_sizes, IntArrayRef dims, bool keepdim) {
  if (keepdim) return grad;
  DimVector shape(input_sizes);
  if (dims.empty()) {
    for (auto& s : shape) s = 1;
  } else {
    for (int64_t d : dims) shape[static_cast<size_t>(d)] = 1;
  }
  return grad.view(shape);
}

}  // namespace loom::autograd
