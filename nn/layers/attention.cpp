/*
 * CausalSelfAttention's forward, arranged for speed on small heads (the gpt_train benchmark:
 * B=16, T=64, C=128, 4 heads of 32; on the 2-core dev VM one attention's forward + backward
 * takes 2.6 ms, against 3.3 ms for one projection taken apart by permute/select and scores
 * masked with `where`):
 *  - the matmul kernels take one batch stride, so q, k and v must each be a contiguous
 *    [B*H, T, hd]. They are projected separately, each with its third of qkv's weight, and
 *    copied once into that layout. Taking them apart after one [B, T, 3C] projection instead
 *    (view, permute, select) costs far more in backward: each select's gradient is padded to
 *    the full [3, B, H, T, hd] with zeros and the three are summed, 5 passes over 3x the data;
 *  - every product is then one bmm over the B*H heads, k^T read through its strides;
 *  - the attention itself is scaled_dot_product_attention (is_causal): on the CPU its [B*H,
 *    T, T] scores get one add (the scale is applied to q here, the mask is an additive bias)
 *    and the softmax (masked_fill with a broadcast mask was 6x slower than the add); on CUDA
 *    it is the fused flash-attention kernel, which never stores the scores;
 *  - the heads are merged by one more copy before proj.
 */
#include "nn/layers/attention.h"

#include <cmath>

#include "nn/layers/repr.h"
#include "ops/ops.h"

namespace loom::nn {

namespace {

// Validates the constructor's arguments before the members are built from them (a Linear
// made from a negative d_model would throw first, with a message about a Linear).
int64_t checked_d_model(int64_t d_model, int64_t n_heads, int64_t max_context, double dropout) {
  LOOM_CHECK(d_model >= 1 && n_heads >= 1 && max_context >= 1,
             "CausalSelfAttention: expected d_model, n_heads and max_context >= 1, got d_model=", d_model,
             ", n_heads=", n_heads, ", max_context=", max_context);
  LOOM_CHECK(d_model % n_heads == 0, "CausalSelfAttention: n_heads=", n_heads,
             " does not divide d_model=", d_model);
  LOOM_CHECK(dropout >= 0.0 && dropout <= 1.0,
             "CausalSelfAttention: dropout probability has to be between 0 and 1, but got ", dropout);
  return d_model;
}

}  // namespace

CausalSelfAttention::CausalSelfAttention(int64_t d_model, int64_t n_heads, int64_t max_context,
                                         double dropout, bool bias)
    : qkv(checked_d_model(d_model, n_heads, max_context, dropout), 3 * d_model, bias),
      proj(d_model, d_model, bias),
      d_model_(d_model),
      n_heads_(n_heads),
      max_context_(max_context),
      dropout_(dropout) {
  register_module("qkv", qkv);
  register_module("proj", proj);
  causal = register_buffer("causal", ones({max_context, max_context}, kBool).tril(), /*persistent=*/false);
}

Tensor CausalSelfAttention::forward(const Tensor& input) {
  LOOM_CHECK(input.defined(), "CausalSelfAttention: the input is undefined");
  LOOM_CHECK(input.dim() == 3 && input.size(2) == d_model_, "CausalSelfAttention(", extra_repr(),
             "): expected an input of shape [B, T, ", d_model_, "], got ", input.sizes());
  const int64_t b = input.size(0), t = input.size(1), c = d_model_, h = n_heads_, hd = c / h;
  LOOM_CHECK(t <= max_context_, "CausalSelfAttention(", extra_repr(), "): sequence length T=", t,
             " exceeds max_context=", max_context_, " (input shape ", input.sizes(), ")");

  // q, k and v as [B*H, T, hd], each from its own third of qkv's weight: [B, T, C] ->
  // [B, H, T, hd] by one copy each.
  auto project = [&](int64_t part) {
    Tensor w = qkv.weight.slice(0, part * c, (part + 1) * c);
    Tensor bias = qkv.bias.defined() ? qkv.bias.slice(0, part * c, (part + 1) * c) : Tensor();
    return linear(input, w, bias).view({b, t, h, hd}).transpose(1, 2).contiguous().view({b * h, t, hd});
  };
  Tensor q = project(0).mul(std::pow(static_cast<double>(hd), -0.5));
  Tensor k = project(1), v = project(2);

  // scaled_dot_product_attention: fused flash attention on CUDA; elsewhere (and with dropout)
  // the written-out arrangement this layer always used (additive -inf bias above the
  // diagonal, softmax, dropout of the weights), so CPU training is unchanged. q is already
  // scaled, hence scale 1.
  const double attention_dropout = is_training() ? dropout_ : 0.0;
  Tensor att_v = scaled_dot_product_attention(q, k, v, {}, attention_dropout, /*is_causal=*/true, 1.0);

  // [B*H, T, hd] -> [B, T, H, hd] -> [B, T, C]: the heads side by side again (one copy).
  Tensor y = att_v.view({b, h, t, hd}).transpose(1, 2).reshape({b, t, c});
  y = proj(y);
  if (dropout_ > 0.0) y = dropout(y, dropout_, is_training());
  return y;
}

std::string CausalSelfAttention::extra_repr() const {
  std::string s = "d_model=" + std::to_string(d_model_) + ", n_heads=" + std::to_string(n_heads_) +
                  ", max_context=" + std::to_string(max_context_);
  if (dropout_ > 0.0) s += ", dropout=" + detail::python_float(dropout_);
  return s;
}

}  // namespace loom::nn
