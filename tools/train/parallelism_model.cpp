/*
 * This rank's piece of the model (see parallelism.h): the tensor-parallel and pipeline pieces
 * built from the whole model, where each piece's values sit in the whole model (Piece), and the
 * whole model assembled back from every rank's pieces for model.safetensors.
 */
#include <set>
#include <string>

#include "core/error.h"
#include "core/grad_mode.h"
#include "ops/ops.h"
#include "tools/train/parallelism.h"

#if LOOM_TRAIN_WITH_MPI
#include "distributed/tensor_parallel/layers.h"
#endif

namespace loom::train {
namespace {

[[noreturn]] void fail(const std::string& message) {
  throw Error(message);
}

// "12.weight" with the layer index shifted by -begin: a name in the full Sequential to the same
// parameter's name in a pipeline stage that starts at layer `begin`. Empty when outside [begin, end).
std::string stage_name(const std::string& name, int64_t begin, int64_t end) {
  const size_t dot = name.find('.');
  const int64_t layer = std::stoll(name.substr(0, dot));
  if (layer < begin || layer >= end) return {};
  return std::to_string(layer - begin) + name.substr(dot);
}

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
    return gpt_.tok(idx) + gpt_.pos(arange(idx.size(1), TensorOptions(kInt64)));
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

}  // namespace

// ---------------------------------------------------------------------------------------------
// This rank's piece of the model

void Parallelism::build(std::shared_ptr<nn::Module> full) {
  full_ = std::move(full);
  if (!sharded()) {
    local_ = full_;
#if LOOM_TRAIN_WITH_MPI
    // DDP broadcasts rank 0's parameters (collective) and averages the gradients in backward.
    if (options_.dp > 1 && options_.zero == 0) {
      ddp_ = std::make_shared<distributed::DistributedDataParallel>(local_, mesh_->data_group_ptr());
      ddp_module_ = ddp_;
    }
#endif
    return;
  }
#if LOOM_TRAIN_WITH_MPI
  if (options_.model == "mlp")
    build_mlp(dynamic_cast<const nn::Sequential&>(*full_));
  else if (options_.pp > 1)
    build_gpt_pipeline(dynamic_cast<nn::GPT&>(*full_));
  else
    build_gpt(dynamic_cast<const nn::GPT&>(*full_));
  if (local_->parameters().empty())
    fail("--pp " + std::to_string(options_.pp) + ": pipeline stage " + std::to_string(coord_pp_) +
         " got no layer with parameters; lower --pp or add --hidden layers");
  check_pieces();
#endif
}

void Parallelism::whole(const std::string& local_name, const std::string& full_name, const Tensor& t,
                        bool replicated) {
  if (replicated) replicated_.insert(local_name);
  // A replicated parameter is counted (in the norm, in the assembled model) by tensor rank 0 only.
  if (!replicated || coord_tp_ == 0) pieces_.push_back(Piece{local_name, full_name, 0, 0, 0, t.size(0)});
}

void Parallelism::build_mlp(const nn::Sequential& full_mlp) {
#if LOOM_TRAIN_WITH_MPI
  const int64_t t = options_.tp, r = coord_tp_;
  auto tp_group = mesh_->tensor_group_ptr();
  // The net is the mlp's layers after a Flatten (nn::MLP's forward flattens the images itself):
  // net layer i + 1 is the mlp's layer i.
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Flatten>());
  int64_t linears = 0;
  for (size_t i = 0; i < full_mlp.size(); ++i)
    linears += dynamic_cast<const nn::Linear*>(full_mlp.ptr(i).get()) != nullptr;
  int64_t index = 0;  // among the linear layers
  for (size_t i = 0; i < full_mlp.size(); ++i) {
    const std::string mine = std::to_string(i + 1), theirs = std::to_string(i);
    const auto* linear = dynamic_cast<const nn::Linear*>(full_mlp.ptr(i).get());
    if (linear == nullptr) {  // an activation: no parameters, the same on every rank
      net->push_back(full_mlp.ptr(i));
      continue;
    }
    const bool last = index == linears - 1;
    if (t == 1) {
      net->push_back(full_mlp.ptr(i));
      whole(mine + ".weight", theirs + ".weight", linear->weight, false);
      if (linear->bias.defined()) whole(mine + ".bias", theirs + ".bias", linear->bias, false);
    } else if (index % 2 == 0) {
      // Column-parallel: rank r computes outputs [r·n, (r+1)·n). The last layer gathers them:
      // the loss needs every class's logit.
      const int64_t out = linear->weight.size(0), n = out / t;
      if (out % t != 0)
        fail("--tp " + std::to_string(t) + " does not divide the " + std::to_string(out) +
             (last ? " classes of " + options_.data +
                         " (the last layer's outputs are split over the tensor-parallel "
                         "ranks); use a --tp that divides it, or an even number of "
                         "--hidden layers (the last layer is then row-parallel)"
                   : " outputs of linear layer " + std::to_string(index)));
      net->push_back(
          std::make_shared<distributed::ColumnParallelLinear>(*linear, tp_group, /*gather_output=*/last));
      pieces_.push_back(Piece{mine + ".weight", theirs + ".weight", 0, r * n, 0, n});
      if (linear->bias.defined()) pieces_.push_back(Piece{mine + ".bias", theirs + ".bias", 0, r * n, 0, n});
    } else {
      // Row-parallel: rank r holds input columns [r·n, (r+1)·n); the bias is added once, after
      // the sum, so every rank holds all of it.
      const int64_t n = linear->weight.size(1) / t;
      net->push_back(std::make_shared<distributed::RowParallelLinear>(*linear, tp_group));
      pieces_.push_back(Piece{mine + ".weight", theirs + ".weight", 1, r * n, 0, n});
      if (linear->bias.defined()) whole(mine + ".bias", theirs + ".bias", linear->bias, true);
    }
    ++index;
  }
  if (options_.pp == 1) {
    local_ = net;
    return;
  }
  // Stages of about equal parameter counts (Flatten and the activations cost nothing).
  cut_pipeline(net, distributed::pipeline::parameter_counts(*net));
#else
  (void)full_mlp;
#endif
}

