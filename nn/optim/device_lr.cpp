/* The device learning rates of capturable optimizers (see device_lr.h). */
#include "nn/optim/device_lr.h"

#include "core/cuda_graph.h"
#include "ops/ops.h"

namespace loom::nn::optim_detail {

const Tensor& DeviceLrs::for_step(size_t g, Device device, double lr, const char* optimizer) {
  if (lrs_.size() <= g) lrs_.resize(g + 1);
  for (auto& [d, t] : lrs_[g]) {
    if (d != device) continue;
    if (!cuda::current_stream_capturing()) t.fill_(lr);
    return t;
  }
  LOOM_CHECK(!cuda::current_stream_capturing(), optimizer, ": group ", g, " has no learning-rate tensor on ",
             device, " yet: run one step before capturing the optimizer into a CUDA graph (warm-up)");
  return lrs_[g].emplace_back(device, full({}, lr, TensorOptions(kFloat64).device(device))).second;
}

void DeviceLrs::write(const std::vector<ParamGroup>& groups, const char* optimizer) {
  LOOM_CHECK(!cuda::current_stream_capturing(), optimizer,
             ": its learning rates were changed while a CUDA graph is being captured; a schedule steps "
             "between replays, outside the capture");
  for (size_t g = 0; g < lrs_.size() && g < groups.size(); ++g)
    for (auto& [device, t] : lrs_[g]) t.fill_(groups[g].lr());
}

}  // namespace loom::nn::optim_detail
