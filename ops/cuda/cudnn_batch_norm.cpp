/*
 * The cuDNN batch norm of cudnn_batch_norm.h, through the graph (backend) API, as cudnn-frontend's
 * batchnorm and batchnorm_backward build it:
 *
 *   forward:  x, scale, bias, epsilon (by value) [, factor (by value), running mean/var in]
 *             --> OPERATION_NORM_FORWARD (BATCH_NORM, TRAINING or INFERENCE) -->
 *             y, mean, inv_variance (written in training, read in inference) [, running out]
 *   backward: x, dy, scale, mean, inv_variance --> OPERATION_NORM_BACKWARD (BATCH_NORM) -->
 *             dx, dscale, dbias
 *
 * then the plan of cudnn_graph.h, cached per problem (layout, sizes, dtype, which operands,
 * alignments); epsilon and the factor travel by value with each call, so one plan serves every
 * value. Activations are [N, C, H, W] with packed NHWC strides; per-channel tensors are [1, C,
 * 1, 1], dense. The running statistics are written to fresh buffers and copied over the inputs
 * afterwards, on the same stream: cuDNN's graph names the input and output running statistics
 * as two tensors and promises nothing when they alias.
 */
#include "ops/cuda/cudnn_batch_norm.h"

#include <array>
#include <vector>

#include "ops/copy_ops.h"
#include "ops/cuda/cudnn_graph.h"
#include "ops/factories.h"

namespace loom::cuda {

namespace {

enum Uid : int64_t {
  kX = 1,
  kY,
  kScale,
  kBias,
  kEpsilon,
  kMean,
  kInvVariance,
  kFactor,
  kInRunningMean,
  kInRunningVar,
  kOutRunningMean,
  kOutRunningVar,
  kDy,
  kDx,
  kDscale,
  kDbias,
};

// The graph attribute each operand is set as.
cudnnBackendAttributeName_t forward_attribute(int64_t uid) {
  switch (uid) {
    case kX:
      return CUDNN_ATTR_OPERATION_NORM_FWD_XDESC;
    case kY:
      return CUDNN_ATTR_OPERATION_NORM_FWD_YDESC;
    case kScale:
      return CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC;
    case kBias:
      return CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC;
    case kEpsilon:
      return CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC;
    case kMean:
      return CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC;
    case kInvVariance:
      return CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC;
    case kFactor:
      return CUDNN_ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC;
    case kInRunningMean:
      return CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC;
    case kInRunningVar:
      return CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC;
    case kOutRunningMean:
      return CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC;
    default:
      return CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC;
  }
}

cudnnBackendAttributeName_t backward_attribute(int64_t uid) {
  switch (uid) {
    case kX:
      return CUDNN_ATTR_OPERATION_NORM_BWD_XDESC;
    case kDy:
      return CUDNN_ATTR_OPERATION_NORM_BWD_DYDESC;
    case kScale:
      return CUDNN_ATTR_OPERATION_NORM_BWD_SCALE_DESC;
    case kMean:
      return CUDNN_ATTR_OPERATION_NORM_BWD_MEAN_DESC;
    case kInvVariance:
      return CUDNN_ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC;
    case kDx:
      return CUDNN_ATTR_OPERATION_NORM_BWD_DXDESC;
    case kDscale:
      return CUDNN_ATTR_OPERATION_NORM_BWD_DSCALE_DESC;
    default:
      return CUDNN_ATTR_OPERATION_NORM_BWD_DBIAS_DESC;
  }
}

enum class Phase { kTraining, kInference, kBackward };

// The operands of one call, by unique id: what the graph is built from and what the variant pack
// points at.
struct Operands {
  std::vector<int64_t> uids;
  std::vector<CudnnTensorSpec> specs;
  std::vector<void*> pointers;

