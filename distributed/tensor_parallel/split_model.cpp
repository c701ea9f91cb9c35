/* Whole models split over a tensor-parallel group, with their placements (see split_model.h). */
#include "distributed/tensor_parallel/split_model.h"

#include <string>

#include "nn/layers/linear.h"

namespace loom::distributed {

SplitSequential split_linear_layers(const nn::Sequential& full, std::shared_ptr<ProcessGroup> group,
                                    LastLinear last) {
  const int64_t t = group ? group->size() : 1;
  const int r = group ? group->rank() : 0;
  SplitSequential split{std::make_shared<nn::Sequential>(), {}};
  ModelPlacement& placed = split.placement;
  int64_t linears = 0;
  for (size_t i = 0; i < full.size(); ++i) linears += dynamic_cast<const nn::Linear*>(full.ptr(i).get()) != nullptr;
  int64_t index = 0;  // among the Linear layers
  for (size_t i = 0; i < full.size(); ++i) {
    const std::string name = std::to_string(i);
    const auto* linear = dynamic_cast<const nn::Linear*>(full.ptr(i).get());
    if (linear == nullptr) {  // an activation: no parameters, the same on every rank
      split.net->push_back(full.ptr(i));
      continue;
    }
    const bool is_last = index == linears - 1, column = index % 2 == 0;
    ++index;
    if (t == 1 || (is_last && column && last == LastLinear::Replicated)) {
      const bool replicated = t > 1;
      split.net->push_back(full.ptr(i));
      placed.add_whole(name + ".weight", name + ".weight", linear->weight, replicated, r);
      if (linear->bias.defined()) placed.add_whole(name + ".bias", name + ".bias", linear->bias, replicated, r);
    } else if (column) {
      // Rank r computes outputs [r·n, (r+1)·n): its rows of the weight and of the bias.
      split.net->push_back(std::make_shared<ColumnParallelLinear>(*linear, group, /*gather_output=*/is_last));
      const int64_t n = linear->weight.size(0) / t;
      placed.pieces.push_back(ShardPlacement{name + ".weight", name + ".weight", 0, r * n, 0, n});
      if (linear->bias.defined()) placed.pieces.push_back(ShardPlacement{name + ".bias", name + ".bias", 0, r * n, 0, n});
    } else {
      // Rank r holds input columns [r·n, (r+1)·n); the bias is added once, after the sum, so
      // every rank holds all of it.
      split.net->push_back(std::make_shared<RowParallelLinear>(*linear, group));
      const int64_t n = linear->weight.size(1) / t;
      placed.pieces.push_back(ShardPlacement{name + ".weight", name + ".weight", 1, r * n, 0, n});
      if (linear->bias.defined()) placed.add_whole(name + ".bias", name + ".bias", linear->bias, true, r);
    }
  }
  return split;
}

ModelPlacement gpt_placement(const TensorParallelGPT& split, int r) {
  ModelPlacement placed;
  auto replicated = [&](const std::string& local, const std::string& full, const Tensor& t) {
    if (t.defined()) placed.add_whole(local, full, t, true, r);
  };
  auto rows = [&](const std::string& local, const std::string& full, int64_t full_begin, int64_t local_begin,
                  int64_t n) { placed.pieces.push_back(ShardPlacement{local, full, 0, full_begin, local_begin, n}); };
  auto columns = [&](const std::string& local, const std::string& full, int64_t n) {
    placed.pieces.push_back(ShardPlacement{local, full, 1, r * n, 0, n});
  };
  const int64_t vocab_rows = split.tok->weight.size(0);
  rows("tok.weight", "tok.weight", split.tok->vocab_begin(), 0, vocab_rows);
  replicated("pos.weight", "pos.weight", split.pos.weight);
  for (size_t b = 0; b < split.blocks.size(); ++b) {
    // Local names blocks.b.{qkv, attn_proj, fc, mlp_proj}; nn::GPT's blocks.b.{attn.qkv,
    // attn.proj, mlp.0, mlp.2}.
    const std::string prefix = "blocks." + std::to_string(b) + ".";
    const auto& block = split.blocks.at<TensorParallelBlock>(static_cast<int64_t>(b));
    replicated(prefix + "ln1.weight", prefix + "ln1.weight", block.ln1.weight);
    replicated(prefix + "ln1.bias", prefix + "ln1.bias", block.ln1.bias);
    replicated(prefix + "ln2.weight", prefix + "ln2.weight", block.ln2.weight);
    replicated(prefix + "ln2.bias", prefix + "ln2.bias", block.ln2.bias);
    // qkv: this rank's heads' q, k and v rows, from each third of the full [3d, d] weight.
    const int64_t d = block.qkv->weight.size(1), n = block.attn_proj->weight.size(1);  // n: this rank's heads' width
    for (int64_t third = 0; third < 3; ++third) {
      rows(prefix + "qkv.weight", prefix + "attn.qkv.weight", third * d + r * n, third * n, n);
      if (block.qkv->bias.defined()) rows(prefix + "qkv.bias", prefix + "attn.qkv.bias", third * d + r * n, third * n, n);
    }
    columns(prefix + "attn_proj.weight", prefix + "attn.proj.weight", n);
    replicated(prefix + "attn_proj.bias", prefix + "attn.proj.bias", block.attn_proj->bias);
    const int64_t h = block.fc->weight.size(0);  // this rank's MLP units
    rows(prefix + "fc.weight", prefix + "mlp.0.weight", r * h, 0, h);
    if (block.fc->bias.defined()) rows(prefix + "fc.bias", prefix + "mlp.0.bias", r * h, 0, h);
    columns(prefix + "mlp_proj.weight", prefix + "mlp.2.weight", h);
    replicated(prefix + "mlp_proj.bias", prefix + "mlp.2.bias", block.mlp_proj->bias);
  }
  replicated("ln.weight", "ln.weight", split.ln.weight);
  replicated("ln.bias", "ln.bias", split.ln.bias);
  return placed;
}

}  // namespace loom::distributed
