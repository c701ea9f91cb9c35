/*
 * Softmax, losses and the functional building blocks of networks (see nn_ops.h).
 *
 * Primitive (kernels in ops/cpu/nn_kernels.cpp): softmax, log_softmax and their backward
 * functions, nll_loss and its backward. The ops here validate inputs, bring them to the
 * kernels' form (contiguous for softmax; [N, C] logp and [N] targets for nll_loss, moving
 * the class dim last for K-dim inputs) and dispatch.
 * Composite (other public ops, no kernel): cross_entropy, mse_loss, embedding,
 * embedding_backward, dropout, one_hot.
 */
#include "ops/nn_ops.h"

#include "ops/autocast.h"
#include "ops/autograd_hook.h"
#include "ops/copy_ops.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/factories.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"
#include "ops/shape_ops.h"
#include "ops/view_ops.h"

namespace loom {

namespace {

// ---- softmax family ---------------------------------------------------------------------------

template <Op op>
Tensor softmax_forward(const Tensor& x, int64_t dim) {
  LOOM_AUTOCAST_FP32(softmax_forward<op>, x, dim);
  constexpr std::string_view name = op_name(op);
  check_defined(x, name);
  check_floating(x, name);
  int64_t d = wrap_dim(dim, x.dim(), name);
  if (should_record(x)) return recorded<op>({x}, DimAttrs{d}, [&] { return softmax_forward<op>(x, d); });
  // A 0-dim tensor is a softmax over one value.
  Tensor xc = x.dim() == 0 ? reshape(x, {1}) : contiguous(x);
  Tensor out = empty(xc.sizes(), xc.options());
  if (out.numel() > 0) get_kernel<op>(x.device())(out, xc, d);
  return x.dim() == 0 ? out.view({}) : out;
}

template <Op op>
Tensor softmax_backward_impl(const Tensor& grad_out, const Tensor& out, int64_t dim) {
  constexpr std::string_view name = op_name(op);
  check_defined(grad_out, name, "grad_out");
  check_defined(out, name, "out");
  check_floating(out, name);
  check_same_device(grad_out, out, name);
  LOOM_CHECK(grad_out.sizes() == out.sizes(), name, ": expected grad_out and out of the same shape, got ",
             grad_out.sizes(), " and ", out.sizes());
  int64_t d = wrap_dim(dim, out.dim(), name);
  // Recorded like a forward op: its formula (autograd/formulas/nn.cpp) differentiates it again.
  if (should_record(grad_out, out))
    return recorded<op>({grad_out, out}, DimAttrs{d},
                        [&] { return softmax_backward_impl<op>(grad_out, out, d); });
  const bool scalar = out.dim() == 0;
  Tensor yc = scalar ? reshape(out, {1}) : contiguous(out);
  Tensor gyc = contiguous(to(scalar ? reshape(grad_out, {1}) : grad_out, out.dtype()));
  Tensor grad_input = empty(yc.sizes(), yc.options());
  if (grad_input.numel() > 0) get_kernel<op>(out.device())(grad_input, gyc, yc, d);
  return scalar ? grad_input.view({}) : grad_input;
}

// ---- nll_loss: the [N, C] / [N] form of the kernels ------------------------------------------

struct NllForm {
  Tensor logp;          // [N, C], class dim last (undefined unless asked for)
  int64_t rows = 0;     // N
  Tensor target;        // [N]
  DimVector out_shape;  // shape of the unreduced loss: target's shape
};

// Validates logp/target/weight and brings them to [N, C] / [N]:
//   [C] with 0-dim target; [N, C] with [N]; [N, C, d1, ...] with [N, d1, ...] (C moved last).
// The backward reads only logp's shape: it passes with_logp = false, which saves the copy
// that moving the class dim last makes of a K-dim logp.
NllForm nll_form(const Tensor& logp, const Tensor& target, const Tensor& weight, std::string_view op,
                 bool with_logp = true) {
  check_defined(logp, op, "input");
  check_defined(target, op, "target");
  check_floating(logp, op);
  check_same_device(logp, target, op);
  LOOM_CHECK(target.dtype() == kInt64, op, ": expected target of dtype int64 (class indices), got ",
             target.dtype());
  LOOM_CHECK(logp.dim() >= 1, op, ": expected input of shape [C], [N, C] or [N, C, d1, ...], got ",
             logp.sizes());
  const int64_t class_dim = logp.dim() == 1 ? 0 : 1;
  const int64_t classes = logp.sizes()[class_dim];
  // target's expected shape: logp's without the class dim
  DimVector expected;
  for (int64_t d = 0; d < logp.dim(); ++d)
    if (d != class_dim) expected.push_back(logp.sizes()[d]);
  LOOM_CHECK(target.sizes() == IntArrayRef(expected), op, ": expected target of shape ", expected,
             " for input of shape ", logp.sizes(), ", got ", target.sizes());
  if (weight.defined()) {
    check_same_device(weight, logp, op);
    LOOM_CHECK(weight.is_floating_point() && weight.sizes() == IntArrayRef{classes}, op,
               ": expected a floating weight of shape [", classes, "] (one per class), got ", weight.dtype(),
               " ", weight.sizes());
  }
  NllForm f;
  f.out_shape = expected;
  f.rows = target.numel();
  if (!with_logp) {
    f.target = target.reshape({-1});
  } else if (logp.dim() == 1) {
    f.logp = logp.unsqueeze(0);
    f.target = target.reshape({1});
  } else if (logp.dim() == 2) {
    f.logp = logp;
    f.target = target;
  } else {
    DimVector order{0};
    for (int64_t d = 2; d < logp.dim(); ++d) order.push_back(d);
    order.push_back(1);
    f.logp = logp.permute(order).reshape({-1, classes});
    f.target = target.reshape({-1});
  }
  return f;
}

Tensor weight_like(const Tensor& weight, const Tensor& logp) {
  return weight.defined() ? contiguous(to(weight, logp.dtype())) : Tensor();
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  return softmax_forward<Op::softmax>(x, dim);
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  return softmax_forward<Op::log_softmax>(x, dim);
}

Tensor softmax_backward(const Tensor& grad_out, const Tensor& out, int64_t dim) {
  return softmax_backward_impl<Op::softmax_backward>(grad_out, out, dim);
}
Tensor log_softmax_backward(const Tensor& grad_out, const Tensor& out, int64_t dim) {
  return softmax_backward_impl<Op::log_softmax_backward>(grad_out, out, dim);
}

std::tuple<Tensor, Tensor> nll_loss_forward(const Tensor& logp, const Tensor& target, const Tensor& weight,
                                            int64_t ignore_index, Reduction reduction) {
  LOOM_AUTOCAST_FP32(nll_loss_forward, logp, target, weight, ignore_index, reduction);
  if (should_record(logp, weight)) {
    std::tuple<Tensor, Tensor> result;
    {
      AutoGradMode below_autograd(false);
      result = nll_loss_forward(logp, target, weight, ignore_index, reduction);
    }
    record<Op::nll_loss>({logp, target, weight}, {std::get<0>(result), std::get<1>(result)},
                         NllLossAttrs{reduction, ignore_index});
    return result;
  }
  NllForm f = nll_form(logp, target, weight, "nll_loss");
  const int64_t n = f.rows;
  Tensor out = reduction == Reduction::None ? empty({n}, logp.options()) : empty({}, logp.options());
  Tensor total_weight = empty({}, logp.options());
  get_kernel<Op::nll_loss>(logp.device())(out, total_weight, f.logp, f.target, weight_like(weight, logp),
                                          reduction, ignore_index);
  if (reduction == Reduction::None) out = out.view(f.out_shape);
  return {out, total_weight};
}

Tensor nll_loss(const Tensor& logp, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                Reduction reduction) {
  return std::get<0>(nll_loss_forward(logp, target, weight, ignore_index, reduction));
}

Tensor nll_loss_backward(const Tensor& grad_out, const Tensor& logp, const Tensor& target,
                         const Tensor& weight, const Tensor& total_weight, int64_t ignore_index,
                         Reduction reduction) {
  // Recorded like a forward op: its formula (autograd/formulas/nn.cpp) differentiates it again.
  if (should_record(grad_out, logp, weight, total_weight))
    return recorded<Op::nll_loss_backward>(
        {grad_out, logp, target, weight, total_weight}, NllLossAttrs{reduction, ignore_index}, [&] {
          return nll_loss_backward(grad_out, logp, target, weight, total_weight, ignore_index, reduction);
        });
  constexpr std::string_view op = "nll_loss_backward";
  NllForm f = nll_form(logp, target, weight, op, /*with_logp=*/false);
  check_defined(grad_out, op, "grad_out");
  check_same_device(grad_out, logp, op);
  if (reduction == Reduction::None) {
    LOOM_CHECK(grad_out.sizes() == IntArrayRef(f.out_shape), op, ": expected grad_out of shape ", f.out_shape,
               " (reduction none), got ", grad_out.sizes());
  } else {
    LOOM_CHECK(grad_out.numel() == 1, op, ": expected a one-element grad_out for a reduced loss, got shape ",
               grad_out.sizes());
  }
  Tensor tw;
  if (reduction == Reduction::Mean) {
    check_defined(total_weight, op, "total_weight");
    LOOM_CHECK(total_weight.numel() == 1, op, ": expected a one-element total_weight, got shape ",
               total_weight.sizes());
    tw = contiguous(to(total_weight, logp.dtype()));
  }
  Tensor go = contiguous(to(grad_out, logp.dtype()));
  go = reduction == Reduction::None ? go.reshape({-1}) : go.reshape({});
  const int64_t classes = logp.dim() == 1 ? logp.sizes()[0] : logp.sizes()[1];
  Tensor grad = zeros({f.rows, classes}, logp.options());
  get_kernel<Op::nll_loss_backward>(logp.device())(grad, go, f.target, weight_like(weight, logp), tw,
                                                   reduction, ignore_index);
  if (logp.dim() <= 2) return grad.view(logp.sizes());
  // [N * d1 * ..., C] -> [N, d1, ..., C] -> [N, C, d1, ...]
  DimVector moved{logp.sizes()[0]}, order{0, logp.dim() - 1};
  for (int64_t d = 2; d < logp.dim(); ++d) moved.push_back(logp.sizes()[d]);
  moved.push_back(logp.sizes()[1]);
  for (int64_t d = 1; d < logp.dim() - 1; ++d) order.push_back(d);
  return contiguous(grad.view(moved).permute(order));
}

// PyTorch 1.13's rule (aten/src/ATen/native/LossNLL.cpp, cross_entropy_loss_label_smoothing):
//   loss = (1 - eps) * nll + eps / C * smooth,  smooth_i = -sum_c w_c * logp_ic
// with smooth_i = 0 for ignored targets; the mean divides smooth by the same normaliser
// as nll (the summed weights of the counted targets).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                     double label_smoothing, Reduction reduction) {
  LOOM_AUTOCAST_FP32(cross_entropy, logits, target, weight, ignore_index, label_smoothing, reduction);
  constexpr std::string_view op = "cross_entropy";
  check_defined(logits, op, "input");
  check_defined(target, op, "target");
  LOOM_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, op,
             ": label_smoothing must be between 0.0 and 1.0, got ", label_smoothing);
  LOOM_CHECK(logits.dim() >= 1, op, ": expected input of shape [C], [N, C] or [N, C, d1, ...], got ",
             logits.sizes());
  const int64_t class_dim = logits.dim() == 1 ? 0 : 1;
  Tensor logp = log_softmax(logits, class_dim);
  if (label_smoothing == 0.0) return nll_loss(logp, target, weight, ignore_index, reduction);

