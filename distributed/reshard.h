/*
 * Checkpoints that reshard: the training state that a job of one layout (dp, tp, pp, ZeRO stage)
 * saved, loaded by a job of another layout, the same model and optimizer state bit for bit.
 *
 * Each rank of a job holds a piece: tensor parallelism splits a weight along a dimension, a
 * pipeline stage holds a subset of the layers under its own names, data-parallel replicas hold
 * copies, and ZeRO splits the optimizer's state over the replicas along the parameters laid end
 * to end. A RankLayout says which piece, as data:
 *
 *   rank (dp 0, tp 1, pp 0), --zero 1 over 2 replicas
 *     parameters (optimizer order)   "1.weight" [8, 16]  <- full "0.weight" rows [8, 16)
 *                                    "1.bias"   [16]     <- full "0.bias" (whole: a replica)
 *     zero_shard [0, 136)            optimizer state entry k: the k-th overlap of a parameter
 *                                    with these elements of the parameters laid end to end
 *
 * Resharding is then two steps that need no collective: gather the whole state (under the
 * single-process names) from every saving rank's sections, each element from the lowest rank
 * that holds it; and take the loading rank's slices of it. Every rank of the loading job reads
 * the files it needs from the shared run directory: those of every saving rank but the replicas
 * whose layout a lower rank has (data parallelism without ZeRO), which hold the same values.
 *
 * The whole optimizer state is keyed "<full parameter name>.<state name>" ("0.weight.exp_avg",
 * "0.weight.step"), plus the group's hyper-parameters "param_groups.0.<option>". A job's
 * optimizer has one parameter group (what train builds).
 */
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "distributed/shard_placement.h"
#include "nn/serialize/checkpoint.h"
#include "nn/state_dict.h"

namespace loom::distributed {

// The key of a rank's checkpoint metadata (CheckpointManager::save's metadata_json, an object)
// under which train records the rank's layout (rank_layout_to_json).
inline constexpr const char* kLayoutMetadataKey = "layout";

// One parameter of a rank's piece: its name and shape there, and every slice of the whole model
// it holds (`pieces`' local_name is `name`): one for a parameter held whole, one per split
// dimension's block otherwise (a tensor-parallel qkv weight holds three: its heads' rows of q,
// k and v). Replicas and tied copies list their slices too: a loading rank fills all of them.
// A piece with dim -1 is flat: the local parameter is 1-D and its elements [local_begin,
// local_begin + length) are the whole tensor's flattened elements [full_begin, full_begin +
// length). FullyShardedDataParallel's shards are such (zero3.h: each layer's parameters laid end
// to end, padded, cut in equal parts); a flat parameter's elements outside its pieces are padding,
// zero when cut.
struct LocalParameter {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<ShardPlacement> pieces;
};

struct RankLayout {
  std::vector<LocalParameter> parameters;  // in the order of the rank's optimizer
  // ZeRO stages 1 and 2 (zero.h): the elements [first, second) of the parameters laid end to end
  // whose optimizer state this rank holds (ZeroOptimizer::shard_begin/shard_end). nullopt: the
  // optimizer holds every parameter whole.
  std::optional<std::pair<int64_t, int64_t>> zero_shard;
};

// The layout of a rank that trains `local`, whose parameters sit in the whole model as `placement`
// says (its pieces and copies, under local()'s names). An empty placement means the whole model,
// every parameter under its own name; otherwise a parameter it does not name gets no piece (the
// caller adds it: a tied copy), which scatter_training_state refuses.
RankLayout rank_layout(const nn::Module& local, const ModelPlacement& placement,
                       std::optional<std::pair<int64_t, int64_t>> zero_shard = std::nullopt);

// RankLayout as a JSON object, and back. rank_layout_from_json throws loom::Error naming what is
// missing or malformed.
std::string rank_layout_to_json(const RankLayout& layout);
RankLayout rank_layout_from_json(const std::string& json);

// The layout a rank recorded in its checkpoint metadata (CheckpointParts::rank_metadata), under
// kLayoutMetadataKey. Throws loom::Error when there is none (a checkpoint written before layouts
// were recorded) or it is malformed.
RankLayout rank_layout_from_metadata(const std::string& rank_metadata);

// The whole model's parameter shapes (full name -> sizes): what the loading job's model has.
// Buffers (a BatchNorm's running statistics) are not in it: a layout places parameters only, and
// a caller takes a buffer from a saving rank that holds it under the same name.
using FullShapes = std::map<std::string, std::vector<int64_t>>;
FullShapes full_shapes_of(const nn::Module& full_model);

// The training state under the single-process names (see the header comment).
struct FullTrainingState {
  nn::StateDict model;      // full name -> whole tensor
  nn::StateDict optimizer;  // "<full name>.<state>" -> whole tensor (or the 0-dim step count)
};

// One rank's "model" and "optimizer" sections.
struct RankTrainingState {
  nn::StateDict model, optimizer;
};

// The whole state from every saving rank's layout and sections (index = saving rank). Throws
// loom::Error when a piece does not fit `shapes` (another model: the message names the tensor,
// both shapes), a parameter of `shapes` is not covered by the pieces, a section does not match
// its layout, the ranks' step counts of one parameter disagree, or the optimizers have other
// than one parameter group.
FullTrainingState gather_training_state(const std::vector<RankLayout>& layouts,
                                        const std::vector<RankTrainingState>& ranks,
                                        const FullShapes& shapes);

// The sections of the rank of `layout`: its parameters' slices of `full.model`, and its
// optimizer's state (per parameter, or per ZeRO shard view) of `full.optimizer`. A rank whose
// ZeRO shard is empty gets an empty optimizer section. Throws loom::Error when the layout names
// a tensor that `full` does not have or does not cover a parameter.
RankTrainingState scatter_training_state(const FullTrainingState& full, const RankLayout& layout);

// Both steps for the rank of `mine`, from a checkpoint's parts (every saving rank's metadata
// holds its layout under kLayoutMetadataKey), reading the files of the saving ranks it needs.
// Throws loom::Error when a saving rank recorded no layout (a checkpoint written before layouts
// were recorded), and as the two steps do.
RankTrainingState reshard_checkpoint(const nn::CheckpointParts& parts, const RankLayout& mine,
                                     const FullShapes& shapes);

// The loader position of a job whose replicas together read `new_global_batch` examples a
// batch, resuming where one that read `old_global_batch` a batch stopped after `old_batch`
// batches of the epoch: the same number of the epoch's examples consumed, rounded down to a whole
// batch (the examples of a partial batch are read again).
int64_t resharded_batch(int64_t old_batch, int64_t old_global_batch, int64_t new_global_batch);

}  // namespace loom::distributed
