/*
 * This rank's piece of the model (see parallelism.h): the tensor-parallel and pipeline pieces
 * built from the whole model by the library (distributed/tensor_parallel/split_model.h,
 * distributed/pipeline/), and the whole model assembled back from every rank's pieces for
 * model.safetensors (distributed/shard_placement.h). What is train's own: the messages that name
 * its flags, and the GPT cut into pipeline layers.
 */
#include <set>
#include <string>

#include "core/error.h"
#include "core/grad_mode.h"
#include "ops/ops.h"
#include "tools/train/fail.h"
#include "tools/train/parallelism.h"

#if LOOM_TRAIN_WITH_MPI
#include "distributed/gradient_sync.h"
#include "distributed/tensor_parallel/regions.h"
#include "distributed/tensor_parallel/split_model.h"
#endif

namespace loom::train {
namespace {

// gpt with --pp: the GPT as a sequence of layers, [embedding, block 0, ..., block L-1, head],
// over the GPT's own modules (registered by reference: the GPT owns them).
class GptEmbedding : public nn::Module {
 public:
  explicit GptEmbedding(nn::GPT& gpt) : gpt_(gpt) {
    register_module("tok", gpt.tok);
    register_module("pos", gpt.pos);
  }
  // idx: int64 [B, T] -> [B, T, d], as GPT::forward (train's GPTs have no dropout).
  Tensor forward(const Tensor& idx) override {
    return gpt_.tok(idx) + gpt_.pos(arange(idx.size(1), TensorOptions(kInt64).device(idx.device())));
  }

 private:
  nn::GPT& gpt_;
};

class GptHead : public nn::Module {
 public:
  // The tied head multiplies by the token embedding: registered here too, so that the last
  // stage's optimizer steps its copy of it (tie_gradients keeps the copies equal).
  explicit GptHead(nn::GPT& gpt) : gpt_(gpt) {
    register_module("ln", gpt.ln);
    register_module("tok", gpt.tok);
  }
  // [B, T, d] -> logits [B, T, vocab].
  Tensor forward(const Tensor& x) override { return linear(gpt_.ln(x), gpt_.tok.weight); }

 private:
  nn::GPT& gpt_;
};

#if LOOM_TRAIN_WITH_MPI
// gpt with --tp and --pp: the same layers over a TensorParallelGPT's modules, so that each
// pipeline stage is split over its tensor group as TensorParallelGPT::forward splits the whole.
class TensorParallelGptEmbedding : public nn::Module {
 public:
  explicit TensorParallelGptEmbedding(distributed::TensorParallelGPT& gpt) : gpt_(gpt) {
    register_module("tok", gpt.tok);
    register_module("pos", gpt.pos);
  }
  // idx: int64 [B, T] -> [B, T, d], replicated over the tensor group (the vocabulary-parallel
  // lookup all-reduces its rows' parts).
  Tensor forward(const Tensor& idx) override {
    return (*gpt_.tok)(idx) + gpt_.pos(arange(idx.size(1), TensorOptions(kInt64).device(idx.device())));
  }

 private:
  distributed::TensorParallelGPT& gpt_;
};

class TensorParallelGptHead : public nn::Module {
 public:
  TensorParallelGptHead(distributed::TensorParallelGPT& gpt, std::shared_ptr<distributed::ProcessGroup> group)
      : gpt_(gpt), group_(std::move(group)) {
    register_module("ln", gpt.ln);
    register_module("tok", gpt.tok);
  }
  // [B, T, d] (replicated) -> this rank's vocabulary slice of the logits [B, T, V / t]. Every
  // slice depends on x, so x's gradient is the sum over the tensor group: f before the product.
  Tensor forward(const Tensor& x) override {
    return linear(distributed::copy_to_tensor_parallel_region(gpt_.ln(x), group_), gpt_.tok->weight);
  }

