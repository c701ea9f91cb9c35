/*
 * Scaled dot-product attention, as torch.nn.functional.scaled_dot_product_attention:
 *
 *   softmax(q k^T * scale + mask) v
 *
 * written out with existing ops (the math path: the reference, and what runs for dropout, the
 * CPU, float64 and whatever the fused kernels do not take), or through flash_attention, a fused
 * primitive op that never materialises the [L, S] scores (online softmax over key tiles; its
 * backward recomputes the probabilities from the saved per-row logsumexp).
 */
#pragma once

#include <optional>
#include <tuple>

#include "core/tensor.h"

namespace loom {

// query [..., L, E], key [..., S, E], value [..., S, Ev] -> [..., L, Ev] (the same leading
// dims on all three). attn_mask: undefined, bool (true = the key takes part, as torch) or
// floating (added to the scaled scores), broadcastable to [..., L, S]. is_causal: query i
// sees keys 0..i (the top-left triangle when L != S, as torch); not together with a mask.
// scale defaults to 1/sqrt(E). dropout_p drops attention weights (pass 0 when evaluating).
// On CUDA, float32/float16/bfloat16 inputs with E, Ev <= 128, no dropout and a mask that needs
// no gradient run the fused flash_attention; everything else runs the math path. A row whose
// keys are all masked is NaN on the math path and 0 on the fused one (as torch's kernels).
// Throws loom::Error naming the op, the shapes and dtypes for an undefined, non-floating or
// mixed-dtype input, mismatched shapes or devices, a mask that does not broadcast, a mask with
// is_causal, or dropout_p outside [0, 1].
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask = {}, double dropout_p = 0.0, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt);

// The fused primitive: q [N, L, E], k [N, S, E], v [N, S, Ev] (any strides) -> out [N, L, Ev]
// and logsumexp [N, L] (float32; float64 for float64 inputs): logsumexp_i = log sum_j
// exp(scale q_i.k_j + mask_ij). mask as above, broadcastable to [N, L, S], and it gets no
// gradient (throws if it requires one). Under autograd only out has history. CUDA: E, Ev
// <= 128 and no float64.
std::tuple<Tensor, Tensor> flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                                   const Tensor& mask, double scale, bool is_causal);
// dq, dk, dv of flash_attention_forward from grad_out [N, L, Ev] and the forward's out and
// logsumexp: P = exp(scale q k^T + mask - logsumexp), D = rowsum(grad_out * out),
// dv = P^T grad_out, dS = P * (grad_out v^T - D), dq = scale dS k, dk = scale dS^T q.
// Not differentiable again (listed in tests/autograd/test_gradcheck.cpp).
std::tuple<Tensor, Tensor, Tensor> flash_attention_backward(const Tensor& grad_out, const Tensor& q,
                                                            const Tensor& k, const Tensor& v, const Tensor& out,
                                                            const Tensor& logsumexp, const Tensor& mask,
                                                            double scale, bool is_causal);

}  // namespace loom
