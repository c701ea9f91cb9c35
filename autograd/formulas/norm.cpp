/*
 * Gradients of the normalisation ops. Inputs (x, weight, bias), weight and bias possibly
 * absent; outputs (out, mean, invstd / rstd), whose statistics the formulas read back
 * instead of recomputing them. Only out is differentiated: the statistics are returned
 * without history (ops/norm_ops.cpp).
 *
 * Training-mode batch_norm and layer_norm call their fused backward kernels (first order
 * only: those are recorded without a formula, so a second derivative fails with a clear
 * error). Eval-mode batch_norm is an affine map per channel with constant statistics, so its
 * gradient is written with forward ops (and can be differentiated again).
 */
#include "autograd/formulas/formulas.h"

namespace loom::autograd {

namespace {

// x [N, C, *]: every dim but the channel dim.
DimVector non_channel_dims(int64_t rank) {
  DimVector dims{0};
  for (int64_t d = 2; d < rank; ++d) dims.push_back(d);
  return dims;
}

// A per-channel [C] tensor shaped [1, C, 1, ...] to broadcast against x.
Tensor per_channel(const Tensor& t, int64_t rank) {
  DimVector shape(static_cast<size_t>(rank), 1);
  shape[1] = t.numel();
  return t.view(shape);
}

}  // namespace

void register_norm_formulas() {
  // Saves x, weight, save_mean and save_invstd (running statistics in eval).
  define_formula<Op::batch_norm>(
      Save{.inputs = 0b011, .outputs = 0b110}, [](const GradContext<BatchNormAttrs>& c, const Grads& g) {
        Tensor x = c.input(0), weight = c.input(1), mean = c.output(1), invstd = c.output(2);
        const int64_t rank = x.dim();
        if (c.attrs().training) {
          auto [gx, gw, gb] = batch_norm_backward(g[0], x, weight, mean, invstd);
          // Without a weight the kernel computes no parameter gradients; a lone bias gets sum(g).
          if (!weight.defined() && c.needs_grad(2)) gb = g[0].sum(non_channel_dims(rank));
          return Grads{c.needs_grad(0) ? gx : Tensor(), c.needs_grad(1) ? gw : Tensor(),
                       c.needs_grad(2) ? gb : Tensor()};
        }
        // eval: y = (x - mean) * invstd * w + b with constant mean, invstd:
        //   dx = g * w * invstd, dw = sum(g * (x - mean) * invstd), db = sum(g)
        return Grads{
            if_needed(c.needs_grad(0),
                      [&] { return g[0] * per_channel(weight.defined() ? invstd * weight : invstd, rank); }),
            if_needed(c.needs_grad(1),
                      [&] {
                        Tensor xhat = (x - per_channel(mean, rank)) * per_channel(invstd, rank);
                        return (g[0] * xhat).sum(non_channel_dims(rank));
                      }),
            if_needed(c.needs_grad(2), [&] { return g[0].sum(non_channel_dims(rank)); })};
      });

  define_formula<Op::layer_norm>(
      Save{.inputs = 0b011, .outputs = 0b110}, [](const GradContext<LayerNormAttrs>& c, const Grads& g) {
        auto [gx, gw, gb] = layer_norm_backward(g[0], c.input(0), c.attrs().normalized_shape, c.output(1),
                                                c.output(2), c.input(1));
        return Grads{c.needs_grad(0) ? gx : Tensor(), c.needs_grad(1) ? gw : Tensor(),
                     c.needs_grad(2) ? gb : Tensor()};
      });
}

}  // namespace loom::autograd
