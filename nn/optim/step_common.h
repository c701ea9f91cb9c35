/*
 * Internal to nn/optim: the checks every optimizer step makes on a parameter group and on a
 * parameter's gradient, written once so that SGD and Adam word their errors the same way.
 */
#pragma once

#include <string_view>
#include <utility>
#include <vector>

#include "core/cuda_graph.h"
#include "nn/optim/optimizer.h"

namespace loom::nn::optim_detail {

// A boolean hyper-parameter stored in the group's option map (1 or 0).
inline bool group_flag(const ParamGroup& group, const std::string& name, std::string_view optimizer,
                       size_t g) {
  const double v = group.option(name);
  LOOM_CHECK(v == 0.0 || v == 1.0, optimizer, ": option '", name, "' of group ", g,
             " is a flag and must be 0 or 1, got ", v);
  return v == 1.0;
}

// The parameter's gradient after checking that it can update the parameter.
inline const Tensor& checked_grad(const Tensor& p, std::string_view optimizer, size_t g, size_t i) {
  const Tensor& grad = p.grad();
  LOOM_CHECK(p.dtype() == kFloat32 || p.dtype() == kFloat64, optimizer, ": parameter ", i, " of group ", g,
             " has dtype ", p.dtype(), "; the step supports float32 and float64 parameters");
  LOOM_CHECK(grad.sizes() == p.sizes(), optimizer, ": parameter ", i, " of group ", g, " has shape ",
             p.sizes(), " but its gradient has shape ", grad.sizes());
  LOOM_CHECK(grad.dtype() == p.dtype(), optimizer, ": parameter ", i, " of group ", g, " is ", p.dtype(),
             " but its gradient is ", grad.dtype());
  LOOM_CHECK(grad.device() == p.device(), optimizer, ": parameter ", i, " of group ", g, " is on ",
             p.device(), " but its gradient is on ", grad.device());
  return grad;
}

// Checks every gradient of every group before a step updates anything, so that a bad one leaves
// all parameters and all state as they were.
inline void check_all_grads(const std::vector<ParamGroup>& groups, std::string_view optimizer) {
  for (size_t g = 0; g < groups.size(); ++g)
    for (size_t i = 0; i < groups[g].params.size(); ++i)
      if (groups[g].params[i].grad().defined()) checked_grad(groups[g].params[i], optimizer, g, i);
}

// Whether the fused step ops (ops/optim_ops.h) can update p in place, on whatever device;
// other parameters (non-contiguous views) take the per-op path.
inline bool fusable(const Tensor& p) {
  return p.is_contiguous();
}

// The entry of `batches` for `device`, appended empty on first use: one fused call per device,
// in the order the devices first appear (a step rarely sees more than one).
template <class Batch>
Batch& batch_for(std::vector<std::pair<Device, Batch>>& batches, Device device) {
  for (auto& [d, batch] : batches)
    if (d == device) return batch;
  return batches.emplace_back(device, Batch{}).second;
}

// State tensor `name` of a parameter, created by `make` on first use and kept in the
// parameter's dtype and device (the parameter may have been converted since, by Module::to).
// Under a CUDA-graph capture neither may happen: the graph would make or convert the state
// afresh at every replay, losing what earlier replays wrote.
template <class Make>
Tensor& state_tensor(std::map<std::string, Tensor>& state, const std::string& name, const Tensor& p,
                     std::string_view optimizer, const Make& make) {
  auto it = state.find(name);
  const bool convert =
      it != state.end() &&
      (it->second.dtype() != p.dtype() || it->second.device() != p.device() || !it->second.is_contiguous());
  LOOM_CHECK((it != state.end() && !convert) || !cuda::current_stream_capturing(), optimizer, ": state '",
             name, "' of a parameter of shape ", p.sizes(), " is ",
             it == state.end() ? "missing" : "not in its dtype and on its device",
             "; run a step before capturing the optimizer into a CUDA graph (warm-up)");
  if (it == state.end()) return state.emplace(name, make()).first->second;
  Tensor& t = it->second;
  LOOM_CHECK(t.sizes() == p.sizes(), optimizer, ": state '", name, "' has shape ", t.sizes(),
             " but its parameter now has shape ", p.sizes());
  if (convert) t = t.to(p.device(), p.dtype()).contiguous();
  return t;
}

// GradScaler's found_inf (or nothing) on the device of one fused call.
inline Tensor flag_on(const Tensor& found_inf, Device device) {
  return found_inf.defined() ? found_inf.to(device) : found_inf;  // to() keeps a tensor already there
}

// A captured step must run on the fused op (its scalars read on the device); the per-op path for
// non-contiguous parameters would bake this step's values into the graph.
inline void check_capturable_layout(const Tensor& p, bool capturing, std::string_view optimizer, size_t g,
                                    size_t i) {
  LOOM_CHECK(!capturing || fusable(p), optimizer, ": parameter ", i, " of group ", g, " (shape ", p.sizes(),
             ") is not contiguous; a step captured into a CUDA graph updates contiguous parameters only");
}

}  // namespace loom::nn::optim_detail
