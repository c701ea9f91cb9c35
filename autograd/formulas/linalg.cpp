/*
 * Gradients of the matrix products. Op::matmul stands for matmul, mm and bmm (inputs a, b,
 * torch.matmul's semantics) and for linear (inputs x, weight, bias; out = x W^T + b). The
 * gradients are matmuls themselves, so they are differentiable again (create_graph).
 */
#include "autograd/formulas/formulas.h"

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
// both over all leading dims at once.
Grads linear_grad(const GradContext<MatmulAttrs>& c, const Tensor& grad) {
  const int64_t out_features = c.input_sizes(1)[0], in_features = c.input_sizes(1)[1];
  Tensor g2 = grad.reshape({-1, out_features});
  auto grad_weight = [&] { return matmul(g2.t(), c.input(0).reshape({-1, in_features})); };
  return Grads{if_needed(c.needs_grad(0), [&] { return matmul(grad, c.input(1)); }),
               if_needed(c.needs_grad(1), grad_weight),
               if_needed(c.needs_grad(2), [&] { return g2.sum({0}); })};
}

}  // namespace

void register_linalg_formulas() {
  define_formula<Op::matmul>(Save{.inputs = 0b11}, [](const GradContext<MatmulAttrs>& c, const Grads& g) {
    return c.attrs().linear ? linear_grad(c, g[0]) : matmul_grad(c, g[0]);
  });
}

}  // namespace loom::autograd