 private:
  distributed::TensorParallelGPT& gpt_;
  std::shared_ptr<distributed::ProcessGroup> group_;
};
#endif

}  // namespace

// ---------------------------------------------------------------------------------------------
// This rank's piece of the model

void Parallelism::build(std::shared_ptr<nn::Module> full) {
  full_ = std::move(full);
  if (!sharded()) {
    local_ = full_;
#if LOOM_TRAIN_WITH_MPI
    if (options_.zero == 3) {
      build_fully_sharded();
      return;
    }
    // DDP broadcasts rank 0's parameters (collective) and averages the gradients in backward.
    if (options_.dp > 1 && options_.zero == 0) {
      ddp_ = std::make_shared<distributed::DistributedDataParallel>(local_, mesh_->data_group_ptr());
      ddp_module_ = ddp_;
    }
#endif
    return;
  }
#if LOOM_TRAIN_WITH_MPI
  if (options_.model == ModelKind::kMlp)
    build_mlp(dynamic_cast<const nn::Sequential&>(*full_));
  else if (options_.pp > 1 && options_.tp > 1)
    build_gpt_tensor_pipeline(dynamic_cast<const nn::GPT&>(*full_));
  else if (options_.pp > 1)
    build_gpt_pipeline(dynamic_cast<nn::GPT&>(*full_));
  else
    build_gpt(dynamic_cast<const nn::GPT&>(*full_));
  if (local_->parameters().empty())
    fail("--pp " + std::to_string(options_.pp) + ": pipeline stage " + std::to_string(coord_pp_) +
         " got no layer with parameters; lower --pp or add --hidden layers");
  // Pieces cut from the full model's tensors are where it is; layers made anew for the piece (a
  // layer norm, the position table of tensor-parallel GPT) are on the CPU until moved.
  if (options_.device == DeviceKind::kCuda) local_->to(Device::cuda());
  std::set<std::string> unplaced = placement_.replicated;
  unplaced.insert(tied_copies_.begin(), tied_copies_.end());
  distributed::check_placements(*full_, *local_, placement_.pieces, unplaced);
#endif
}

// The library's split throws naming the layer; train names the data and the fix.
void Parallelism::check_mlp_divides(const nn::Sequential& full_mlp) const {
  const int64_t t = options_.tp;
  std::vector<const nn::Linear*> linears;
  for (size_t i = 0; i < full_mlp.size(); ++i)
    if (const auto* linear = dynamic_cast<const nn::Linear*>(full_mlp.ptr(i).get())) linears.push_back(linear);
  // The column-parallel layers split their outputs; each row layer's inputs are those outputs.
  for (size_t index = 0; t > 1 && index < linears.size(); index += 2) {
    const int64_t out = linears[index]->weight.size(0);
    const bool last = index + 1 == linears.size();
    if (out % t != 0)
      fail("--tp " + std::to_string(t) + " does not divide the " + std::to_string(out) +
           (last ? " classes of " + options_.data +
                       " (the last layer's outputs are split over the tensor-parallel "
                       "ranks); use a --tp that divides it, or an even number of "
                       "--hidden layers (the last layer is then row-parallel)"
                 : " outputs of linear layer " + std::to_string(index)));
  }
}

void Parallelism::build_mlp(const nn::Sequential& full_mlp) {
#if LOOM_TRAIN_WITH_MPI
  check_mlp_divides(full_mlp);
  // The net is the mlp's layers after a Flatten (nn::MLP's forward flattens the images itself):
  // net layer i + 1 is the mlp's layer i. The last layer, when column-parallel, gathers its
  // outputs: the loss needs every class's logit.
  nn::Sequential flat;
  flat.push_back(std::make_shared<nn::Flatten>());
  for (size_t i = 0; i < full_mlp.size(); ++i) flat.push_back(full_mlp.ptr(i));
  distributed::SplitSequential split =
      distributed::split_linear_layers(flat, mesh_->tensor_group_ptr(), distributed::LastLinear::Gathered);
  placement_ = split.placement;
  for (auto* placements : {&placement_.pieces, &placement_.copies})
    for (distributed::ShardPlacement& p : *placements)
      p.full_name = distributed::stage_parameter_name(p.full_name, 1, static_cast<int64_t>(flat.size()));
  if (options_.pp == 1) {
    local_ = split.net;
    return;
  }
  // Stages of about equal parameter counts (Flatten and the activations cost nothing).
  cut_pipeline(split.net, distributed::pipeline::parameter_counts(*split.net));
#else
  (void)full_mlp;
#endif
}

void Parallelism::cut_pipeline(const std::shared_ptr<nn::Sequential>& net, const std::vector<double>& costs) {
#if LOOM_TRAIN_WITH_MPI
  namespace pipe = distributed::pipeline;
  if (options_.pipeline_schedule == PipelineSchedule::kInterleaved) {
    cut_interleaved_pipeline(net, costs);
    return;
  }
  const std::vector<int64_t> bounds = pipe::partition_balanced(costs, options_.pp);
  const int64_t begin = bounds[coord_pp_], end = bounds[coord_pp_ + 1];
  // The names of net layer i's parameters become those of stage layer i - begin.
  placement_ = placement_.stage(begin, end);
  tied_copies_ = distributed::restrict_to_stage(tied_copies_, begin, end);
  auto stage = pipe::stage_of(*net, begin, end);
  const pipe::ScheduleKind kind =
      options_.pipeline_schedule == PipelineSchedule::kGPipe          ? pipe::ScheduleKind::GPipe
      : options_.pipeline_schedule == PipelineSchedule::kZeroBubbleH1 ? pipe::ScheduleKind::ZeroBubbleH1
                                                                      : pipe::ScheduleKind::OneFOneB;
  runner_ = std::make_unique<pipe::PipelineStageRunner>(stage, mesh_->pipeline_group_ptr(), kind,
                                                        options_.microbatches);
  local_ = stage;
#else
  (void)net;
  (void)costs;
#endif
}

void Parallelism::cut_interleaved_pipeline(const std::shared_ptr<nn::Sequential>& net,
                                           const std::vector<double>& costs) {
#if LOOM_TRAIN_WITH_MPI
  namespace pipe = distributed::pipeline;
  // p·v stages; this rank runs stages r, r + p, ... (schedule.h). local_ holds their layers one
  // after the other, so that the optimizer, the gradient norm and the checkpoint see one model:
  // net layer i of chunk c is local layer i - begin_c + (the layers of chunks 0 .. c-1).
  const int64_t p = options_.pp, v = pipeline_chunks(options_);
  const std::vector<int64_t> bounds = pipe::partition_balanced(costs, p * v);
  distributed::ModelPlacement placement;
  std::set<std::string> tied;
  std::vector<std::shared_ptr<nn::Sequential>> chunks;
  auto all = std::make_shared<nn::Sequential>();
  for (int64_t c = 0; c < v; ++c) {
    const int64_t begin = bounds[c * p + coord_pp_], end = bounds[c * p + coord_pp_ + 1];
    const int64_t offset = static_cast<int64_t>(all->size());
    auto shifted = [offset](std::string name) {
      const size_t dot = name.find('.');
      return std::to_string(std::stoll(name.substr(0, dot)) + offset) + name.substr(dot);
    };
    const distributed::ModelPlacement chunk = placement_.stage(begin, end);
    for (auto [from, to] :
         {std::pair{&chunk.pieces, &placement.pieces}, std::pair{&chunk.copies, &placement.copies}})
      for (distributed::ShardPlacement piece : *from) {
        piece.local_name = shifted(piece.local_name);
        to->push_back(piece);
      }
    for (const std::string& name : chunk.replicated) placement.replicated.insert(shifted(name));
    for (const std::string& name : distributed::restrict_to_stage(tied_copies_, begin, end))
      tied.insert(shifted(name));
    chunks.push_back(pipe::stage_of(*net, begin, end));
    for (int64_t i = begin; i < end; ++i) all->push_back(net->ptr(i));
  }
  placement_ = std::move(placement);
  tied_copies_ = std::move(tied);
  runner_ =
      std::make_unique<pipe::PipelineStageRunner>(chunks, mesh_->pipeline_group_ptr(), options_.microbatches);
  local_ = all;
#else
  (void)net;
  (void)costs;
#endif
}

void Parallelism::check_gpt_vocabulary_divides(const nn::GPT& full_gpt) const {
  const int64_t vocab = full_gpt.config().vocab_size, t = options_.tp;
  if (vocab % t != 0)
    fail("--tp " + std::to_string(t) + " does not divide the vocabulary of " + std::to_string(vocab) +
         " tokens of " + options_.data +
         " (the token embedding's rows are split over the tensor-parallel ranks); use a --tp that divides it");
}

void Parallelism::build_gpt(const nn::GPT& full_gpt) {
#if LOOM_TRAIN_WITH_MPI
  check_gpt_vocabulary_divides(full_gpt);
  tp_gpt_ = std::make_shared<distributed::TensorParallelGPT>(full_gpt, mesh_->tensor_group_ptr());
  local_ = tp_gpt_;
  placement_ = distributed::gpt_placement(*tp_gpt_, coord_tp_);
  vocab_begin_ = tp_gpt_->tok->vocab_begin();
#else
  (void)full_gpt;
#endif
}

// The pipeline layers of build_gpt_pipeline over a TensorParallelGPT's pieces: each stage's
// blocks, embedding and head are split over the stage's tensor group. The whole split GPT is
// built on every rank (the same draw) and the stage keeps its layers, as the mlp's pipeline does.
void Parallelism::build_gpt_tensor_pipeline(const nn::GPT& full_gpt) {
#if LOOM_TRAIN_WITH_MPI
  check_gpt_vocabulary_divides(full_gpt);
  split_gpt_ = std::make_shared<distributed::TensorParallelGPT>(full_gpt, mesh_->tensor_group_ptr());
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<TensorParallelGptEmbedding>(*split_gpt_));
  for (size_t b = 0; b < split_gpt_->blocks.size(); ++b) net->push_back(split_gpt_->blocks.ptr(b));
  net->push_back(std::make_shared<TensorParallelGptHead>(*split_gpt_, mesh_->tensor_group_ptr()));
  // gpt_placement names the split GPT's parameters (tok.weight, blocks.<b>.qkv.weight, ...);
  // the net's layer i holds them as "<i>.<name within the layer>".
  const auto head = std::to_string(net->size() - 1);
  auto net_name = [&head](const std::string& name) {
    const std::string blocks = "blocks.";
    if (name.starts_with(blocks)) {  // blocks.<b>.rest -> <b + 1>.rest
      const size_t dot = name.find('.', blocks.size());
      return std::to_string(std::stoll(name.substr(blocks.size(), dot - blocks.size())) + 1) + name.substr(dot);
    }
    return (name.starts_with("ln.") ? head : "0") + "." + name;  // the head's layer norm; the embeddings
  };
  const distributed::ModelPlacement split = distributed::gpt_placement(*split_gpt_, coord_tp_);
  for (distributed::ShardPlacement piece : split.pieces) {
    piece.local_name = net_name(piece.local_name);
    placement_.pieces.push_back(piece);
  }
  for (const std::string& name : split.replicated) placement_.replicated.insert(net_name(name));
  for (distributed::ShardPlacement copy : split.copies) {
    copy.local_name = net_name(copy.local_name);
    placement_.copies.push_back(copy);
  }
  tied_copies_.insert(head + ".tok.weight");  // the first stage places the embedding
  tied_weight_ = split_gpt_->tok->weight;
  vocab_begin_ = split_gpt_->tok->vocab_begin();
  cut_pipeline(net, distributed::pipeline::layer_counts(*net));
#else
  (void)full_gpt;
#endif
}

