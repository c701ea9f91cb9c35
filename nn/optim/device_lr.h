/*
 * The learning rates a capturable optimizer's step reads on the device (SGDOptions and
 * AdamOptions' `capturable`). A CUDA graph keeps each kernel's arguments as they were at the
 * capture, so a step that passed the lr as a number would replay the capture's lr for ever,
 * whatever the schedule says. A capturable step reads it from a 0-dim float64 tensor per group
 * and device instead, and this class keeps that tensor equal to the group's lr: every eager
 * step writes it, and so does Optimizer::hyperparameters_changed(), which the LR schedules call
 * after each change. Writes are fills queued on the current stream, before the work that reads
 * them; nothing waits for the device.
 */
#pragma once

#include <utility>
#include <vector>

#include "nn/optim/optimizer.h"

namespace loom::nn::optim_detail {

class DeviceLrs {
 public:
  // Group g's lr tensor on `device`, for the step about to be queued. Eagerly, made when
  // missing and set to lr. Under a capture, the tensor the graph will read, as the last eager
  // step or write() left it; throws naming `optimizer` when there is none yet (the first step
  // must run before the capture).
  const Tensor& for_step(size_t g, Device device, double lr, const char* optimizer);
  // Sets every existing tensor to its group's current lr. Throws under a capture, where the
  // write would become part of the graph.
  void write(const std::vector<ParamGroup>& groups, const char* optimizer);

 private:
  std::vector<std::vector<std::pair<Device, Tensor>>> lrs_;  // [group] -> (device, lr)
};

}  // namespace loom::nn::optim_detail
