/*
 * Gradients of the normalisation ops. Inputs (x, weight, bias), weight and bias possibly
 * absent; outputs (out, mean, invstd / rstd), whose statistics the formulas read back
 * instead of recomputing them. Only out is differentiated: the statistics are returned
 * without history (ops/norm_ops.cpp).
 *
 * Training-mode batch_norm and layer_norm call their fused backward kernels, and the kernels'
 * own gradients (batch_norm_backward, layer_norm_backward) are written with forward ops, so
 * create_graph can differentiate them again. Those treat the statistics as inputs; for a
 * second derivative to see how the statistics move with x, the first backward hands the
 * kernels statistics that carry the derivative of recomputing them from x (under create_graph
 * only, so a plain backward costs nothing more). Eval-mode batch_norm is an affine map per
 * channel with constant statistics, so its gradient is written with forward ops directly.
 */
#include "autograd/formulas/formulas.h"
#include "core/grad_mode.h"

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

// The trailing `count` dims of a rank-`rank` tensor.
DimVector trailing_dims(int64_t rank, size_t count) {
  DimVector dims;
  for (int64_t d = rank - static_cast<int64_t>(count); d < rank; ++d) dims.push_back(d);
  return dims;
}

// `saved`'s value (bit for bit) with the derivative of `recomputed`, which equals it up to
// rounding: the saved statistics, made differentiable in x.
Tensor with_derivative_of(const Tensor& saved, const Tensor& recomputed) {
  return saved.detach() + (recomputed - recomputed.detach());
}

// The statistics (mean, 1 / sqrt(var + eps)) over `dims` that the fused backward kernels read:
// the saved ones, which under create_graph carry their derivative in x.
std::pair<Tensor, Tensor> statistics(const Tensor& x, IntArrayRef dims, double eps, const Tensor& mean,
                                     const Tensor& rstd) {
  if (!GradMode::is_enabled()) return {mean, rstd};
  return {with_derivative_of(mean, x.mean(dims)),
          with_derivative_of(rstd, (x.var(dims, /*correction=*/0) + eps).rsqrt())};
}

// Where a normalisation's statistics and parameters sit among x's dims.
struct NormLayout {
  DimVector stat_dims;    // the dims one statistic is taken over
  DimVector param_dims;   // the dims a parameter's gradient is summed over
  DimVector stat_shape;   // a statistic viewed to broadcast against x
  DimVector param_shape;  // a parameter viewed to broadcast against x
};

NormLayout batch_norm_layout(const Tensor& x) {
  DimVector per_channel_shape(static_cast<size_t>(x.dim()), 1);
  per_channel_shape[1] = x.size(1);
  const DimVector dims = non_channel_dims(x.dim());
  return {dims, dims, per_channel_shape, per_channel_shape};
}

NormLayout layer_norm_layout(const Tensor& x, IntArrayRef normalized_shape) {
  const size_t lead = static_cast<size_t>(x.dim()) - normalized_shape.size();
  DimVector leading_dims, stat_shape(x.sizes());
  for (size_t d = 0; d < stat_shape.size(); ++d) {
    if (d < lead) leading_dims.push_back(static_cast<int64_t>(d));
    else stat_shape[d] = 1;
  }
  return {trailing_dims(x.dim(), normalized_shape.size()), leading_dims, stat_shape, DimVector(normalized_shape)};
}

// grads with the ones no input needs left out (undefined).
template <class Attrs>
Grads only_needed(const GradContext<Attrs>& c, Grads grads) {
  for (size_t i = 0; i < grads.size(); ++i)
    if (!c.needs_grad(i)) grads[i] = Tensor();
  return grads;
}

// t summed over dims (none: t itself; sum() would read empty dims as all of them).
Tensor sum_over(const Tensor& t, IntArrayRef dims) { return dims.empty() ? t : t.sum(dims); }

// The gradients of the fused normalisation backward with respect to its inputs. With
// xhat = (x - mean) rstd, h = grad w (grad without a weight) and mean_R over the statistic's dims:
//   grad_x = rstd (h - mean_R(h) - xhat mean_R(h xhat)),  grad_w = sum_P(grad xhat),  grad_b = sum_P(grad)
// Given the gradients (a, b, c) of (grad_x, grad_w, grad_b), and q = rstd (a - mean_R(a) -
// xhat mean_R(a xhat)) (grad_x's map applied to a: it is self-adjoint in h):
//   d/dgrad = q w + b xhat + c                  d/dw = sum_P(q grad)
//   d/dxhat = b grad - rstd (a mean_R(h xhat) + h mean_R(a xhat))
//   d/dx = rstd d/dxhat    d/dmean = -rstd sum_R(d/dxhat)
//   d/drstd = sum_R(a (h - mean_R(h) - xhat mean_R(h xhat)) + d/dxhat (x - mean))
struct NormBackwardInputs {
  Tensor grad, x, weight, mean, rstd;
};
struct NormBackwardGrads {
  Tensor grad, x, weight, mean, rstd;
};