void Parallelism::build_gpt_pipeline(nn::GPT& full_gpt) {
#if LOOM_TRAIN_WITH_MPI
  LOOM_CHECK(full_gpt.config().tie_weights && full_gpt.config().dropout == 0.0,
             "train --pp: expected a GPT with tied weights and no dropout");
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<GptEmbedding>(full_gpt));
  for (size_t b = 0; b < full_gpt.blocks.size(); ++b) net->push_back(full_gpt.blocks.ptr(b));
  net->push_back(std::make_shared<GptHead>(full_gpt));
  const auto last = static_cast<int64_t>(net->size()) - 1;
  for (int64_t i = 0; i <= last; ++i)
    for (const auto& [name, t] : (*net)[i].named_parameters()) {
      const std::string local = std::to_string(i) + "." + name;
      if (i == last && name == "tok.weight")
        tied_copies_.insert(local);  // the first stage places the embedding
      else
        placement_.add_whole(local, i == 0 || i == last ? name : "blocks." + std::to_string(i - 1) + "." + name, t,
                             false, coord_tp_);
    }
  tied_weight_ = full_gpt.tok.weight;
  // Blocks cost alike; the embedding and the head (a vocabulary-sized product) about one each.
  cut_pipeline(net, distributed::pipeline::layer_counts(*net));
