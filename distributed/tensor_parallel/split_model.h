/*
 * A whole model split over a tensor-parallel group, with the placement of every piece in the
 * whole model (shard_placement.h): what a training program needs to train the pieces and to
 * write the whole model back. Every rank builds the same whole model (same seed) and keeps its
 * piece, so the split model starts from exactly the single-process weights.
 *
 *   split_linear_layers   a Sequential of Linear layers and activations: the Linear layers
 *                         alternate column- and row-parallel (layers.h), so each pair costs one
 *                         all-reduce and the activations between them stay local:
 *
 *       Linear  ReLU  Linear  ReLU  Linear  ReLU  Linear        (the whole model)
 *       column  ReLU  row     ReLU  column  ReLU  row           (each rank's piece)
 *
 *                         An odd number of Linear layers ends on a column layer, whose output
 *                         is split: LastLinear says whether it gathers it or stays whole.
 *   gpt_placement         where a TensorParallelGPT's (gpt.h) pieces sit in the nn::GPT.
 */
#pragma once

#include <memory>

#include "distributed/process_group.h"
#include "distributed/shard_placement.h"
#include "distributed/tensor_parallel/gpt.h"
#include "nn/layers/containers.h"

namespace loom::distributed {

// What an odd last Linear layer becomes: column-parallel with its outputs gathered (every rank
// gets all [*, out], e.g. the logits a loss needs), or whole on every rank (replicated).
enum class LastLinear { Gathered, Replicated };

struct SplitSequential {
  std::shared_ptr<nn::Sequential> net;  // the same layer indices as the whole Sequential
  ModelPlacement placement;             // local and full names alike: "i.weight"
};

// Splits the Linear layers of `full` over `group` (see the header comment); other layers are
// shared with `full` (they hold no parameters). With a group of one rank every layer is shared
// and placed whole. Throws loom::Error when the group size does not divide what a layer splits
// (a column layer's outputs, a row layer's inputs), naming the layer.
SplitSequential split_linear_layers(const nn::Sequential& full, std::shared_ptr<ProcessGroup> group,
                                    LastLinear last = LastLinear::Gathered);

// The placement of `split`'s parameters (local names as split.named_parameters()) in the
// nn::GPT it was built from (rank = split's rank in its tensor group): the token embedding's
// rows, each block's heads (from each third of qkv) and hidden units; LayerNorms, the position
// embedding and the row-parallel biases replicated.
ModelPlacement gpt_placement(const TensorParallelGPT& split, int rank);

}  // namespace loom::distributed
