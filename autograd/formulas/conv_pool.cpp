/*
 * Gradients of convolution and pooling, through the ops layer's backward functions
 * (conv2d_backward_input, max_pool2d_backward, ...), and the gradients of those backward
 * functions in turn, so that create_graph can differentiate conv2d and the pools again. Each
 * backward function is linear in grad_out, and its derivative is the forward op it is the
 * adjoint of: avg_pool2d_backward's is avg_pool2d, conv2d_backward_input's is conv2d.
 */
#include "autograd/formulas/formulas.h"

namespace loom::autograd {

namespace {

Tensor conv(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  return conv2d(x, weight, bias, p.stride, p.padding, p.dilation, p.groups);
}

}  // namespace

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

  // inputs (grad_out, weight); grad_x = W^T grad_out is bilinear: <g, W^T grad_out> is
  // <conv2d(g, W), grad_out>, read as a function of grad_out or of W.
  define_formula<Op::conv2d_backward_input>(
      Save{.inputs = 0b11}, [](const GradContext<Conv2dParams>& c, const Grads& g) {
        const Conv2dParams& p = c.attrs();
        return Grads{if_needed(c.needs_grad(0), [&] { return conv(g[0], c.input(1), Tensor(), p); }),
                     if_needed(c.needs_grad(1), [&] {
                       return std::get<0>(conv2d_backward_weight(c.input(0), g[0], c.input_sizes(1), false, p));
                     })};
      });

  // inputs (grad_out, x), outputs (grad_w, grad_b when asked for); grad_b = sum(grad_out), so
  // its gradient g[1] reaches grad_out as conv2d's bias does.
  define_formula<Op::conv2d_backward_weight>(
      Save{.inputs = 0b11}, [](const GradContext<Conv2dParams>& c, const Grads& g) {
        const Conv2dParams& p = c.attrs();
        const Tensor grad_bias = g.size() > 1 ? g[1] : Tensor();
        return Grads{if_needed(c.needs_grad(0), [&] { return conv(c.input(1), g[0], grad_bias, p); }),
                     if_needed(c.needs_grad(1), [&] {
                       return conv2d_backward_input(c.input(0), g[0], c.input_sizes(1), p);
                     })};
      });

  // outputs (values, indices): the gradient goes to the input element each window picked
  define_formula<Op::max_pool2d>(
      Save{.outputs = 0b10}, [](const GradContext<Pool2dParams>& c, const Grads& g) {
        return Grads{max_pool2d_backward(g[0], c.output(1), c.input_sizes(0), c.attrs())};
      });
  // inputs (grad_out, indices): each window reads back the element it scattered to (indices are
  // flat within each H*W plane)
  define_formula<Op::max_pool2d_backward>(
      Save{.inputs = 0b10}, [](const GradContext<Pool2dParams>& c, const Grads& g) {
        Tensor indices = c.input(1);
        const int64_t n = indices.size(0), channels = indices.size(1);
        Tensor planes = g[0].reshape({n, channels, g[0].size(2) * g[0].size(3)});
        Tensor picked = planes.gather(2, indices.reshape({n, channels, indices.size(2) * indices.size(3)}));
        return Grads{picked.view(indices.sizes()), Tensor()};
      });

  define_formula<Op::avg_pool2d>(Save{}, [](const GradContext<Pool2dParams>& c, const Grads& g) {
    return Grads{avg_pool2d_backward(g[0], c.input_sizes(0), c.attrs())};
  });
  define_formula<Op::avg_pool2d_backward>(Save{}, [](const GradContext<Pool2dParams>& c, const Grads& g) {
    const Pool2dParams& p = c.attrs();
    return Grads{avg_pool2d(g[0], p.kernel, p.stride, p.padding, p.ceil_mode, p.count_include_pad)};
  });

  define_formula<Op::adaptive_avg_pool2d>(Save{}, [](const GradContext<NoAttrs>& c, const Grads& g) {
    return Grads{adaptive_avg_pool2d_backward(g[0], c.input_sizes(0))};
  });
  define_formula<Op::adaptive_avg_pool2d_backward>(Save{}, [](const GradContext<NoAttrs>& c, const Grads& g) {
    IntArrayRef pooled = c.input_sizes(0);
    return Grads{adaptive_avg_pool2d(g[0], {pooled[2], pooled[3]})};
  });
}

}  // namespace loom::autograd