#else
  (void)full_gpt;
#endif
}

void Parallelism::build_fully_sharded() {
#if LOOM_TRAIN_WITH_MPI
  std::shared_ptr<nn::Sequential> layers;
  if (auto* gpt = dynamic_cast<nn::GPT*>(full_.get())) {
    LOOM_CHECK(gpt->config().tie_weights && gpt->config().dropout == 0.0,
               "train --zero 3: expected a GPT with tied weights and no dropout");
    // The pipeline's layers: FSDP ties the head's weight to the embedding's (its first user).
    layers = std::make_shared<nn::Sequential>();
    layers->push_back(std::make_shared<GptEmbedding>(*gpt));
    for (size_t b = 0; b < gpt->blocks.size(); ++b) layers->push_back(gpt->blocks.ptr(b));
    layers->push_back(std::make_shared<GptHead>(*gpt));
  } else {
    auto mlp = std::dynamic_pointer_cast<nn::Sequential>(full_);
    LOOM_CHECK(mlp != nullptr, "train --zero 3: expected a model made of a sequence of layers");
    // nn::MLP's forward flattens the images itself; its layers on their own need a Flatten.
    layers = std::make_shared<nn::Sequential>();
    layers->push_back(std::make_shared<nn::Flatten>());
    for (size_t i = 0; i < mlp->size(); ++i) layers->push_back(mlp->ptr(static_cast<int64_t>(i)));
  }
  // Collective: broadcasts rank 0's parameters, then frees all but this rank's shards.
  fsdp_ = std::make_shared<distributed::FullyShardedDataParallel>(layers, mesh_->data_group_ptr());
  fsdp_->set_prefetch(!options_.no_prefetch);
  local_ = fsdp_;
#endif
}

