/*
 * Kernel signatures, one per op family. The ops layer validates inputs, allocates outputs
 * and brings inputs to the form a kernel expects (see each comment); kernels only compute.
 * Tensors are passed as const handles: a kernel writes through `out`'s data pointer.
 * Strides may be anything (including 0 for broadcast inputs) unless a comment says otherwise.
 */
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/philox.h"
#include "core/tensor.h"

namespace loom {

// Views and composite ops have no kernel.
using NoKernel = void (*)();

// ---- elementwise: inputs already expanded to out's shape and converted to the compute dtype;
// out has the result dtype (bool for comparisons and logical ops).
using UnaryKernel = void (*)(const Tensor& out, const Tensor& in);
using BinaryKernel = void (*)(const Tensor& out, const Tensor& a, const Tensor& b);
using WhereKernel = void (*)(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
using GeluKernel = void (*)(const Tensor& out, const Tensor& in, bool tanh_approximation);
// out = grad * gelu'(x): one fused pass where the formula would take a dozen.
using GeluBackwardKernel = void (*)(const Tensor& out, const Tensor& grad, const Tensor& x, bool tanh_approximation);
// out = self <= threshold ? 0 : grad (relu's gradient from its output, in one pass).
using ThresholdBackwardKernel = void (*)(const Tensor& out, const Tensor& grad, const Tensor& self,
                                         double threshold);
using ClampKernel = void (*)(const Tensor& out, const Tensor& in, const Scalar* min, const Scalar* max);

// ---- copies and fills
// dst and src have the same shape; any dtypes (converted, 16-bit floats round to nearest even).
using CopyKernel = void (*)(const Tensor& dst, const Tensor& src);
using FillKernel = void (*)(const Tensor& dst, Scalar value);
// out[i] = start + i * step for the row-major index i of a contiguous out.
using ArangeKernel = void (*)(const Tensor& out, double start, double step);
// Counter-based random fills of a contiguous out; element i depends only on (seed, offset, i).
// uniform: U[a, b); normal: N(a, b^2); randint: integers in [a, b); bernoulli: 1 with probability a.
// Only the CUDA kernels take a captured draw's replay_state (core/philox.h).
using RandomKernel = void (*)(const Tensor& out, double a, double b, PhiloxArgs philox);

// ---- reductions: out is contiguous, with in's rank and the reduced dims of size 1 (keepdim
// shape); dims are sorted, unique and non-negative. out's dtype: sum/prod of integers and bool
// int64; sum of a floating in: in's dtype, float32 or float64; everything else in's dtype.
using ReduceKernel = void (*)(const Tensor& out, const Tensor& in, IntArrayRef dims);
using VarKernel = void (*)(const Tensor& out, const Tensor& in, IntArrayRef dims, int64_t correction);
// values/indices are contiguous, with in's rank and `dim` of size 1; indices are int64.
using ArgReduceKernel = void (*)(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t dim);

// ---- linear algebra: a [B, M, K], b [B, K, N], out [B, M, N] (all 3-D, any strides, one dtype);
// bias is undefined or [N], broadcast over rows.
using MatmulKernel = void (*)(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias);
// The activation fused into linear_activation (gelu as ops/elementwise.h's, erf or tanh form).
enum class Activation : int64_t { Relu = 0, Gelu = 1, GeluTanh = 2 };
// out = activation(a @ b + bias), operands as for matmul; pre_activation (same shape as out, or
// undefined when the gradient formula does not need it) receives a @ b + bias.
using LinearActivationKernel = void (*)(const Tensor& out, const Tensor& pre_activation, const Tensor& a,
                                        const Tensor& b, const Tensor& bias, Activation activation);
// linear's weight and bias gradients for grad [R, N] and x [R, K] (any strides): grad_weight [N, K] =
// grad^T x, grad_bias [N] = the column sums of grad (undefined when not wanted).
using LinearWeightGradKernel = void (*)(const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad,
                                        const Tensor& x);
// The gradient at the pre-activation of a hidden layer h = activation(pre) that feeds a linear,
// for grad [R, N] (the gradient at that linear's output, any strides) and weight [N, H]:
// grad_pre [R, H] = (grad @ weight) * activation'(pre), grad_bias [H] = the column sums of
// grad_pre (undefined when not wanted). pre [R, H] is undefined for relu, whose derivative reads
// hidden [R, H]; pre, hidden and grad_pre are contiguous.
using LinearInputGradActivationKernel = void (*)(const Tensor& grad_pre, const Tensor& grad_bias,
                                                 const Tensor& grad, const Tensor& weight, const Tensor& pre,
                                                 const Tensor& hidden, Activation activation);

// ---- convolution and pooling on NCHW tensors
struct Conv2dParams {
  std::array<int64_t, 2> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
};
struct Pool2dParams {
  std::array<int64_t, 2> kernel{1, 1}, stride{1, 1}, padding{0, 0}, dilation{1, 1};
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg pool only
};
// out [N, Cout, Ho, Wo]; x [N, Cin, H, W]; w [Cout, Cin/groups, kh, kw]; bias undefined or [Cout].
using Conv2dKernel = void (*)(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias,
                              const Conv2dParams& p);
using Conv2dBackwardInputKernel = void (*)(const Tensor& grad_input, const Tensor& grad_out, const Tensor& w,
                                           const Conv2dParams& p);
// grad_bias may be undefined (no bias).
using Conv2dBackwardWeightKernel = void (*)(const Tensor& grad_weight, const Tensor& grad_bias,
                                            const Tensor& grad_out, const Tensor& x, const Conv2dParams& p);
// indices (int64, flat h*W+w within each plane, as PyTorch) is defined for max pooling.
using Pool2dKernel = void (*)(const Tensor& out, const Tensor& indices, const Tensor& x, const Pool2dParams& p);
using Pool2dBackwardKernel = void (*)(const Tensor& grad_input, const Tensor& grad_out, const Tensor& indices,
                                      const Pool2dParams& p);
// out [N, C, Ho, Wo] with PyTorch's adaptive bins over x [N, C, H, W].
using AdaptivePoolKernel = void (*)(const Tensor& out, const Tensor& x);
using AdaptivePoolBackwardKernel = void (*)(const Tensor& grad_input, const Tensor& grad_out);

// ---- normalisation
// x, out, grad_out, grad_input contiguous. "Stats dtype": float32, or float64 for a float64 x.
// x [N, C, *]; weight/bias undefined or contiguous [C] in the stats dtype; running stats
// undefined or [C] of any floating dtype and stride; save_mean/save_invstd [C] (stats dtype).
// In training the batch statistics are used and the running stats (if defined) updated with
// momentum and the unbiased variance; in eval the running stats are used (save_mean and
// save_invstd are then computed from them).
using BatchNormKernel = void (*)(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
                                 const Tensor& x, const Tensor& weight, const Tensor& bias,
                                 const Tensor& running_mean, const Tensor& running_var, bool training,
                                 double momentum, double eps);
// Training-mode gradient. grad_weight/grad_bias undefined (not wanted) or [C] in the stats dtype.
using BatchNormBackwardKernel = void (*)(const Tensor& grad_input, const Tensor& grad_weight,
                                         const Tensor& grad_bias, const Tensor& grad_out, const Tensor& x,
                                         const Tensor& weight, const Tensor& save_mean,
                                         const Tensor& save_invstd);
// x viewed as [M, D] (D = product of the normalized shape, contiguous); mean/rstd [M] and
// weight/bias (undefined or [D]) contiguous in the stats dtype; grad_weight/grad_bias likewise.
using LayerNormKernel = void (*)(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                                 const Tensor& weight, const Tensor& bias, double eps);
using LayerNormBackwardKernel = void (*)(const Tensor& grad_input, const Tensor& grad_weight,
                                         const Tensor& grad_bias, const Tensor& grad_out, const Tensor& x,
                                         const Tensor& mean, const Tensor& rstd, const Tensor& weight);

// ---- softmax family: along `dim` (wrapped) of out/x, contiguous tensors of one shape and dtype
using SoftmaxKernel = void (*)(const Tensor& out, const Tensor& x, int64_t dim);
using SoftmaxBackwardKernel = void (*)(const Tensor& grad_input, const Tensor& grad_out, const Tensor& out,
                                       int64_t dim);

// ---- losses: logp [N, C] (any strides), target [N] int64, weight undefined or [C] in logp's
// dtype; out 0-dim (mean/sum) or [N] (none); total_weight 0-dim (sum of weights of counted
// targets), logp's dtype. Kernels check target values. grad_logp contiguous and zero-filled.
enum class Reduction : int64_t { None = 0, Mean = 1, Sum = 2 };
using NllLossKernel = void (*)(const Tensor& out, const Tensor& total_weight, const Tensor& logp,
                               const Tensor& target, const Tensor& weight, Reduction reduction,
                               int64_t ignore_index);
using NllLossBackwardKernel = void (*)(const Tensor& grad_logp, const Tensor& grad_out, const Tensor& target,
                                       const Tensor& weight, const Tensor& total_weight, Reduction reduction,
                                       int64_t ignore_index);

// ---- indexing and shape
// out = inputs concatenated along dim (inputs share out's dtype, sizes checked).
using CatKernel = void (*)(const Tensor& out, const std::vector<Tensor>& inputs, int64_t dim);
// index: 1-D int64 (index_select, index_add) or in's rank (gather, scatter_add), values checked.
using IndexSelectKernel = void (*)(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index);
using GatherKernel = void (*)(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index);
// out (already holding self's values) += src at index along dim.
using ScatterAddKernel = void (*)(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);
using IndexAddKernel = void (*)(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);
// Keeps elements with col - row <= diagonal (tril) / >= diagonal (triu) of the last two dims.
using TriangleKernel = void (*)(const Tensor& out, const Tensor& in, int64_t diagonal);
using FlipKernel = void (*)(const Tensor& out, const Tensor& in, IntArrayRef dims);
// pads: (left, right) pairs starting from the last dim, as torch.nn.functional.pad.
// The modes' values are ops/pad_source.h's kPad* codes, which the CUDA launchers take.
enum class PadMode : int64_t { Constant = 0, Reflect = 1, Replicate = 2, Circular = 3 };
// The name pad() takes for a mode ("constant", "reflect", "replicate", "circular").
inline const char* pad_mode_name(PadMode mode) {
  constexpr const char* names[] = {"constant", "reflect", "replicate", "circular"};
  return names[static_cast<int64_t>(mode)];
}
using PadKernel = void (*)(const Tensor& out, const Tensor& in, IntArrayRef pads, PadMode mode, double value);
// Gradient of pad: grad_input [in's shape] from grad_out (reflect mode accumulates); the
// replicate and circular gradients are composed of index_add in ops/shape_ops.cpp.
using PadBackwardKernel = void (*)(const Tensor& grad_input, const Tensor& grad_out, IntArrayRef pads,
                                   PadMode mode);

// ---- scans and sorting: in and the outputs are contiguous, of one shape, along `dim` in
// [0, rank) (0 for a 0-dim in).
// cumsum: out[..., i, ...] = sum of in[..., j, ...] for j <= i, out of in's dtype (the ops layer
// casts integers and bool to int64 first); 16-bit floats accumulate in float32, float32 and
// float64 in float64.
using ScanKernel = void (*)(const Tensor& out, const Tensor& in, int64_t dim);
// sort: each line along dim in ascending (or descending) order, stably: equal elements keep
// their order; NaN is greater than every number (last ascending, first descending). values
// have in's dtype, indices are int64 positions along dim.
using SortKernel = void (*)(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t dim,
                            bool descending);

// ---- attention (flash_attention): q [N, L, E], k [N, S, E], v [N, S, Ev], out [N, L, Ev],
// grad_out [N, L, Ev] contiguous, one floating dtype; logsumexp [N, L] contiguous in the stats
// dtype (float32, float64 for float64 inputs); mask undefined or [N, L, S] in the stats dtype,
// any strides (0 where broadcast), added to the scaled scores. is_causal masks key j > query i
// (the top-left triangle, as torch). A row whose keys are all masked gives out 0 and logsumexp
// -inf, and no gradient. grad_q/grad_k/grad_v have q's/k's/v's shapes, contiguous.
using FlashAttentionKernel = void (*)(const Tensor& out, const Tensor& logsumexp, const Tensor& q,
                                      const Tensor& k, const Tensor& v, const Tensor& mask, double scale,
                                      bool is_causal);
using FlashAttentionBackwardKernel = void (*)(const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v,
                                              const Tensor& grad_out, const Tensor& q, const Tensor& k,
                                              const Tensor& v, const Tensor& out, const Tensor& logsumexp,
                                              const Tensor& mask, double scale, bool is_causal);

// ---- mixed precision
// Multiplies each of `values` (contiguous, one floating dtype each) by inv_scale (float32 [1],
// read when the kernel runs) in place and stores 1 into found_inf (float32 [1]) if any value was
// inf or NaN before; leaves it otherwise. All on one device.
using AmpUnscaleKernel = void (*)(const std::vector<Tensor>& values, const Tensor& found_inf,
                                  const Tensor& inv_scale);
// GradScaler's scale update (torch's _amp_update_scale_), in place on one device: scale
// (float32 [1]) and growth_tracker (int32 [1], clean steps since the last change) from found_inf
// (float32 [1], nonzero when the step found an inf/NaN gradient).
using AmpUpdateScaleKernel = void (*)(const Tensor& scale, const Tensor& growth_tracker,
                                      const Tensor& found_inf, double growth_factor, double backoff_factor,
                                      int64_t growth_interval);

// ---- optimizers (ops/optim_ops.h): in place, every tensor contiguous, float32 or float64, each
// list as long as params and each tensor of a list in its parameter's dtype and shape.
// One Adam/AdamW step's hyper-parameters, shared by every tensor of a call.
struct AdamStepOptions {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  bool decoupled = false;  // AdamW's p *= 1 - lr * weight_decay instead of Adam's g += weight_decay * p
  bool amsgrad = false;
  bool maximize = false;
};
// A tensor's bias corrections at its own step count t: lr / (1 - beta1^t) and 1 / sqrt(1 - beta2^t).
struct AdamStepFactors {
  double step_size = 0;
  double inv_bias_corr2_sqrt = 0;
};
// max_exp_avg_sqs is empty unless options.amsgrad. The step counts come either from the host,
// as factors (one per tensor; step_counts empty, lr undefined), or from tensors on the
// parameters' device that the kernel reads when it runs, so that a step captured into a CUDA
// graph uses each replay's values (nn/optim's capturable mode): step_counts (one 0-dim int64 per
// tensor, incremented by the kernel before use) and lr (0-dim float64, replacing options.lr);
// factors is then empty. found_inf, when defined (float32 [1] on the parameters' device, only
// with device step counts), is read when the kernel runs: nonzero skips the whole step, counts
// included (GradScaler's skipped step, decided on the device inside a CUDA graph).
using FusedAdamKernel = void (*)(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                                 const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                                 const std::vector<Tensor>& max_exp_avg_sqs,
                                 const std::vector<AdamStepFactors>& factors,
                                 const std::vector<Tensor>& step_counts, const Tensor& lr,
                                 const Tensor& found_inf, const AdamStepOptions& options);
struct SgdStepOptions {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool maximize = false;
  bool first_step = false;  // the momentum buffers start as the first direction instead of being updated
};
// momentum_buffers is empty when options.momentum == 0. lr, when defined (0-dim float64 on the
// parameters' device, read when the kernel runs), replaces options.lr; found_inf, when defined
// (float32 [1], only with lr), skips the step when nonzero, as for FusedAdamKernel.
using FusedSgdKernel = void (*)(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                                const std::vector<Tensor>& momentum_buffers, const Tensor& lr,
                                const Tensor& found_inf, const SgdStepOptions& options);
// out (float64, 0-dim, on the tensors' device) = the sum of |x|^norm_type over every element of
// every tensor, or max |x| (NaN if any x is NaN) for norm_type = infinity.
using ForeachNormKernel = void (*)(const Tensor& out, const std::vector<Tensor>& tensors, double norm_type);
// Multiplies every tensor by scale (float64, 0-dim, on their device), rounded to the tensor's dtype.
using ForeachMulKernel = void (*)(const std::vector<Tensor>& tensors, const Tensor& scale);

// ---- INT8 inference (QuantizedModel on CUDA, ops/int8_ops.h; not differentiable)
// The requantization that follows an int8 GEMM's int32 sum acc[m, c], per output channel c, in
// float32 and in this order, as oneDNN's int8 kernels do (so that every backend rounds alike):
//   f = float(acc - input_zero_point * sum_k w[c, k]) + bias[c];  f *= scale[c];  if relu f = max(f, 0);
//   float32 out: f;  uint8/int8 out: clamp(round_half_even(f + output_zero_point)) to the dtype's range.
struct Int8Epilogue {
  int32_t input_zero_point = 0;
  int32_t output_zero_point = 0;
  bool relu = false;
};
// out [M, O] contiguous (float32, uint8 or int8); x uint8 [M, K] contiguous; w int8 [O, K]
// contiguous; scales float32 [O] or [1]; bias float32 [O] or undefined.
using Int8LinearKernel = void (*)(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& scales,
                                  const Tensor& bias, const Int8Epilogue& epilogue);
// The patches of a uint8 convolution input, one row per output position: out uint8
// [N * Ho * Wo, C * kh * kw] contiguous, rows in (n, ho, wo) order, columns in (c, i, j) order
// (a weight [O, C, kh, kw] flattened); x uint8 [N, C, H, W], any strides; positions in the
// padding read pad_value (the input's zero point: real 0). p.groups == 1.
using Int8Im2colKernel = void (*)(const Tensor& out, const Tensor& x, std::array<int64_t, 2> kernel,
                                  const Conv2dParams& p, int32_t pad_value);
// quantize_per_tensor: out (uint8/int8) = clamp(round_half_even(in * (1 / scale)) + zero_point), NaN
// to the dtype's minimum; dequantize_per_tensor: out (float32) = float(in - zero_point) * scale.
// out and in have one shape, any strides.
using QuantizeKernel = void (*)(const Tensor& out, const Tensor& in, float scale, int32_t zero_point);

}  // namespace loom
