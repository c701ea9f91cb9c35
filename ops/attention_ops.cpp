/*
 * scaled_dot_product_attention (ops/attention_ops.h): validation, then the fused
 * flash_attention where its kernels apply, else the attention written out with bmm and softmax.
 */
#include "ops/attention_ops.h"

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>

#include "core/error.h"
#include "ops/autocast.h"
#include "ops/autograd_hook.h"
#include "ops/dispatch.h"
#include "ops/ops.h"
#include "ops/op_utils.h"

namespace loom {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// The fused CUDA kernels keep a row of q and of the accumulator in registers, 128 wide at most.
constexpr int64_t kFusedMaxHeadDim = 128;

std::string describe(const Tensor& t) {
  std::ostringstream s;
  if (t.defined()) s << t.sizes() << " " << t.dtype();
  else s << "undefined";
  return s.str();
}

std::string describe_all(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask) {
  std::string s = "query " + describe(q) + ", key " + describe(k) + ", value " + describe(v);
  if (mask.defined()) s += ", attn_mask " + describe(mask);
  return s;
}

// The sizes that the inputs agree on: batch dims [...], N = their product, L, S, E and Ev.
struct AttentionShape {
  DimVector batch;
  int64_t n = 1, l = 0, s = 0, e = 0, ev = 0;
};

AttentionShape check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool is_causal,
                            std::string_view op, int64_t required_rank) {
  check_defined(q, op, "query");
  check_defined(k, op, "key");
  check_defined(v, op, "value");
  const auto all = [&] { return describe_all(q, k, v, mask); };
  const bool ranks_ok = required_rank > 0 ? q.dim() == required_rank : q.dim() >= 2;
  LOOM_CHECK(ranks_ok && k.dim() == q.dim() && v.dim() == q.dim(), op, ": expected query [..., L, E], key [..., S, E] ",
             "and value [..., S, Ev] of one rank ", required_rank > 0 ? "== " : ">= ",
             required_rank > 0 ? required_rank : 2, ", got ", all());
  LOOM_CHECK(q.is_floating_point() && k.dtype() == q.dtype() && v.dtype() == q.dtype(), op,
             ": expected query, key and value of one floating dtype, got ", all());
  check_same_device(q, k, op);
  check_same_device(q, v, op);
  const int64_t r = q.dim();
  AttentionShape shape;
  for (int64_t d = 0; d < r - 2; ++d) {
    LOOM_CHECK(k.size(d) == q.size(d) && v.size(d) == q.size(d), op,
               ": expected the same leading (batch) dims on query, key and value, got ", all());
    shape.batch.push_back(q.size(d));
    shape.n *= q.size(d);
  }
  shape.l = q.size(r - 2);
  shape.e = q.size(r - 1);
  shape.s = k.size(r - 2);
  shape.ev = v.size(r - 1);
  LOOM_CHECK(k.size(r - 1) == shape.e, op, ": expected key's last dim to be query's (E = ", shape.e, "), got ", all());
  LOOM_CHECK(v.size(r - 2) == shape.s, op, ": expected value to have as many rows as key (S = ", shape.s, "), got ",
             all());
  if (mask.defined()) {
    LOOM_CHECK(!is_causal, op, ": is_causal and an explicit attn_mask cannot be set together (as torch), got ", all());
    LOOM_CHECK(mask.dtype() == kBool || mask.dtype() == q.dtype(), op,
               ": expected a bool attn_mask or one of query's dtype, got ", all());
    check_same_device(q, mask, op);
    DimVector target = shape.batch;
    target.push_back(shape.l);
    target.push_back(shape.s);
    bool broadcasts = mask.dim() <= static_cast<int64_t>(target.size());
    for (int64_t i = 1; broadcasts && i <= mask.dim(); ++i) {
      const int64_t m = mask.size(mask.dim() - i), t = target[target.size() - static_cast<size_t>(i)];
      broadcasts = m == t || m == 1;
    }
    LOOM_CHECK(broadcasts, op, ": expected attn_mask broadcastable to [..., L, S] = ", target, ", got ", all());
  }
  return shape;
}

// A mask that broadcasts against [..., L, S] as one against the flattened [N, L, S].
Tensor batched_mask(const Tensor& mask, const AttentionShape& shape) {
  if (mask.dim() <= 2) return mask;
  DimVector full = shape.batch;
  full.push_back(shape.l);
  full.push_back(shape.s);
  return mask.expand(full).reshape({shape.n, shape.l, shape.s});
}

