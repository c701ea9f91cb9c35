/*
 * CUDA glue of GradScaler's ops (ops/amp_ops.h). amp_unscale_and_check_: the values grouped by
 * dtype into lists of at most kMaxUnscaleTensors, one launch per list (ops/cuda/amp.cu).
 * found_inf stays on the device; the caller decides when to read it (an eager GradScaler once
 * per step; a captured one never, leaving the decision to the optimizer and the scale update).
 * Every launch is on the current stream (op_stream.h), ordered after the backward that wrote the
 * gradients and before any later kernel that reads them.
 */
#include <vector>

#include "core/cuda/cuda_check.h"
#include "ops/cuda/amp_launchers.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/op_stream.h"
#include "ops/dispatch.h"

namespace loom::cuda {

namespace {

void amp_unscale_and_check_kernel(const std::vector<Tensor>& values, const Tensor& found_inf,
                                  const Tensor& inv_scale) {
  for (DType dtype : {kFloat32, kFloat64, kBFloat16}) {
    UnscaleList list;
    auto flush = [&] {
      LOOM_CUDA_CHECK(launch_amp_unscale_and_check(list, static_cast<int>(dtype), found_inf.data_ptr<float>(),
                                                   inv_scale.data_ptr<float>(), op_stream()));
      list = UnscaleList{};
    };
    for (const Tensor& v : values) {
      if (v.dtype() != dtype || v.numel() == 0) continue;
      list.data[list.count] = v.data_ptr();
      list.numel[list.count] = v.numel();
      if (++list.count == kMaxUnscaleTensors) flush();
    }
    if (list.count > 0) flush();
  }
}

void amp_update_scale_kernel(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                             double growth_factor, double backoff_factor, int64_t growth_interval) {
  LOOM_CUDA_CHECK(launch_amp_update_scale(scale.data_ptr<float>(), growth_tracker.data_ptr<int32_t>(),
                                          found_inf.data_ptr<float>(), growth_factor, backoff_factor,
                                          growth_interval, op_stream()));
}

}  // namespace

void register_amp_cuda_kernels() {
  register_kernel<Op::amp_unscale_and_check_>(DeviceType::CUDA, amp_unscale_and_check_kernel);
  register_kernel<Op::amp_update_scale_>(DeviceType::CUDA, amp_update_scale_kernel);
}

}  // namespace loom::cuda