  auto [nll, total_weight] = nll_loss_forward(logp, target, weight, ignore_index, reduction);
  const int64_t classes = logits.sizes()[class_dim];
  Tensor weighted = logp;
  if (weight.defined()) {
    DimVector wshape(static_cast<size_t>(logits.dim()), 1);
    wshape[class_dim] = classes;
    weighted = mul(logp, weight.to(logp.dtype()).reshape(wshape));
  }
  Tensor smooth = neg(sum(weighted, {class_dim}));
  smooth = masked_fill(smooth, eq(target, Scalar(ignore_index)), 0);
  if (reduction == Reduction::Mean) {
    smooth = div(sum(smooth), total_weight);
  } else if (reduction == Reduction::Sum) {
    smooth = sum(smooth);
  }
  return add(mul(nll, 1.0 - label_smoothing), mul(smooth, label_smoothing / static_cast<double>(classes)));
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  LOOM_AUTOCAST_FP32(mse_loss, input, target, reduction);
  constexpr std::string_view op = "mse_loss";
  check_defined(input, op, "input");
  check_defined(target, op, "target");
  check_floating(input, op);
  broadcast_shapes(input.sizes(), target.sizes(), op);  // throws naming mse_loss and both shapes
  Tensor diff = sub(input, target);
  Tensor sq = mul(diff, diff);
  switch (reduction) {
    case Reduction::None:
      return sq;
    case Reduction::Sum:
      return sum(sq);
    case Reduction::Mean:
      break;
  }
  return mean(sq);
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  constexpr std::string_view op = "embedding";
  check_defined(weight, op, "weight");
  check_defined(indices, op, "indices");
  check_same_device(weight, indices, op);
  LOOM_CHECK(weight.dim() == 2, op, ": expected weight of shape [num_embeddings, D], got ", weight.sizes());
  LOOM_CHECK(indices.dtype() == kInt64 || indices.dtype() == kInt32, op,
             ": expected indices of dtype int64 or int32, got ", indices.dtype());
  DimVector out_shape(indices.sizes());
  out_shape.push_back(weight.sizes()[1]);
  Tensor rows;
  try {
    rows = index_select(weight, 0, to(indices, kInt64).reshape({-1}));
  } catch (const Error& e) {  // an index out of range: say which op the user called
    LOOM_FAIL(op, ": ", e.what());
  }
  return rows.view(out_shape);
}

