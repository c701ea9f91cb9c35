/*
 * CUDA glue of the multi-tensor optimizer ops (ops/optim_ops.h): the tensors grouped by dtype
 * into lists of at most kMax*Tensors, one launch per list (ops/cuda/optim.cu). Every launch is
 * on the current stream (op_stream.h), ordered after the backward that wrote the gradients and before
 * any later kernel that reads the parameters; nothing here waits for the device.
 */
#include <utility>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/tensor.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/op_stream.h"
#include "ops/cuda/optim_launchers.h"
#include "ops/dispatch.h"

namespace loom::cuda {

namespace {

constexpr DType kStepDTypes[] = {kFloat32, kFloat64};

// Calls add(i) for every tensor i of dtype `dtype` (but empty ones, unless keep_empty), and
// flush() after each `capacity` of them and once at the end if any are left.
template <class Add, class Flush>
void batch_by_dtype(const std::vector<Tensor>& tensors, DType dtype, int capacity, const Add& add,
                    const Flush& flush, bool keep_empty = false) {
  int count = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].dtype() != dtype || (tensors[i].numel() == 0 && !keep_empty)) continue;
    add(i, count);
    if (++count == capacity) {
      flush(count);
      count = 0;
    }
  }
  if (count > 0) flush(count);
}

// A device scalar for the kernel's arguments: its address, or null when there is none (the
// host's lr; no found_inf).
template <class T>
const T* device_scalar(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

void fused_adam_kernel(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                       const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                       const std::vector<Tensor>& max_exp_avg_sqs,
                       const std::vector<AdamStepFactors>& factors, const std::vector<Tensor>& step_counts,
                       const Tensor& lr, const Tensor& found_inf, const AdamStepOptions& o) {
  const AdamArgs args{.lr = o.lr,
                      .beta1 = o.beta1,
                      .beta2 = o.beta2,
                      .eps = o.eps,
                      .weight_decay = o.weight_decay,
                      .decoupled = o.decoupled,
                      .amsgrad = o.amsgrad,
                      .maximize = o.maximize,
                      .device_lr = device_scalar<double>(lr),
                      .found_inf = device_scalar<float>(found_inf)};
  const bool counted = !step_counts.empty();
  for (DType dtype : kStepDTypes) {
    AdamList list;
    batch_by_dtype(
        params, dtype, kMaxAdamTensors,
        [&](size_t i, int k) {
          list.param[k] = params[i].data_ptr();
          list.grad[k] = grads[i].data_ptr();
          list.exp_avg[k] = exp_avgs[i].data_ptr();
          list.exp_avg_sq[k] = exp_avg_sqs[i].data_ptr();
          list.max_exp_avg_sq[k] = o.amsgrad ? max_exp_avg_sqs[i].data_ptr() : nullptr;
          list.numel[k] = params[i].numel();
          if (counted) {
            list.step_count[k] = step_counts[i].data_ptr<int64_t>();
          } else {
            list.step_size[k] = factors[i].step_size;
            list.inv_bias_corr2_sqrt[k] = factors[i].inv_bias_corr2_sqrt;
          }
        },
        [&](int count) {
          list.count = count;
          LOOM_CUDA_CHECK(launch_fused_adam(list, static_cast<int>(dtype), args, op_stream()));
          list = AdamList{};
        },
        /*keep_empty=*/counted);  // an empty parameter's step count still advances
  }
}

void fused_sgd_kernel(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                      const std::vector<Tensor>& momentum_buffers, const Tensor& lr, const Tensor& found_inf,
                      const SgdStepOptions& o) {
  const SgdArgs args{.lr = o.lr,
                     .momentum = o.momentum,
                     .dampening = o.dampening,
                     .weight_decay = o.weight_decay,
                     .nesterov = o.nesterov,
                     .maximize = o.maximize,
                     .first_step = o.first_step,
                     .device_lr = device_scalar<double>(lr),
                     .found_inf = device_scalar<float>(found_inf)};
  for (DType dtype : kStepDTypes) {
    SgdList list;
    batch_by_dtype(
        params, dtype, kMaxSgdTensors,
        [&](size_t i, int k) {
          list.param[k] = params[i].data_ptr();
          list.grad[k] = grads[i].data_ptr();
          list.buffer[k] = o.momentum != 0 ? momentum_buffers[i].data_ptr() : nullptr;
          list.numel[k] = params[i].numel();
        },
        [&](int count) {
          list.count = count;
          LOOM_CUDA_CHECK(launch_fused_sgd(list, static_cast<int>(dtype), args, op_stream()));
          list = SgdList{};
        });
  }
}

// The tensors as foreach lists, with each list's dtype.
std::vector<std::pair<ForeachList, DType>> foreach_lists(const std::vector<Tensor>& tensors) {
  std::vector<std::pair<ForeachList, DType>> lists;
  for (DType dtype : kStepDTypes) {
    ForeachList list;
    batch_by_dtype(
        tensors, dtype, kMaxForeachTensors,
        [&](size_t i, int k) {
          list.data[k] = tensors[i].data_ptr();
          list.numel[k] = tensors[i].numel();
        },
        [&](int count) {
          list.count = count;
          lists.emplace_back(list, dtype);
          list = ForeachList{};
        });
  }
  return lists;
}

// Two steps, no atomics: every block of every list writes its partial into one workspace, and
// one block folds the workspace in order into out.
void foreach_norm_reduce_kernel(const Tensor& out, const std::vector<Tensor>& tensors, double norm_type) {
  const auto lists = foreach_lists(tensors);
  if (lists.empty()) return;  // only empty tensors: out keeps its 0
  int64_t total = 0;
  for (const auto& [list, dtype] : lists) total += int64_t{list.count} * foreach_norm_blocks(list);
  const Tensor partials = empty({total}, TensorOptions(kFloat64).device(out.device()));
  double* next = partials.data_ptr<double>();
  for (const auto& [list, dtype] : lists) {
    LOOM_CUDA_CHECK(
        launch_foreach_norm_partials(list, static_cast<int>(dtype), norm_type, next, op_stream()));
    next += int64_t{list.count} * foreach_norm_blocks(list);
  }
  LOOM_CUDA_CHECK(launch_foreach_norm_combine(partials.data_ptr<double>(), total, norm_type,
                                              out.data_ptr<double>(), op_stream()));
}

void foreach_mul_kernel(const std::vector<Tensor>& tensors, const Tensor& scale) {
  for (const auto& [list, dtype] : foreach_lists(tensors))
    LOOM_CUDA_CHECK(launch_foreach_mul(list, static_cast<int>(dtype), scale.data_ptr<double>(), op_stream()));
}

}  // namespace

void register_optim_cuda_kernels() {
  register_kernel<Op::fused_adam_>(DeviceType::CUDA, fused_adam_kernel);
  register_kernel<Op::fused_sgd_>(DeviceType::CUDA, fused_sgd_kernel);
  register_kernel<Op::foreach_norm_reduce>(DeviceType::CUDA, foreach_norm_reduce_kernel);
  register_kernel<Op::foreach_mul_>(DeviceType::CUDA, foreach_mul_kernel);
}

}  // namespace loom::cuda