// The mask as what is added to the scores: 0 where a bool mask is true, -inf where it is false.
Tensor additive_mask(const Tensor& mask, DType dtype) {
  if (mask.dtype() != kBool) return mask.to(dtype);
  return where(mask, zeros(mask.sizes(), mask.options().dtype(dtype)), -kInf);
}

// The written-out attention, arranged as nn::CausalSelfAttention always computed it (its CPU
// training is byte-identical through this path): q scaled first, the scores as one bmm over
// the flattened batch, the mask as an additive bias, softmax, dropout, one more bmm.
Tensor math_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double dropout_p,
                      bool is_causal, double scale, const AttentionShape& shape) {
  Tensor q3 = q.reshape({shape.n, shape.l, shape.e});
  if (scale != 1.0) q3 = q3.mul(scale);  // x * 1 is x: a caller that scaled q itself pays no pass
  Tensor k3 = k.reshape({shape.n, shape.s, shape.e}), v3 = v.reshape({shape.n, shape.s, shape.ev});
  Tensor bias;
  if (is_causal) {
    Tensor allowed = ones({shape.l, shape.s}, q.options().dtype(kBool)).tril();
    bias = where(allowed, zeros({shape.l, shape.s}, q3.options()), -kInf);
  } else if (mask.defined()) {
    bias = batched_mask(additive_mask(mask, q.dtype()), shape);
  }
  Tensor scores = q3.bmm(k3.transpose(1, 2));  // [N, L, S]
  if (bias.defined()) scores = scores.add(bias);
  Tensor att = scores.softmax(-1);
  if (dropout_p > 0.0) att = dropout(att, dropout_p, /*training=*/true);
  DimVector out_shape = shape.batch;
  out_shape.push_back(shape.l);
  out_shape.push_back(shape.ev);
  return att.bmm(v3).view(out_shape);
}

bool fused_applies(const Tensor& q, const Tensor& mask, double dropout_p, const AttentionShape& shape) {
  const DType dt = q.dtype();
  return q.device().type() == DeviceType::CUDA && (dt == kFloat32 || dt == kFloat16 || dt == kBFloat16) &&
         shape.e <= kFusedMaxHeadDim && shape.ev <= kFusedMaxHeadDim && dropout_p == 0.0 &&
         (!mask.defined() || !mask.requires_grad());
}

DType stats_dtype(DType dtype) { return dtype == kFloat64 ? kFloat64 : kFloat32; }

void check_mask_needs_no_grad(const Tensor& mask, std::string_view op) {
  LOOM_CHECK(!mask.defined() || !mask.requires_grad(), op,
             ": the fused kernels give the mask no gradient, but attn_mask ", mask.sizes(),
             " requires grad; use scaled_dot_product_attention, which writes the attention out for it");
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale) {
  LOOM_AUTOCAST_LOWER(scaled_dot_product_attention, query, key, value, attn_mask, dropout_p, is_causal, scale);
  constexpr std::string_view op = "scaled_dot_product_attention";
  const AttentionShape shape = check_inputs(query, key, value, attn_mask, is_causal, op, /*required_rank=*/0);
  LOOM_CHECK(dropout_p >= 0.0 && dropout_p <= 1.0, op, ": expected dropout_p in [0, 1], got ", dropout_p);
  const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(shape.e)));
  if (!fused_applies(query, attn_mask, dropout_p, shape))
    return math_attention(query, key, value, attn_mask, dropout_p, is_causal, s, shape);
  Tensor mask = attn_mask.defined() ? batched_mask(attn_mask, shape) : Tensor();
  Tensor out = std::get<0>(flash_attention_forward(query.reshape({shape.n, shape.l, shape.e}),
                                                   key.reshape({shape.n, shape.s, shape.e}),
                                                   value.reshape({shape.n, shape.s, shape.ev}), mask, s, is_causal));
  DimVector out_shape = shape.batch;
  out_shape.push_back(shape.l);
  out_shape.push_back(shape.ev);
  return out.view(out_shape);
}

