/* BatchNorm folding (see fold_batch_norm.h). */
#include "quant/fold_batch_norm.h"

#include "core/error.h"
#include "core/grad_mode.h"
#include "ops/ops.h"

namespace loom::quant {

FoldedWeights fold_batch_norm(const Tensor& weight, const Tensor& bias, const nn::BatchNormBase& bn) {
  LOOM_CHECK(weight.defined(), "fold_batch_norm: the weight is undefined");
  LOOM_CHECK(weight.dim() >= 2, "fold_batch_norm: expected a weight [C_out, ...], got ", weight.sizes());
  const int64_t channels = weight.size(0);
  LOOM_CHECK(bn.track_running_stats(), "fold_batch_norm: the BatchNorm has no running statistics "
             "(track_running_stats=false), so there is nothing to fold");
  LOOM_CHECK(bn.num_features() == channels, "fold_batch_norm: the layer has ", channels,
             " output channels but the BatchNorm normalises ", bn.num_features());
  LOOM_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == channels),
             "fold_batch_norm: expected a bias [", channels, "], got ", bias.sizes());
  NoGradGuard no_grad;
  const DType dtype = weight.dtype();
  Tensor mean = bn.running_mean.to(DType::Float64), var = bn.running_var.to(DType::Float64);
  Tensor k = (var + bn.eps()).rsqrt();
  if (bn.affine()) k = k * bn.weight.to(DType::Float64);
  Tensor b = bias.defined() ? bias.to(DType::Float64) : zeros({channels}, DType::Float64);
  Tensor shift = bn.affine() ? bn.bias.to(DType::Float64) : zeros({channels}, DType::Float64);
  DimVector k_shape(weight.dim(), 1);
  k_shape[0] = channels;
  return {(weight.to(DType::Float64) * k.reshape(k_shape)).to(dtype), ((b - mean) * k + shift).to(dtype)};
}

}  // namespace loom::quant