std::shared_ptr<void> Parallelism::whole_model() {
#if LOOM_TRAIN_WITH_MPI
  if (fsdp_) return std::make_shared<distributed::FullParameters>(*fsdp_);
#endif
  return nullptr;
}

std::optional<Parallelism::ShardedTimings> Parallelism::sharded_timings() const {
#if LOOM_TRAIN_WITH_MPI
  if (fsdp_) {
    const auto t = fsdp_->timings();
    return ShardedTimings{.gather_wait_seconds = t.gather_wait_seconds,
                          .reduce_seconds = t.reduce_seconds,
                          .gathers = t.gathers,
                          .prefetched = t.prefetched};
  }
#endif
  return std::nullopt;
}

void Parallelism::tie_gradients() {
#if LOOM_TRAIN_WITH_MPI
  if (!tied_weight_.defined()) return;
  const bool holds = coord_pp_ == 0 || coord_pp_ == options_.pp - 1;
  distributed::sum_tied_gradient(tied_weight_, holds, mesh_->pipeline_group());
#endif
}

#if LOOM_TRAIN_WITH_MPI
distributed::RankLayout Parallelism::layout() const {
  if (fsdp_) {
    // The shards' flat pieces, renamed from the sharded layers' names to the whole model's.
    const std::map<std::string, std::string> names = fully_sharded_names();
    distributed::RankLayout out;
    const std::vector<distributed::ShardPlacement> pieces = fsdp_->placement();
    for (const auto& [name, shard] : fsdp_->named_parameters()) {
      distributed::LocalParameter param{name, shard.sizes().vec(), {}};
      for (distributed::ShardPlacement piece : pieces)
        if (piece.local_name == name) {
          piece.full_name = names.at(piece.full_name);
          param.pieces.push_back(piece);
        }
      out.parameters.push_back(std::move(param));
    }
    return out;
  }
  distributed::RankLayout out = distributed::rank_layout(
      *local_, placement_, zero_ ? std::optional(std::pair{zero_->shard_begin(), zero_->shard_end()}) : std::nullopt);
  // The tied head's copy of the token embedding: this rank's vocabulary rows of it.
  for (distributed::LocalParameter& param : out.parameters)
    if (tied_copies_.count(param.name))
      param.pieces.push_back({param.name, "tok.weight", 0, vocab_begin_, 0, param.shape.at(0)});
  return out;
}

// --zero 3: the sharded layers' parameter names ("3.attn.qkv.weight") -> the whole model's
// ("blocks.2.attn.qkv.weight"), matched by the tensors themselves.
std::map<std::string, std::string> Parallelism::fully_sharded_names() const {
  std::map<std::string, std::string> names;
  const auto full = full_->named_parameters();
  for (const auto& [layer_name, t] : fsdp_->wrapped().named_parameters())
    for (const auto& [full_name, f] : full)
      if (f.is_same(t)) names.emplace(layer_name, full_name);
  return names;
}

distributed::FullShapes Parallelism::full_shapes() const {
  if (!fsdp_) return distributed::full_shapes_of(*full_);
  // The whole model's parameters are released between uses: their shapes are FSDP's record.
  const std::map<std::string, std::string> names = fully_sharded_names();
  distributed::FullShapes shapes;
  for (const auto& [name, shape] : fsdp_->full_shapes()) shapes.emplace(names.at(name), shape);
  return shapes;
}
#endif

nn::StateDict Parallelism::full_state_dict() {
  if (!sharded()) return local_->state_dict();
#if LOOM_TRAIN_WITH_MPI
  // Replica 0's ranks place their pieces; the others add zeros.
  return distributed::gather_full_state_dict(*full_, local_->state_dict(), placement_.pieces, coord_dp_ == 0,
                                            *tensor_world_);
#else
  return {};
#endif
}

}  // namespace loom::train
