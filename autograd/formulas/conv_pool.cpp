/*
 * Gradients of convolution and pooling, through the ops layer's backward functions
 * (conv2d_backward_input, max_pool2d_backward, ...). Those are recorded without a formula of
 * their own: the first derivative is exact and fast, and a second derivative through them is a
 * clear error ("the derivative of conv2d_backward_input is not implemented"), not a silent 0.
 */
#include "autograd/formulas/formulas.h"

namespace loom::autograd {

void register_conv_pool_formulas() {
  // inputs (x, weight, bias); bias may be absent (undefined, needs no gradient)
  define_formula<Op::conv2d>(Save{.inputs = 0b11}, [](const GradContext<Conv2dParams>& c, const Grads& g) {
    const Conv2dParams& p = c.attrs();
    Tensor grad_x = if_needed(c.needs_grad(0),
                              [&] { return conv2d_backward_input(g[0], c.input(1), c.input_sizes(0), p); });
    Tensor grad_w, grad_b;
    if (c.needs_grad(1)) {
      std::tie(grad_w, grad_b) =
          conv2d_backward_weight(g[0], c.input(0), c.input_sizes(1), c.needs_grad(2), p);
    } else if (c.needs_grad(2)) {
      grad_b = g[0].sum({0, 2, 3});
    }
    return Grads{grad_x, grad_w, grad_b};
  });

  // outputs (values, indices): the gradient goes to the input element each window picked
  define_formula<Op::max_pool2d>(
      Save{.outputs = 0b10}, [](const GradContext<Pool2dParams>& c, const Grads& g) {
        return Grads{max_pool2d_backward(g[0], c.output(1), c.input_sizes(0), c.attrs())};
      });

  define_formula<Op::avg_pool2d>(Save{}, [](const GradContext<Pool2dParams>& c, const Grads& g) {
    return Grads{avg_pool2d_backward(g[0], c.input_sizes(0), c.attrs())};
  });

  define_formula<Op::adaptive_avg_pool2d>(Save{}, [](const GradContext<NoAttrs>& c, const Grads& g) {
    return Grads{adaptive_avg_pool2d_backward(g[0], c.input_sizes(0))};
  });
}

}  // namespace loom::autograd