void Parallelism::cut_pipeline(const std::shared_ptr<nn::Sequential>& net, const std::vector<double>& costs) {
#if LOOM_TRAIN_WITH_MPI
  namespace pipe = distributed::pipeline;
  const std::vector<int64_t> bounds = pipe::partition_balanced(costs, options_.pp);
  const int64_t begin = bounds[coord_pp_], end = bounds[coord_pp_ + 1];
  // The names of net layer i's parameters become those of stage layer i - begin.
  std::vector<Piece> kept;
  for (Piece p : pieces_) {
    p.local_name = stage_name(p.local_name, begin, end);
    if (!p.local_name.empty()) kept.push_back(p);
  }
  pieces_ = kept;
  for (std::set<std::string>* names : {&replicated_, &tied_copies_}) {
    std::set<std::string> local;
    for (const std::string& name : *names)
      if (std::string mine = stage_name(name, begin, end); !mine.empty()) local.insert(mine);
    *names = local;
  }
  auto stage = pipe::stage_of(*net, begin, end);
  runner_ = std::make_unique<pipe::PipelineStageRunner>(
      stage, mesh_->pipeline_group_ptr(),
      options_.pipeline_schedule == "gpipe" ? pipe::ScheduleKind::GPipe : pipe::ScheduleKind::OneFOneB,
      options_.microbatches);
  local_ = stage;
#else
  (void)net;
  (void)costs;
#endif
}

void Parallelism::build_gpt(const nn::GPT& full_gpt) {
#if LOOM_TRAIN_WITH_MPI
  const nn::GPTConfig& config = full_gpt.config();
  const int64_t t = options_.tp, r = coord_tp_;
  if (config.vocab_size % t != 0)
    fail("--tp " + std::to_string(t) + " does not divide the vocabulary of " +
         std::to_string(config.vocab_size) + " tokens of " + options_.data +
         " (the token embedding's rows are split over the tensor-parallel ranks); "
         "use a --tp that divides it");
  tp_gpt_ = std::make_shared<distributed::TensorParallelGPT>(full_gpt, mesh_->tensor_group_ptr());
  local_ = tp_gpt_;
  const int64_t d = config.d_model, rows = config.vocab_size / t, n = d / t;   // n: this rank's heads' width
  auto layer_norm = [&](const std::string& name, const nn::LayerNorm& norm) {  // the same on every rank
    if (norm.weight.defined()) whole(name + ".weight", name + ".weight", norm.weight, true);
    if (norm.bias.defined()) whole(name + ".bias", name + ".bias", norm.bias, true);
  };
  pieces_.push_back(Piece{"tok.weight", "tok.weight", 0, tp_gpt_->tok->vocab_begin(), 0, rows});
  whole("pos.weight", "pos.weight", tp_gpt_->pos.weight, true);
  for (size_t b = 0; b < tp_gpt_->blocks.size(); ++b) {
    // Local names blocks.b.{qkv, attn_proj, fc, mlp_proj}; nn::GPT's blocks.b.{attn.qkv, attn.proj, mlp.0,
    // mlp.2}.
    const std::string prefix = "blocks." + std::to_string(b) + ".";
    const auto& block = tp_gpt_->blocks.at<distributed::TensorParallelBlock>(b);
    layer_norm(prefix + "ln1", block.ln1);
    layer_norm(prefix + "ln2", block.ln2);
    // qkv: this rank's heads' q, k and v rows, from each third of the full [3d, d] weight.
    for (int64_t third = 0; third < 3; ++third) {
      pieces_.push_back(
          Piece{prefix + "qkv.weight", prefix + "attn.qkv.weight", 0, third * d + r * n, third * n, n});
      if (block.qkv->bias.defined())
        pieces_.push_back(
            Piece{prefix + "qkv.bias", prefix + "attn.qkv.bias", 0, third * d + r * n, third * n, n});
    }
    pieces_.push_back(Piece{prefix + "attn_proj.weight", prefix + "attn.proj.weight", 1, r * n, 0, n});
    if (block.attn_proj->bias.defined())
      whole(prefix + "attn_proj.bias", prefix + "attn.proj.bias", block.attn_proj->bias, true);
    const int64_t h = block.fc->weight.size(0);  // this rank's MLP units
    pieces_.push_back(Piece{prefix + "fc.weight", prefix + "mlp.0.weight", 0, r * h, 0, h});
    if (block.fc->bias.defined())
      pieces_.push_back(Piece{prefix + "fc.bias", prefix + "mlp.0.bias", 0, r * h, 0, h});
    pieces_.push_back(Piece{prefix + "mlp_proj.weight", prefix + "mlp.2.weight", 1, r * h, 0, h});
    if (block.mlp_proj->bias.defined())
      whole(prefix + "mlp_proj.bias", prefix + "mlp.2.bias", block.mlp_proj->bias, true);
  }
  layer_norm("ln", tp_gpt_->ln);
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
        whole(local, i == 0 || i == last ? name : "blocks." + std::to_string(i - 1) + "." + name, t, false);
    }
  tied_weight_ = full_gpt.tok.weight;
  // Blocks cost alike; the embedding and the head (a vocabulary-sized product) about one each.
  cut_pipeline(net, distributed::pipeline::layer_counts(*net));
