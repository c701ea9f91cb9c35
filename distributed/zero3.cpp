#include "distributed/zero3.h"

#include <algorithm>
#include <set>

#include "autograd/checkpoint.h"
#include "core/error.h"
#include "core/grad_mode.h"
#include "ops/ops.h"

namespace loom::distributed {

struct FullyShardedDataParallel::Layer {
  std::shared_ptr<nn::Module> module;
  std::vector<Tensor> params;      // the module's parameter handles (released between uses)
  std::vector<DimVector> shapes;   // their full shapes
  std::vector<int64_t> offsets;    // their offsets in the flat layout
  int64_t numel = 0, shard_size = 0;
  Tensor shard;                    // [S]: this rank's elements; a parameter of the wrapper
  bool gathered = false;
};

namespace {

// What a released parameter holds: no elements, so that nothing can use stale values unseen.
Tensor released_like(const Tensor& t) { return empty({0}, t.options()); }

}  // namespace

FullyShardedDataParallel::FullyShardedDataParallel(std::shared_ptr<nn::Sequential> model,
                                                   std::shared_ptr<ProcessGroup> group)
    : model_(std::move(model)), group_(std::move(group)) {
  LOOM_CHECK(model_ != nullptr && group_ != nullptr, "FullyShardedDataParallel: null model or group");
  const int64_t n = group_->size(), rank = group_->rank();
  std::set<const void*> seen;
  int64_t total = 0;
  for (size_t i = 0; i < model_->size(); ++i) {
    auto layer = std::make_shared<Layer>();
    layer->module = model_->ptr(static_cast<int64_t>(i));
    layer->params = layer->module->parameters();
    if (!layer->params.empty()) {
      const Tensor& first = layer->params.front();
      LOOM_CHECK(first.dtype() == kFloat32 || first.dtype() == kFloat64,
                 "FullyShardedDataParallel: layer ", i, " has ", first.dtype(), " parameters; float32 or float64 only");
      for (Tensor& p : layer->params) {
        LOOM_CHECK(p.dtype() == first.dtype() && p.device() == first.device(), "FullyShardedDataParallel: layer ", i,
                   " mixes parameter dtypes or devices");
        LOOM_CHECK(seen.insert(p.data_ptr()).second, "FullyShardedDataParallel: layer ", i,
                   " shares a parameter with an earlier layer (tied weights are not supported)");
        // All ranks start from rank 0's values (waits for rank 0's broadcast).
        group_->broadcast(p, 0);
        layer->shapes.push_back(DimVector(p.sizes()));
        layer->offsets.push_back(layer->numel);
        layer->numel += p.numel();
      }
      layer->shard_size = (layer->numel + n - 1) / n;
      // This rank's elements [rank·S, (rank+1)·S) of the flattened layer (the tail is padding),
      // copied without recording: the shard is a new leaf, not a function of the parameters.
      NoGradGuard no_grad;
      Tensor flat = zeros({n * layer->shard_size}, first.options());
      for (size_t k = 0; k < layer->params.size(); ++k)
        flat.narrow(0, layer->offsets[k], layer->params[k].numel()).copy_(layer->params[k].reshape({-1}));
      layer->shard = register_parameter(
          "shard_" + std::to_string(i), flat.narrow(0, rank * layer->shard_size, layer->shard_size).clone().detach());
      release(*layer);
      total += layer->numel;
    }
    layers_.push_back(layer);
  }
  LOOM_CHECK(total > 0, "FullyShardedDataParallel: the model has no parameters to shard");
}

void FullyShardedDataParallel::gather(Layer& layer) {
  if (layer.gathered) return;
  const int64_t n = group_->size();
  Tensor full = empty({n * layer.shard_size}, layer.shard.options());
  // Every rank's shard of this layer (waits for all ranks to reach this layer).
  group_->all_gather(layer.shard.detach().contiguous(), full);
  for (size_t k = 0; k < layer.params.size(); ++k)
    layer.params[k].set_data(full.narrow(0, layer.offsets[k], shape_numel(layer.shapes[k])).view(layer.shapes[k]));
  layer.gathered = true;
}

void FullyShardedDataParallel::release(Layer& layer) {
  for (Tensor& p : layer.params) {
    p.set_data(released_like(p));
    p.mutable_grad() = Tensor();
  }
  layer.gathered = false;
}

void FullyShardedDataParallel::reduce_gradients(Layer& layer) {
  const int64_t n = group_->size();
  Tensor flat = zeros({n * layer.shard_size}, layer.shard.options());
  bool any = false;
  for (size_t k = 0; k < layer.params.size(); ++k) {
    const Tensor& g = layer.params[k].grad();
    if (!g.defined()) continue;
    flat.narrow(0, layer.offsets[k], g.numel()).copy_(g.reshape({-1}));
    any = true;
  }
  if (!any) return;  // every rank skips alike: a layer is used, or not, on all of them
  Tensor mine = empty({layer.shard_size}, layer.shard.options());
  // shard_grad_r = (1/N) Σ_q flat_q[r·S, (r+1)·S): waits for every rank's backward of this layer.
  group_->reduce_scatter(flat, mine, ReduceOp::Avg);
  Tensor& grad = layer.shard.mutable_grad();
  if (grad.defined())
    grad.add_(mine);  // gradient accumulation over micro-batches
  else
    grad = mine;
}

Tensor FullyShardedDataParallel::forward(const Tensor& input) {
  Tensor x = input;
  for (const auto& layer_ptr : layers_) {
    Layer& layer = *layer_ptr;
    if (layer.params.empty()) {
      x = (*layer.module)(x);
      continue;
    }
    // Runs the layer with its parameters gathered; without recording (the first run, and any
    // forward under no_grad) they are freed again at once. The recomputation inside backward
    // records, and keeps them until the gradients are reduced (the hook below).
    auto run = [this, &layer](const std::vector<Tensor>& inputs) {
      gather(layer);
      Tensor y = (*layer.module)(inputs[0]);
      if (!GradMode::is_enabled()) release(layer);
      return std::vector<Tensor>{y};
    };
    if (!GradMode::is_enabled()) {
      x = run({x})[0];
      continue;
    }
    x = autograd::checkpoint(run, {x}, [this, &layer] {
      reduce_gradients(layer);
      release(layer);
    })[0];
  }
  return x;
}

void FullyShardedDataParallel::train(bool on) {
  Module::train(on);
  model_->train(on);
}

nn::StateDict FullyShardedDataParallel::full_state_dict() {
  // Every layer gathered at once (one full copy of the model on each rank, for as long as it
  // takes to copy it out), then read under the wrapped model's own names.
  for (auto& layer_ptr : layers_)
    if (!layer_ptr->params.empty()) gather(*layer_ptr);
  nn::StateDict out;
  for (const auto& [name, tensor] : model_->state_dict()) out.insert(name, tensor.clone());
  for (auto& layer_ptr : layers_)
    if (!layer_ptr->params.empty()) release(*layer_ptr);
  return out;
}

ZeroMemoryReport FullyShardedDataParallel::memory_report() const {
  ZeroMemoryReport report;
  for (const auto& layer : layers_) {
    if (layer->params.empty()) continue;
    report.parameter_bytes += static_cast<int64_t>(layer->shard.nbytes());
    if (layer->shard.grad().defined()) report.gradient_bytes += static_cast<int64_t>(layer->shard.grad().nbytes());
  }
  return report;
}

int64_t FullyShardedDataParallel::peak_gathered_bytes() const {
  int64_t peak = 0;
  for (const auto& layer : layers_)
    if (!layer->params.empty())
      peak = std::max(peak, group_->size() * layer->shard_size * static_cast<int64_t>(layer->shard.element_size()));
  return peak;
}

}  // namespace loom::distributed
