/*
 * Emulated cuDNN: the reference batch norm engine (see cudnn_graph.h; the descriptors are in
 * cudnn_descriptors.cpp, cudnnBackendExecute in cudnn_convolution.cpp).
 *
 * What it runs, as cuDNN 9's batch norm engines do (the cudnn-frontend batchnorm samples and
 * the Normalizations page): CUDNN_BATCH_NORM on 4-D activations in channels-last (NHWC) order,
 * of type HALF, BFLOAT16 or FLOAT; statistics, scale, bias and their gradients FLOAT, dense
 * [1, C, 1, 1]; epsilon and the running-average factor FLOAT scalars, by value (host) or in
 * device memory. Anything else is CUDNN_STATUS_NOT_SUPPORTED_* with the reason, so that Loom's
 * wrapper learns at plan time, as on a GPU, that it must fall back. Peer statistics (multi-GPU
 * batch norm) are refused when set.
 *
 * The numbers, per channel c over its M = N * H * W values, in double:
 *  - training: mean = sum(x) / M, var = sum((x - mean)^2) / M (two passes, the biased variance
 *    that normalises); mean and inv_variance = 1 / sqrt(var + epsilon) are written; with running
 *    statistics, out = (1 - f) * in + f * stat, where the variance's stat is the unbiased
 *    var * M / (M - 1), as cuDNN's batch norm and PyTorch's running_var use;
 *  - inference: mean and inv_variance are read (the caller folds the running variance and
 *    epsilon into inv_variance);
 *  - y = scale * (x - mean) * inv_variance + bias, rounded once to y's type;
 *  - backward, with xhat = (x - mean) * inv_variance: dbias = sum(dy), dscale = sum(dy * xhat),
 *    dx = scale * inv_variance * (dy - dbias / M - xhat * dscale / M).
 * The per-channel sums live in the plan's workspace (two doubles per channel), device memory a
 * GPU engine would use for the same partial sums.
 */
#include <cudnn_graph.h>

#include <cmath>

#include "core/cuda/emulated/cudnn_descriptors.h"
#include "core/cuda/emulated/device_memory.h"
#include "core/cuda/emulated/element_io.h"