  void add(int64_t uid, CudnnTensorSpec spec, void* p) {
    uids.push_back(uid);
    specs.push_back(std::move(spec));
    pointers.push_back(p);
  }
};

// x's NHWC view as cuDNN sees it, when x is what the engines take.
bool activation_spec(const Tensor& t, CudnnTensorSpec& spec) {
  if (t.dim() != 4 || t.numel() == 0 || !cudnn_type(t.dtype(), spec.type) || t.dtype() == DType::Float64)
    return false;
  std::array<int64_t, 4> strides{};
  if (!cudnn_packed_as(t, CudnnOrder::kNHWC, strides)) return false;
  spec.sizes = {t.size(0), t.size(1), t.size(2), t.size(3)};
  spec.strides.assign(strides.begin(), strides.end());
  spec.alignment = cudnn_alignment(t.data_ptr());
  return true;
}

// A float32 [C] tensor as the [1, C, 1, 1] cuDNN wants, when it is one.
bool channel_spec(const Tensor& t, int64_t c, CudnnTensorSpec& spec) {
  if (!t.defined() || t.dtype() != DType::Float32 || t.dim() != 1 || t.size(0) != c ||
      (c > 1 && t.stride(0) != 1))
    return false;
  spec.sizes = {1, c, 1, 1};
  spec.strides = {c, 1, c, c};
  spec.alignment = cudnn_alignment(t.data_ptr());
  spec.type = CUDNN_DATA_FLOAT;
  return true;
}

CudnnTensorSpec scalar_spec() {
  CudnnTensorSpec spec;
  spec.sizes = {1, 1, 1, 1};
  spec.strides = {1, 1, 1, 1};
  spec.by_value = true;
  return spec;
}

CudnnPlan make_plan(cudnnHandle_t handle, Phase phase, const Operands& ops) {
  CudnnDescriptors owner;
  const bool backward = phase == Phase::kBackward;
  cudnnBackendDescriptor_t op = owner.create(backward ? CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR
                                                      : CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR);
  const cudnnBackendNormMode_t mode = CUDNN_BATCH_NORM;
  cudnn_set(op, backward ? CUDNN_ATTR_OPERATION_NORM_BWD_MODE : CUDNN_ATTR_OPERATION_NORM_FWD_MODE,
            CUDNN_TYPE_NORM_MODE, 1, &mode);
  if (!backward) {
    const cudnnBackendNormFwdPhase_t fwd =
        phase == Phase::kTraining ? CUDNN_NORM_FWD_TRAINING : CUDNN_NORM_FWD_INFERENCE;
    cudnn_set(op, CUDNN_ATTR_OPERATION_NORM_FWD_PHASE, CUDNN_TYPE_NORM_FWD_PHASE, 1, &fwd);
  }
  for (size_t i = 0; i < ops.uids.size(); ++i) {
    cudnnBackendDescriptor_t t = cudnn_tensor(owner, ops.specs[i], ops.uids[i]);
    cudnn_set(op, backward ? backward_attribute(ops.uids[i]) : forward_attribute(ops.uids[i]),
              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
  }
  if (!cudnn_finalize_op(op, "cudnnBackendFinalize(batch norm operation)")) return {};
  // Batch norm has no TF32 question: its engines keep float statistics whatever the activations.
  return cudnn_plan_for(handle, owner, op, /*float32_exact=*/false);
}

// Runs `ops` through the cached plan of its problem; false when cuDNN has no engine for it.
bool run(Phase phase, const Operands& ops, cudaStream_t stream) {
  // Which wrapper (1: batch norm), then everything the plan depends on.
  std::vector<int64_t> problem{1, static_cast<int64_t>(phase)};
  for (size_t i = 0; i < ops.uids.size(); ++i) {
    const CudnnTensorSpec& s = ops.specs[i];
    problem.push_back(ops.uids[i]);
    problem.push_back(s.type);
    problem.push_back(s.alignment);
    problem.insert(problem.end(), s.sizes.begin(), s.sizes.end());
    problem.insert(problem.end(), s.strides.begin(), s.strides.end());
  }
  return cudnn_run_cached(
      problem, [&](cudnnHandle_t handle) { return make_plan(handle, phase, ops); }, ops.uids, ops.pointers,
      stream);
}

// weight (or bias) as a float32 [C] operand; ones (zeros) when undefined. False when defined but
// not what cuDNN takes.
bool parameter(const Tensor& p, int64_t c, double fill, Tensor& keep, CudnnTensorSpec& spec) {
  keep = p.defined() ? p : full({c}, fill, TensorOptions(DType::Float32).device(Device::cuda()));
  return channel_spec(keep, c, spec);
}

}  // namespace

bool cudnn_batch_norm(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd, const Tensor& x,
                      const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                      const Tensor& running_var, bool training, double momentum, double eps,
                      cudaStream_t stream) {
  CudnnTensorSpec xs, ys, mean_s, invstd_s, scale_s, bias_s;
  if (!activation_spec(x, xs) || !activation_spec(out, ys) || out.dtype() != x.dtype() ||
      ys.strides != xs.strides)
    return false;
  const int64_t c = x.size(1);
  if (!channel_spec(save_mean, c, mean_s) || !channel_spec(save_invstd, c, invstd_s)) return false;
  const bool running = training && running_mean.defined() && running_var.defined();
  CudnnTensorSpec in_mean_s, in_var_s;
  if (running && (!channel_spec(running_mean, c, in_mean_s) || !channel_spec(running_var, c, in_var_s)))
    return false;
  Tensor scale, shift;
  if (!parameter(weight, c, 1.0, scale, scale_s) || !parameter(bias, c, 0.0, shift, bias_s)) return false;

  // By value: host scalars read when the plan executes, which cudnnBackendExecute does before it
  // returns (it only enqueues the kernels, with these values as their arguments).
  float epsilon = static_cast<float>(eps), factor = static_cast<float>(momentum);
  Operands ops;
  ops.add(kX, xs, x.data_ptr());
  ops.add(kY, ys, out.data_ptr());
  ops.add(kScale, scale_s, scale.data_ptr());
  ops.add(kBias, bias_s, shift.data_ptr());
  ops.add(kEpsilon, scalar_spec(), &epsilon);
  ops.add(kMean, mean_s, save_mean.data_ptr());
  ops.add(kInvVariance, invstd_s, save_invstd.data_ptr());
  Tensor next_mean, next_var;
  if (running) {
    next_mean = empty({c}, running_mean.options());
    next_var = empty({c}, running_var.options());
    CudnnTensorSpec out_mean_s, out_var_s;
    channel_spec(next_mean, c, out_mean_s);
    channel_spec(next_var, c, out_var_s);
    ops.add(kFactor, scalar_spec(), &factor);
    ops.add(kInRunningMean, in_mean_s, running_mean.data_ptr());
    ops.add(kInRunningVar, in_var_s, running_var.data_ptr());
    ops.add(kOutRunningMean, out_mean_s, next_mean.data_ptr());
    ops.add(kOutRunningVar, out_var_s, next_var.data_ptr());
  }
  if (!run(training ? Phase::kTraining : Phase::kInference, ops, stream)) return false;
  if (running) {
    // Stream order: the copies run after the batch norm that wrote next_mean and next_var.
    copy_(running_mean, next_mean);
    copy_(running_var, next_var);
  }
  return true;
}

bool cudnn_batch_norm_backward(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias,
                               const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                               const Tensor& save_mean, const Tensor& save_invstd, cudaStream_t stream) {
  CudnnTensorSpec xs, dys, dxs, mean_s, invstd_s, scale_s, dscale_s, dbias_s;
  if (!activation_spec(x, xs) || !activation_spec(grad_out, dys) || !activation_spec(grad_input, dxs) ||
      grad_out.dtype() != x.dtype() || grad_input.dtype() != x.dtype() || dys.strides != xs.strides ||
      dxs.strides != xs.strides)
    return false;
  const int64_t c = x.size(1);
  if (!channel_spec(save_mean, c, mean_s) || !channel_spec(save_invstd, c, invstd_s)) return false;
  Tensor scale;
  if (!parameter(weight, c, 1.0, scale, scale_s)) return false;
  // Parameter gradients nobody asked for still have to go somewhere: cuDNN writes all three.
  const TensorOptions floats = TensorOptions(DType::Float32).device(Device::cuda());
  const Tensor dscale = grad_weight.defined() ? grad_weight : empty({c}, floats);
  const Tensor dbias = grad_bias.defined() ? grad_bias : empty({c}, floats);
  if (!channel_spec(dscale, c, dscale_s) || !channel_spec(dbias, c, dbias_s)) return false;

  Operands ops;
  ops.add(kX, xs, x.data_ptr());
  ops.add(kDy, dys, grad_out.data_ptr());
  ops.add(kScale, scale_s, scale.data_ptr());
  ops.add(kMean, mean_s, save_mean.data_ptr());
  ops.add(kInvVariance, invstd_s, save_invstd.data_ptr());
  ops.add(kDx, dxs, grad_input.data_ptr());
  ops.add(kDscale, dscale_s, dscale.data_ptr());
  ops.add(kDbias, dbias_s, dbias.data_ptr());
  return run(Phase::kBackward, ops, stream);
}

}  // namespace loom::cuda