NormBackwardGrads normalization_backward_grads(const NormLayout& layout, const NormBackwardInputs& in,
                                               const Tensor& a, const Tensor& b, const Tensor& c) {
  auto mean_r = [&](const Tensor& t) { return t.mean(layout.stat_dims, /*keepdim=*/true); };
  Tensor rstd = in.rstd.view(layout.stat_shape);
  Tensor w = in.weight.defined() ? in.weight.view(layout.param_shape) : Tensor();
  Tensor centered = in.x - in.mean.view(layout.stat_shape);
  Tensor xhat = centered * rstd;
  Tensor h = w.defined() ? in.grad * w : in.grad;
  Tensor h_xhat = mean_r(h * xhat), a_xhat = mean_r(a * xhat);
  Tensor q = rstd * (a - mean_r(a) - xhat * a_xhat);

  Tensor d_xhat = (rstd * (a * h_xhat + h * a_xhat)).neg();
  if (b.defined()) d_xhat = d_xhat + in.grad * b.view(layout.param_shape);
  Tensor d_grad = w.defined() ? q * w : q;
  if (b.defined()) d_grad = d_grad + xhat * b.view(layout.param_shape);
  if (c.defined()) d_grad = d_grad + c.view(layout.param_shape);
  NormBackwardGrads out;
  out.grad = d_grad;
  out.x = rstd * d_xhat;
  out.weight = w.defined() ? sum_over(q * in.grad, layout.param_dims).view(in.weight.sizes()) : Tensor();
  // The statistics may come in any shape with one element per statistic.
  out.mean = (rstd * d_xhat.sum(layout.stat_dims, /*keepdim=*/true)).neg().reshape(in.mean.sizes());
  out.rstd = (a * (h - mean_r(h) - xhat * h_xhat) + d_xhat * centered)
                 .sum(layout.stat_dims, /*keepdim=*/true)
                 .reshape(in.rstd.sizes());
  return out;
}

}  // namespace

void register_norm_formulas() {
  // Saves x, weight, save_mean and save_invstd (running statistics in eval).
  define_formula<Op::batch_norm>(
      Save{.inputs = 0b011, .outputs = 0b110}, [](const GradContext<BatchNormAttrs>& c, const Grads& g) {
        Tensor x = c.input(0), weight = c.input(1), mean = c.output(1), invstd = c.output(2);
        const int64_t rank = x.dim();
        if (c.attrs().training) {
          std::tie(mean, invstd) = statistics(x, non_channel_dims(rank), c.attrs().eps, mean, invstd);
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
  // inputs (grad, x, weight, save_mean, save_invstd), outputs (grad_x, grad_w, grad_b), the
  // last two only with a weight
  define_formula<Op::batch_norm_backward>(
      Save{.inputs = 0b11111}, [](const GradContext<NoAttrs>& c, const Grads& g) {
        NormBackwardInputs in{c.input(0), c.input(1), c.input(2), c.input(3), c.input(4)};
        const bool affine = g.size() > 1;
        NormBackwardGrads d = normalization_backward_grads(batch_norm_layout(in.x), in, g[0],
                                                           affine ? g[1] : Tensor(), affine ? g[2] : Tensor());
        return only_needed(c, Grads{d.grad, d.x, d.weight, d.mean, d.rstd});
      });

  define_formula<Op::layer_norm>(
      Save{.inputs = 0b011, .outputs = 0b110}, [](const GradContext<LayerNormAttrs>& c, const Grads& g) {
        const LayerNormAttrs& a = c.attrs();
        Tensor x = c.input(0);
        auto [mean, rstd] =
            statistics(x, trailing_dims(x.dim(), a.normalized_shape.size()), a.eps, c.output(1), c.output(2));
        auto [gx, gw, gb] = layer_norm_backward(g[0], x, a.normalized_shape, mean, rstd, c.input(1));
        return Grads{c.needs_grad(0) ? gx : Tensor(), c.needs_grad(1) ? gw : Tensor(),
                     c.needs_grad(2) ? gb : Tensor()};
      });
  // inputs (grad, x, mean, rstd, weight), outputs (grad_x, grad_w, grad_b)
  define_formula<Op::layer_norm_backward>(
      Save{.inputs = 0b11111}, [](const GradContext<LayerNormAttrs>& c, const Grads& g) {
        NormBackwardInputs in{c.input(0), c.input(1), c.input(4), c.input(2), c.input(3)};
        NormBackwardGrads d = normalization_backward_grads(
            layer_norm_layout(in.x, c.attrs().normalized_shape), in, g[0], g[1], g[2]);
        return only_needed(c, Grads{d.grad, d.x, d.mean, d.rstd, d.weight});
      });
}

}  // namespace loom::autograd