namespace loom_emu::cudnn {

namespace {

bool data_role(int r) {
  return r == kNormX || r == kNormY || r == kNormDy || r == kNormDx;
}

bool scalar_role(int r) {
  return r == kNormEpsilon || r == kNormExpAvgFactor;
}

// Whether t's strides are the packed channels-last ones of its [N, C, H, W] dims (a size-1 dim's
// stride is never used and may be anything).
bool packed_nhwc(const TensorDesc& t) {
  const int64_t c = t.dims[1], h = t.dims[2], w = t.dims[3];
  const int64_t want[4] = {h * w * c, 1, w * c, c};
  for (size_t d = 0; d < 4; ++d)
    if (t.dims[d] > 1 && t.strides[d] != want[d]) return false;
  return true;
}

// A 4-D tensor read or written by (n, c, h, w) through its strides.
struct View {
  void* p = nullptr;
  cudaDataType type = CUDA_R_32F;
  int64_t s[4] = {};
  View() = default;
  View(void* ptr, const TensorDesc& t) : p(ptr), type(element_type(t.data_type)) {
    for (size_t i = 0; i < 4; ++i) s[i] = t.strides[i];
  }
  int64_t at(int64_t n, int64_t c, int64_t h, int64_t w) const {
    return n * s[0] + c * s[1] + h * s[2] + w * s[3];
  }
  double load(int64_t i) const { return loom_emu::load(type, p, i); }
  void store(int64_t i, double v) const { loom_emu::store(type, p, i, v); }
  // Element c of a [1, C, 1, 1] tensor.
  double channel(int64_t c) const { return load(c * s[1]); }
  void set_channel(int64_t c, double v) const { store(c * s[1], v); }
};

}  // namespace

cudnnStatus_t norm_engine_supports(const NormOp& op) {
  if (op.mode != CUDNN_BATCH_NORM)
    return fail(CUDNN_STATUS_NOT_SUPPORTED,
                "emulated cuDNN: the normalization engine runs CUDNN_BATCH_NORM only");
  if (op.tensors[kNormX].dims.size() != 4)
    return fail(CUDNN_STATUS_NOT_SUPPORTED_SHAPE, "the batch norm engines take 4-D [N, C, H, W] activations");
  const int32_t io = op.tensors[kNormX].data_type;
  for (int r = 0; r < kNormRoles; ++r) {
    if (!op.has[r]) continue;
    const TensorDesc& t = op.tensors[r];
    if (data_role(r)) {
      if (t.data_type != io || (io != CUDNN_DATA_FLOAT && io != CUDNN_DATA_HALF && io != CUDNN_DATA_BFLOAT16))
        return fail(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE,
                    "batch norm activations are HALF, BFLOAT16 or FLOAT, one type for x, y, dy and dx");
      if (!packed_nhwc(t))
        return fail(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT,
                    "the batch norm engines take packed channels-last (NHWC) activations");
    } else if (t.data_type != CUDNN_DATA_FLOAT) {
      return fail(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE,
                  "batch norm statistics, scale, bias, epsilon and factor are FLOAT");
    } else if (!scalar_role(r) && t.dims[1] > 1 && t.strides[1] != 1) {
      return fail(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT, "batch norm per-channel tensors are dense");
    }
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t run_batch_norm(const NormOp& op, const std::array<void*, kNormRoles>& pointers,
                             void* workspace) {
  std::array<View, kNormRoles> v;
  for (size_t r = 0; r < v.size(); ++r)
    if (op.has[r] && !scalar_role(static_cast<int>(r))) v[r] = View(pointers[r], op.tensors[r]);
  const auto& dims = op.tensors[kNormX].dims;
  const int64_t N = dims[0], C = dims[1], H = dims[2], W = dims[3], M = N * H * W;
  loom_emu::DeviceAccess access;  // device memory is readable only while device work runs
  // A FLOAT scalar: by value from the host, else one element of device memory.
  auto scalar = [&](NormRole r) { return static_cast<double>(*static_cast<const float*>(pointers[r])); };
  auto* first = static_cast<double*>(workspace);  // [C]: the mean, or sum(dy)
  double* second = first + C;                     // [C]: the variance, or sum(dy * xhat)
  auto for_each = [&](auto&& body) {              // every (n, h, w) of one channel
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) body(n, h, w);
  };
  const View& x = v[kNormX];

  if (op.backward) {
    const View &dy = v[kNormDy], &dx = v[kNormDx];
    for (int64_t c = 0; c < C; ++c) {
      const double mean = v[kNormMean].channel(c), inv = v[kNormInvVariance].channel(c);
      double sum_dy = 0, sum_dy_xhat = 0;
      for_each([&](int64_t n, int64_t h, int64_t w) {
        const double g = dy.load(dy.at(n, c, h, w));
        sum_dy += g;
        sum_dy_xhat += g * (x.load(x.at(n, c, h, w)) - mean) * inv;
      });
      first[c] = sum_dy;
      second[c] = sum_dy_xhat;
      const double k = v[kNormScale].channel(c) * inv;
      for_each([&](int64_t n, int64_t h, int64_t w) {
        const double xhat = (x.load(x.at(n, c, h, w)) - mean) * inv;
        const double g = dy.load(dy.at(n, c, h, w));
        dx.store(dx.at(n, c, h, w), k * (g - first[c] / M - xhat * second[c] / M));
      });
      v[kNormDbias].set_channel(c, first[c]);
      v[kNormDscale].set_channel(c, second[c]);
    }
    return CUDNN_STATUS_SUCCESS;
  }

  const bool training = op.phase == CUDNN_NORM_FWD_TRAINING;
  const double eps = scalar(kNormEpsilon);
  const View& y = v[kNormY];
  for (int64_t c = 0; c < C; ++c) {
    double inv = 0;
    if (training) {
      double sum = 0, squares = 0;
      for_each([&](int64_t n, int64_t h, int64_t w) { sum += x.load(x.at(n, c, h, w)); });
      first[c] = sum / static_cast<double>(M);
      for_each([&](int64_t n, int64_t h, int64_t w) {
        const double d = x.load(x.at(n, c, h, w)) - first[c];
        squares += d * d;
      });
      second[c] = squares / static_cast<double>(M);
      inv = 1.0 / std::sqrt(second[c] + eps);
      v[kNormMean].set_channel(c, first[c]);
      v[kNormInvVariance].set_channel(c, inv);
      if (op.has[kNormExpAvgFactor]) {
        const double f = scalar(kNormExpAvgFactor);
        const double unbiased = squares / static_cast<double>(M - 1);
        v[kNormOutRunningMean].set_channel(c, (1 - f) * v[kNormInRunningMean].channel(c) + f * first[c]);
        v[kNormOutRunningVar].set_channel(c, (1 - f) * v[kNormInRunningVar].channel(c) + f * unbiased);
      }
    } else {
      first[c] = v[kNormMean].channel(c);
      inv = v[kNormInvVariance].channel(c);
    }
    const double scale = v[kNormScale].channel(c), bias = v[kNormBias].channel(c);
    for_each([&](int64_t n, int64_t h, int64_t w) {
      y.store(y.at(n, c, h, w), scale * (x.load(x.at(n, c, h, w)) - first[c]) * inv + bias);
    });
  }
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace loom_emu::cudnn
