#include "distributed/zero3.h"

#include <algorithm>
#include <map>
#include <utility>

#include "autograd/checkpoint.h"
#include "core/error.h"
#include "core/grad_mode.h"
#include "ops/ops.h"

namespace loom::distributed {

struct FullyShardedDataParallel::Layer {
  size_t index = 0;                // in the wrapped Sequential
  std::shared_ptr<nn::Module> module;
  std::vector<Tensor> params;      // the parameter handles it owns (released between uses)
  std::vector<std::string> names;  // theirs in the wrapped model ("<index>.<name in the layer>")
  std::vector<DimVector> shapes;   // their full shapes
  std::vector<int64_t> offsets;    // their offsets in the flat layout
  std::vector<Layer*> owners;      // earlier layers owning parameters it also uses (tied)
  int64_t numel = 0, shard_size = 0;
  Tensor shard;                    // [S]: this rank's elements; a parameter of the wrapper
  bool gathered = false;
  // A posted all-gather (prefetch): its input and output are kept until it is waited for.
  WorkPtr pending;
  Tensor pending_input, pending_full;
  bool uses_parameters() const { return !params.empty() || !owners.empty(); }
};

namespace {

using Clock = std::chrono::steady_clock;

// What a released parameter holds: no elements, so that nothing can use stale values unseen.
Tensor released_like(const Tensor& t) { return empty({0}, t.options()); }

double seconds_since(Clock::time_point begin) { return std::chrono::duration<double>(Clock::now() - begin).count(); }

}  // namespace

FullyShardedDataParallel::FullyShardedDataParallel(std::shared_ptr<nn::Sequential> model,
                                                   std::shared_ptr<ProcessGroup> group)
    : model_(std::move(model)), group_(std::move(group)) {
  LOOM_CHECK(model_ != nullptr && group_ != nullptr, "FullyShardedDataParallel: null model or group");
  const int64_t n = group_->size(), rank = group_->rank();
  std::map<const void*, Layer*> owner_of;  // parameter storage -> the layer that owns it
  int64_t total = 0;
  for (size_t i = 0; i < model_->size(); ++i) {
    auto layer = std::make_shared<Layer>();
    layer->index = i;
    layer->module = model_->ptr(static_cast<int64_t>(i));
    for (auto& [name, p] : layer->module->named_parameters()) {
      auto owner = owner_of.find(p.data_ptr());
      if (owner == owner_of.end()) {
        owner_of.emplace(p.data_ptr(), layer.get());
        layer->params.push_back(p);
        layer->names.push_back(std::to_string(i) + "." + name);
      } else if (owner->second != layer.get() &&
                 std::find(layer->owners.begin(), layer->owners.end(), owner->second) == layer->owners.end()) {
        layer->owners.push_back(owner->second);
      }
    }
    if (!layer->params.empty()) {
      const Tensor& first = layer->params.front();
      LOOM_CHECK(first.dtype() == kFloat32 || first.dtype() == kFloat64,
                 "FullyShardedDataParallel: layer ", i, " has ", first.dtype(), " parameters; float32 or float64 only");
      for (Tensor& p : layer->params) {
        LOOM_CHECK(p.dtype() == first.dtype() && p.device() == first.device(), "FullyShardedDataParallel: layer ", i,
                   " mixes parameter dtypes or devices");
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
      total += layer->numel;
    }
    layers_.push_back(layer);
  }
  first_layer_ = static_cast<size_t>(
      std::find_if(layers_.begin(), layers_.end(), [](const auto& l) { return !l->params.empty(); }) -
      layers_.begin());
  // Released only now: a tied parameter's later uses were found by its storage.
  for (auto& layer : layers_) release(*layer, false);
  LOOM_CHECK(total > 0, "FullyShardedDataParallel: the model has no parameters to shard");
}

void FullyShardedDataParallel::observe(const std::string& name, Clock::time_point begin, int64_t bytes) {
  if (observer_) observer_(name, begin, Clock::now(), bytes);
}

void FullyShardedDataParallel::start_gather(Layer& layer) {
  if (layer.gathered || layer.pending || layer.params.empty()) return;
  layer.pending_input = layer.shard.detach().contiguous();
  layer.pending_full = empty({group_->size() * layer.shard_size}, layer.shard.options());
  layer.pending = group_->all_gather_async(layer.pending_input, layer.pending_full);
}

void FullyShardedDataParallel::gather(Layer& layer) {
  for (Layer* owner : layer.owners) gather(*owner);
  if (layer.gathered || layer.params.empty()) return;
  const bool posted_ahead = layer.pending != nullptr;
  start_gather(layer);
  const auto begin = Clock::now();
  // Every rank's shard of this layer: waits for all ranks to have posted this layer's gather.
  layer.pending->wait();
  timings_.gather_wait_seconds += seconds_since(begin);
  ++timings_.gathers;
  if (posted_ahead) ++timings_.prefetched;
  observe("all-gather " + std::to_string(layer.index), begin,
          static_cast<int64_t>(layer.pending_full.nbytes()));
  for (size_t k = 0; k < layer.params.size(); ++k)
    layer.params[k].set_data(
        layer.pending_full.narrow(0, layer.offsets[k], shape_numel(layer.shapes[k])).view(layer.shapes[k]));
  layer.pending.reset();
  layer.pending_input = Tensor();
  layer.pending_full = Tensor();
  layer.gathered = true;
}

void FullyShardedDataParallel::release(Layer& layer, bool with_borrowed) {
  if (all_gathered_ > 0) return;
  for (Tensor& p : layer.params) {
    p.set_data(released_like(p));
    p.mutable_grad() = Tensor();
  }
  layer.gathered = false;
  if (with_borrowed)
    for (Layer* owner : layer.owners) release(*owner, false);
}

FullyShardedDataParallel::Layer* FullyShardedDataParallel::neighbour(size_t index, bool backward) const {
  if (backward) {
    for (size_t i = index; i-- > 0;)
      if (!layers_[i]->params.empty()) return layers_[i].get();
  } else {
    for (size_t i = index + 1; i < layers_.size(); ++i)
      if (!layers_[i]->params.empty()) return layers_[i].get();
  }
  return nullptr;
}

void FullyShardedDataParallel::reduce_gradients(Layer& layer) {
  if (layer.params.empty()) return;  // it borrowed all its parameters: their owner reduces them
  const int64_t n = group_->size();
  Tensor flat = zeros({n * layer.shard_size}, layer.shard.options());
  bool any = false;
  for (size_t k = 0; k < layer.params.size(); ++k) {
    const Tensor& g = layer.params[k].grad();
    if (!g.defined()) continue;
    flat.narrow(0, layer.offsets[k], g.numel()).copy_(g.reshape({-1}));
    any = true;
  }
  if (any) {
    finish_reduce();
    Tensor mine = empty({layer.shard_size}, layer.shard.options());
    // shard_grad_r = (1/N) Σ_q flat_q[r·S, (r+1)·S), completed in finish_reduce.
    pending_reduce_ = {&layer, group_->reduce_scatter_async(flat, mine, ReduceOp::Avg), flat, mine};
  }
  // Every rank skips a layer alike (a layer is used, or not, on all of them); the backward's last
  // layer leaves nothing in flight for the optimizer.
  if (layer.index == first_layer_) finish_reduce();
}

void FullyShardedDataParallel::finish_reduce() {
  if (!pending_reduce_.work) return;
  PendingReduce done = std::exchange(pending_reduce_, {});
  const auto begin = Clock::now();
  // Every rank's gradient of that layer: waits for all ranks to have posted its reduce-scatter.
  done.work->wait();
  timings_.reduce_seconds += seconds_since(begin);
  observe("reduce-scatter " + std::to_string(done.layer->index), begin, static_cast<int64_t>(done.input.nbytes()));
  Tensor& grad = done.layer->shard.mutable_grad();
  if (grad.defined())
    grad.add_(done.output);  // gradient accumulation over micro-batches
  else
    grad = done.output;
}

Tensor FullyShardedDataParallel::forward(const Tensor& input) {
  // A gather still posted here was prefetched by a forward that threw before it used it: the
  // shards may have changed since (a step), so it is completed and dropped, not used.
  for (auto& layer : layers_)
    if (layer->pending) {
      layer->pending->wait();  // the collective every rank posted
      layer->pending.reset();
      layer->pending_input = layer->pending_full = Tensor();
    }
  Tensor x = input;
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& layer = *layers_[i];
    if (!layer.uses_parameters()) {
      x = (*layer.module)(x);
      continue;
    }
    // Runs the layer with its parameters gathered; without recording (the first run, and any
    // forward under no_grad) they are freed again at once. The recomputation inside backward
    // records, and keeps them until the gradients are reduced (the hook below). Recording tells
    // the direction of travel, and so which neighbour to prefetch.
    auto run = [this, &layer, i](const std::vector<Tensor>& inputs) {
      const bool backward = GradMode::is_enabled();
      gather(layer);
      if (prefetch_ && all_gathered_ == 0)
        if (Layer* next = neighbour(i, backward)) start_gather(*next);
      Tensor y = (*layer.module)(inputs[0]);
      if (!backward) release(layer, true);
      return std::vector<Tensor>{y};
    };
    if (!GradMode::is_enabled()) {
      x = run({x})[0];
      continue;
    }
    x = autograd::checkpoint(run, {x}, [this, &layer] {
      reduce_gradients(layer);
      release(layer, false);  // a tied owner's gradient is complete only after its own backward
    })[0];
  }
  return x;
}

void FullyShardedDataParallel::train(bool on) {
  Module::train(on);
  model_->train(on);
}

void FullyShardedDataParallel::gather_all() {
  for (auto& layer : layers_) gather(*layer);
  ++all_gathered_;
}

void FullyShardedDataParallel::release_all() {
  LOOM_CHECK(all_gathered_ > 0, "FullyShardedDataParallel::release_all without gather_all");
  if (--all_gathered_ > 0) return;  // an enclosing gather_all still holds them
  for (auto& layer : layers_) release(*layer, false);
}

nn::StateDict FullyShardedDataParallel::full_state_dict() {
  // Every layer gathered at once (one full copy of the model on each rank, for as long as it
  // takes to copy it out), then read under the wrapped model's own names.
  FullParameters whole(*this);
  nn::StateDict out;
  for (const auto& [name, tensor] : model_->state_dict()) out.insert(name, tensor.clone());
  return out;
}

std::vector<ShardPlacement> FullyShardedDataParallel::placement() const {
  std::vector<ShardPlacement> pieces;
  const int64_t rank = group_->rank();
  for (const auto& layer : layers_) {
    if (layer->params.empty()) continue;
    // This rank's elements [r·S, (r+1)·S) of the layer laid end to end, against each parameter's.
    const int64_t first = rank * layer->shard_size, last = first + layer->shard_size;
    for (size_t k = 0; k < layer->params.size(); ++k) {
      const int64_t begin = layer->offsets[k], end = begin + shape_numel(layer->shapes[k]);
      const int64_t lo = std::max(begin, first), hi = std::min(end, last);
      if (lo < hi)
        pieces.push_back({"shard_" + std::to_string(layer->index), layer->names[k], -1, lo - begin, lo - first, hi - lo});
    }
  }
  return pieces;
}

std::map<std::string, std::vector<int64_t>> FullyShardedDataParallel::full_shapes() const {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& layer : layers_)
    for (size_t k = 0; k < layer->params.size(); ++k)
      shapes.emplace(layer->names[k], std::vector<int64_t>(layer->shapes[k].begin(), layer->shapes[k].end()));
  return shapes;
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