Tensor embedding_backward(const Tensor& grad_out, const Tensor& indices, int64_t num_embeddings) {
  constexpr std::string_view op = "embedding_backward";
  check_defined(grad_out, op, "grad_out");
  check_defined(indices, op, "indices");
  check_same_device(grad_out, indices, op);
  LOOM_CHECK(num_embeddings >= 0, op, ": expected num_embeddings >= 0, got ", num_embeddings);
  LOOM_CHECK(indices.dtype() == kInt64 || indices.dtype() == kInt32, op,
             ": expected indices of dtype int64 or int32, got ", indices.dtype());
  bool match = grad_out.dim() == indices.dim() + 1;
  for (int64_t d = 0; match && d < indices.dim(); ++d) match = grad_out.sizes()[d] == indices.sizes()[d];
  LOOM_CHECK(match, op, ": expected grad_out of shape [*indices.shape, D] with indices shape ",
             indices.sizes(), ", got ", grad_out.sizes());
  const int64_t dim = grad_out.sizes().back();
  Tensor grad_weight = zeros({num_embeddings, dim}, grad_out.options());
  return index_add(grad_weight, 0, to(indices, kInt64).reshape({-1}), grad_out.reshape({-1, dim}));
}

Tensor dropout(const Tensor& x, double p, bool training, Generator* generator) {
  constexpr std::string_view op = "dropout";
  check_defined(x, op);
  LOOM_CHECK(p >= 0.0 && p <= 1.0, op, ": probability has to be between 0 and 1, got ", p);
  if (!training || p == 0.0) return x;
  check_floating(x, op);
  if (p == 1.0) {
    // All dropped; in the graph as where(true, 0, x), so that x still gets its (zero) gradient.
    if (should_record(x)) return masked_fill(x, ones(x.sizes(), x.options().dtype(kBool)), 0);
    return zeros_like(x);
  }
  Tensor mask = empty(x.sizes(), x.options());
  bernoulli_(mask, 1.0 - p, generator);  // 1 = keep, with probability 1 - p
  return mul(x, mul(mask, 1.0 / (1.0 - p)));
}

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  constexpr std::string_view op = "one_hot";
  check_defined(indices, op);
  LOOM_CHECK(indices.dtype() == kInt64, op, ": expected an int64 tensor of class indices, got ",
             indices.dtype());
  DimVector out_shape(indices.sizes());
  if (indices.numel() == 0) {
    LOOM_CHECK(num_classes >= 0, op, ": cannot infer the number of classes from an empty tensor of shape ",
               indices.sizes());
    out_shape.push_back(num_classes);
    return zeros(out_shape, indices.options());
  }
  const int64_t lo = min(indices).item<int64_t>(), hi = max(indices).item<int64_t>();
  LOOM_CHECK(lo >= 0, op, ": class values must be non-negative, got ", lo);
  if (num_classes < 0) {
    num_classes = hi + 1;
  } else {
    LOOM_CHECK(hi < num_classes, op, ": class values must be smaller than num_classes = ", num_classes,
               ", got ", hi);
  }
  Tensor classes = arange(0, num_classes, 1, indices.options());
  return to(eq(indices.unsqueeze(-1), classes), kInt64);
}

// ---- Tensor methods ------------------------------------------------------------------------
Tensor Tensor::softmax(int64_t dim) const {
  return loom::softmax(*this, dim);
}
Tensor Tensor::log_softmax(int64_t dim) const {
  return loom::log_softmax(*this, dim);
}

}  // namespace loom