std::tuple<Tensor, Tensor> flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                                   const Tensor& mask, double scale, bool is_causal) {
  LOOM_AUTOCAST_LOWER(flash_attention_forward, q, k, v, mask, scale, is_causal);
  constexpr std::string_view op = "flash_attention";
  check_mask_needs_no_grad(mask, op);
  if (should_record(q, k, v)) {
    Tensor out, logsumexp;
    {
      AutoGradMode below_autograd(false);
      std::tie(out, logsumexp) = flash_attention_forward(q, k, v, mask, scale, is_causal);
    }
    record<Op::flash_attention>({q, k, v, mask}, {out, logsumexp}, AttentionAttrs{scale, is_causal});
    return {out, alias(logsumexp)};  // a constant to the backward, as layer_norm's statistics
  }
  const AttentionShape shape = check_inputs(q, k, v, mask, is_causal, op, /*required_rank=*/3);
  const DType sd = stats_dtype(q.dtype());
  Tensor out = empty({shape.n, shape.l, shape.ev}, q.options());
  Tensor logsumexp = empty({shape.n, shape.l}, q.options().dtype(sd));
  if (logsumexp.numel() == 0) return {out, logsumexp};
  if (shape.s == 0) {  // no keys: every row is all masked
    fill_(out, 0);
    fill_(logsumexp, -kInf);
    return {out, logsumexp};
  }
  Tensor bias = mask.defined() ? additive_mask(mask, sd).expand({shape.n, shape.l, shape.s}) : Tensor();
  get_kernel<Op::flash_attention>(q.device())(out, logsumexp, contiguous(q), contiguous(k), contiguous(v), bias,
                                              scale, is_causal);
  return {out, logsumexp};
}

std::tuple<Tensor, Tensor, Tensor> flash_attention_backward(const Tensor& grad_out, const Tensor& q,
                                                            const Tensor& k, const Tensor& v, const Tensor& out,
                                                            const Tensor& logsumexp, const Tensor& mask,
                                                            double scale, bool is_causal) {
  constexpr std::string_view op = "flash_attention_backward";
  LOOM_CHECK(!should_record(grad_out, q, k, v, out, logsumexp), op,
             ": a second derivative of the fused attention is not implemented; differentiate "
             "scaled_dot_product_attention on the CPU (the written-out attention) for it");
  check_mask_needs_no_grad(mask, op);
  const AttentionShape shape = check_inputs(q, k, v, mask, is_causal, op, /*required_rank=*/3);
  const DType sd = stats_dtype(q.dtype());
  check_defined(grad_out, op, "grad_out");
  check_defined(out, op, "out");
  check_defined(logsumexp, op, "logsumexp");
  const DimVector out_shape{shape.n, shape.l, shape.ev}, lse_shape{shape.n, shape.l};
  LOOM_CHECK(grad_out.sizes() == IntArrayRef(out_shape) && out.sizes() == IntArrayRef(out_shape) &&
                 grad_out.dtype() == q.dtype() && out.dtype() == q.dtype(),
             op, ": expected grad_out and out of shape ", out_shape, " and dtype ", q.dtype(), ", got grad_out ",
             describe(grad_out), " and out ", describe(out), " for ", describe_all(q, k, v, mask));
  LOOM_CHECK(logsumexp.sizes() == IntArrayRef(lse_shape) && logsumexp.dtype() == sd, op,
             ": expected logsumexp of shape ", lse_shape, " and dtype ", sd, ", got ", describe(logsumexp));
  check_same_device(q, grad_out, op);
  check_same_device(q, out, op);
  check_same_device(q, logsumexp, op);
  Tensor grad_q = empty(q.sizes(), q.options()), grad_k = empty(k.sizes(), k.options()),
         grad_v = empty(v.sizes(), v.options());
  if (shape.n * shape.l == 0 || shape.s == 0) {
    fill_(grad_q, 0);
    fill_(grad_k, 0);
    fill_(grad_v, 0);
    return {grad_q, grad_k, grad_v};
  }
  Tensor bias = mask.defined() ? additive_mask(mask, sd).expand({shape.n, shape.l, shape.s}) : Tensor();
  get_kernel<Op::flash_attention_backward>(q.device())(grad_q, grad_k, grad_v, contiguous(grad_out), contiguous(q),
                                                       contiguous(k), contiguous(v), contiguous(out),
                                                       contiguous(logsumexp), bias, scale, is_causal);
  return {grad_q, grad_k, grad_v};
}

}  // namespace loom
