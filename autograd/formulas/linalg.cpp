/*
 * Gradients of the matrix products. Op::matmul stands for matmul, mm and bmm (inputs a, b,
 * torch.matmul's semantics) and for linear (inputs x, weight, bias; out = x W^T + b). The
 * gradients are matmuls themselves, so they are differentiable again (create_graph).
 */
#include <array>
#include <tuple>

#include "autograd/formulas/formulas.h"
#include "core/grad_mode.h"
#include "ops/autocast.h"

namespace loom::autograd {

namespace {

// out = a @ b: grad_a = g @ b^T, grad_b = a^T @ g, on the operands as matmul sees them (a 1-D a
// as [1, K], a 1-D b as [K, 1]), then back to each operand's own shape: the promoted unit dim
// removed and broadcast batch dims summed.
Grads matmul_grad(const GradContext<MatmulAttrs>& c, const Tensor& grad) {
  Tensor a = c.input(0), b = c.input(1);
  const int64_t da = a.dim(), db = b.dim();
  if (da == 1 && db == 1)  // dot product
    return Grads{if_needed(c.needs_grad(0), [&] { return grad * b; }),
                 if_needed(c.needs_grad(1), [&] { return grad * a; })};
  // A [*, M, K] @ B [*, K, N] = G [*, M, N]
  Tensor A = da == 1 ? a.unsqueeze(0) : a;
  Tensor B = db == 1 ? b.unsqueeze(1) : b;
  Tensor G = da == 1 ? grad.unsqueeze(-2) : db == 1 ? grad.unsqueeze(-1) : grad;
  Tensor grad_a = if_needed(c.needs_grad(0), [&] {
    Tensor r = matmul(G, B.transpose(-1, -2));
    return sum_to(da == 1 ? r.squeeze(-2) : r, a.sizes());
  });
  Tensor grad_b = if_needed(c.needs_grad(1), [&] {
    Tensor r;
    if (B.dim() == 2 && A.dim() > 2)  // B shared by the whole batch: one GEMM over all rows
      r = matmul(A.reshape({-1, A.size(-1)}).t(), G.reshape({-1, G.size(-1)}));
    else
      r = matmul(A.transpose(-1, -2), G);
    return sum_to(db == 1 ? r.squeeze(-1) : r, b.sizes());
  });
  return Grads{grad_a, grad_b};
}

// out = x W^T + b, x [*, in], W [out, in]: grad_x = g W, grad_W = g^T x and grad_b = sum of g,
// both over all leading dims at once; the latter two in one op (linear_weight_grad, whose CUDA
// kernel sums the bias gradient in the GEMM's epilogue) unless autocast would have lowered the
// GEMM or the dtypes differ, where the separate ops keep what autocast does.
Grads linear_grads(const Tensor& x, const Tensor& weight, const std::array<bool, 3>& needs, const Tensor& grad) {
  const int64_t out_features = weight.size(0), in_features = weight.size(1);
  Tensor g2 = grad.reshape({-1, out_features});
  Tensor grad_x = if_needed(needs[0], [&] { return matmul(grad, weight); });
  if (needs[1] && g2.dtype() == x.dtype() && !autocast_active(g2)) {
    auto [grad_weight, grad_bias] = linear_weight_grad(g2, x.reshape({-1, in_features}), needs[2]);
    return Grads{grad_x, grad_weight, grad_bias};
  }
  auto grad_weight = [&] { return matmul(g2.t(), x.reshape({-1, in_features})); };
  return Grads{grad_x, if_needed(needs[1], grad_weight), if_needed(needs[2], [&] { return g2.sum({0}); })};
}

Grads linear_grad(const GradContext<MatmulAttrs>& c, const Tensor& grad) {
  return linear_grads(c.input(0), c.input(1), {c.needs_grad(0), c.needs_grad(1), c.needs_grad(2)}, grad);
}

}  // namespace

void register_linalg_formulas() {
  define_formula<Op::matmul>(Save{.inputs = 0b11}, [](const GradContext<MatmulAttrs>& c, const Grads& g) {
    return c.attrs().linear ? linear_grad(c, g[0]) : matmul_grad(c, g[0]);
  });
  // out = act(h), h = x W^T + b (output 1, kept for the GELUs): grad_h as the activation's own
  // formula computes it, then linear's gradients. Under create_graph h is recomputed with linear
  // (the same values), so that the second derivative reaches x, W and b through it.
  define_formula<Op::linear_activation>(
      Save{.inputs = 0b111, .outputs = 0b11, .saved_only_outputs = 0b10},
      [](const GradContext<LinearActivationAttrs>& c, const Grads& g) {
        const Activation act = c.attrs().activation;
        auto h = [&] { return GradMode::is_enabled() ? linear(c.input(0), c.input(1), c.input(2)) : c.output(1); };
        Tensor grad_h = activation_backward(g[0], act == Activation::Relu ? Tensor() : h(), c.output(0), act);
        return linear_grads(c.input(0), c.input(1), {c.needs_grad(0), c.needs_grad(1), c.needs_grad(2)}, grad_h);
      });
  // out = hidden W2^T + b2, hidden = act(pre) (output 1), pre = x W1^T + b1 (output 2, the
  // GELUs'). The gradient at pre and b1's come from one op, linear_input_grad_activation (on
  // CUDA one GEMM with the tanh GELU's derivative and the bias gradient in its epilogue), then
  // W1's and x's from it. Under create_graph, or where the dtypes differ or autocast would lower
  // the products (as linear_grads decides), the unfused ops instead: the same gradients, which
  // can be differentiated again (hidden recomputed, as above).
  define_formula<Op::linear_activation_linear>(
      Save{.inputs = 0b01111, .outputs = 0b110, .saved_only_outputs = 0b110},
      [](const GradContext<LinearActivationAttrs>& c, const Grads& g) {
        const Activation act = c.attrs().activation;
        const Tensor x = c.input(0), w1 = c.input(1), w2 = c.input(3);
        const std::array<bool, 3> first{c.needs_grad(0), c.needs_grad(1), c.needs_grad(2)};
        const bool needs_pre = first[0] || first[1] || first[2];
        Tensor g2 = g[0].reshape({-1, w2.size(0)});
        if (GradMode::is_enabled() || g2.dtype() != x.dtype() || autocast_active(g2)) {
          Tensor hidden = c.output(1), pre = act == Activation::Relu ? Tensor() : c.output(2);
          if (GradMode::is_enabled()) {  // recomputed with the public ops, whose outputs all carry history
            pre = linear(x, w1, c.input(2));
            hidden =
                act == Activation::Relu ? relu(pre) : gelu(pre, act == Activation::Gelu ? "none" : "tanh");
          }
          Grads second = linear_grads(hidden, w2, {needs_pre, c.needs_grad(3), c.needs_grad(4)}, g[0]);
          if (!needs_pre) return Grads{Tensor(), Tensor(), Tensor(), second[1], second[2]};
          Grads r = linear_grads(x, w1, first, activation_backward(second[0], pre, hidden, act));
          return Grads{r[0], r[1], r[2], second[1], second[2]};
        }
        const int64_t hidden_features = w1.size(0);
        Tensor hidden = c.output(1).reshape({-1, hidden_features});
        Tensor pre = act == Activation::Relu ? Tensor() : c.output(2).reshape({-1, hidden_features});
        Tensor grad_w2, grad_b2;
        if (c.needs_grad(3))
          std::tie(grad_w2, grad_b2) = linear_weight_grad(g2, hidden, c.needs_grad(4));
        else if (c.needs_grad(4))
          grad_b2 = g2.sum({0});
        if (!needs_pre) return Grads{Tensor(), Tensor(), Tensor(), grad_w2, grad_b2};
        auto [grad_pre, grad_b1] = linear_input_grad_activation(g2, w2, pre, hidden, act, first[2]);
        Tensor x2 = x.reshape({-1, x.size(-1)});
        Tensor grad_w1 = first[1] ? linear_weight_grad(grad_pre, x2, false).first : Tensor();
        Tensor grad_x = first[0] ? matmul(grad_pre, w1).view(x.sizes()) : Tensor();
        return Grads{grad_x, grad_w1, grad_b1, grad_w2, grad_b2};
      });
  // (grad_weight, grad_bias) = (grad^T x, column sums of grad): d grad = x gw^T + gb (broadcast
  // over the rows), d x = grad gw.
  define_formula<Op::linear_weight_grad>(Save{.inputs = 0b11}, [](const GradContext<NoAttrs>& c, const Grads& g) {
    Tensor grad = c.input(0), x = c.input(1);
    Tensor gw = g[0], gb = g.size() > 1 ? g[1] : Tensor();
    Tensor d_grad = if_needed(c.needs_grad(0), [&] {
      Tensor r = gw.defined() ? matmul(x, gw.t()) : Tensor();
      if (gb.defined()) r = r.defined() ? r + gb : gb.unsqueeze(0).expand(grad.sizes()).contiguous();
      return r;
    });
    Tensor d_x = if_needed(c.needs_grad(1), [&] { return gw.defined() ? matmul(grad, gw) : Tensor(); });
    return Grads{d_grad, d_x};
  });
}

}  // namespace loom::autograd