#else
  (void)full_gpt;
#endif
}

void Parallelism::tie_gradients() {
#if LOOM_TRAIN_WITH_MPI
  if (!tied_weight_.defined()) return;
  NoGradGuard no_grad;
  const bool holds = coord_pp_ == 0 || coord_pp_ == options_.pp - 1;
  Tensor sum = holds && tied_weight_.grad().defined() ? tied_weight_.grad().contiguous().clone()
                                                      : zeros(tied_weight_.sizes(), tied_weight_.options());
  // Waits for the first stage's embedding gradient and the last stage's head gradient (the
  // stages between add zeros).
  mesh_->pipeline_group().all_reduce(sum);
  if (holds) {
    if (tied_weight_.grad().defined())
      tied_weight_.mutable_grad().copy_(sum);
    else
      tied_weight_.mutable_grad() = sum;
  }
#endif
}

// Every local parameter must be placed in the full model (or be a replica that tensor rank 0
// places), and every place must exist: a renamed layer would otherwise vanish from
// model.safetensors without a word.
void Parallelism::check_pieces() const {
  const nn::StateDict full = full_->state_dict();
  std::set<std::string> placed;
  for (const Piece& p : pieces_) {
    placed.insert(p.local_name);
    LOOM_CHECK(full.contains(p.full_name), "train: the piece ", p.local_name, " maps to ", p.full_name,
               ", which the full ", options_.model, " does not have");
    const Tensor& target = full.at(p.full_name);
    LOOM_CHECK(p.full_begin + p.length <= target.size(p.dim), "train: the piece ", p.local_name,
               " does not fit in ", p.full_name);
  }
  for (const auto& [name, t] : local_->named_parameters())
    LOOM_CHECK(placed.count(name) || replicated_.count(name) || tied_copies_.count(name),
               "train: the parameter ", name, " of this rank's piece has no place in the full ",
               options_.model);
}

nn::StateDict Parallelism::full_state_dict() {
  if (!sharded()) return local_->state_dict();
  nn::StateDict assembled;
  for (const auto& [name, t] : full_->state_dict()) assembled.insert(name, zeros(t.sizes(), t.options()));
#if LOOM_TRAIN_WITH_MPI
  NoGradGuard no_grad;
  // Replica 0's ranks each write their pieces into zeros; the sum over the job is then every
  // value once (x + 0 + ... + 0 is x exactly, so the file holds the trained values bit for bit).
  if (coord_dp_ == 0) {
    const nn::StateDict mine = local_->state_dict();
    for (const Piece& p : pieces_) {
      Tensor to = assembled.at(p.full_name).slice(p.dim, p.full_begin, p.full_begin + p.length);
      to.copy_(mine.at(p.local_name).slice(p.dim, p.local_begin, p.local_begin + p.length));
    }
  }
  for (const auto& [name, t] : assembled) world_->all_reduce(t);  // waits for every rank's pieces
#endif
  return assembled;
}

}  // namespace loom::train
