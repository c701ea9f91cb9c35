/*
 * Where the pieces a rank trains sit in the whole model, and the whole model's state dict
 * assembled from every rank's pieces: what a tensor- or pipeline-parallel job needs to write one
 * model file that a single process loads (tools/quantize, inference, a distillation teacher).
 *
 *   rank (tp 0, pp 0)   "1.weight" rows [0, 8)  ──┐
 *   rank (tp 1, pp 0)   "1.weight" rows [8, 16) ──┼──  full "0.weight" [16, in]
 *   rank (tp 0, pp 1)   "0.bias" (replicated)  ───┘    ...
 *
 * A ShardPlacement names a local parameter, the full parameter it belongs to, and the slice it
 * fills. The builders of split models return them (tensor_parallel/mlp.h,
 * tensor_parallel/gpt.h), and ModelPlacement::stage renames them for a pipeline stage.
 */
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "distributed/process_group.h"
#include "nn/module.h"

namespace loom::distributed {

// `length` slices along `dim` from `local_begin` of the local parameter `local_name` are those
// from `full_begin` of the whole model's `full_name`. A parameter this rank holds whole has
// dim 0, both begins 0 and length = its size(0).
struct ShardPlacement {
  std::string local_name, full_name;
  int64_t dim = 0, full_begin = 0, local_begin = 0, length = 0;
};

// Where every parameter of one rank's piece sits. `replicated`: the local names of parameters
// that every rank of the tensor group holds whole (a row-parallel bias, a LayerNorm); only
// tensor rank 0 places them, and only it counts them in a gradient norm.
struct ModelPlacement {
  std::vector<ShardPlacement> pieces;
  std::set<std::string> replicated;
  // Where the replicas that another rank places sit (tensor ranks other than 0): not gathered,
  // but a rank loading its piece from the whole model (distributed/reshard.h) fills them too.
  std::vector<ShardPlacement> copies;

  // A parameter `t` this rank holds whole, at `full_name` of the full model.
  void add_whole(const std::string& local_name, const std::string& full_name, const Tensor& t, bool is_replicated,
                 int tensor_rank);
  // The placement of the stage [begin, end) of a Sequential, under the stage's names.
  ModelPlacement stage(int64_t begin, int64_t end) const;
};

// "12.weight" → "3.weight" for a stage made of the layers [begin, end) of a Sequential (layer i
// becomes layer i - begin); empty when the layer is outside [begin, end).
std::string stage_parameter_name(const std::string& name, int64_t begin, int64_t end);

// The placements whose local parameter is in the stage [begin, end) of a Sequential, renamed to
// the stage's names (stage_parameter_name).
std::vector<ShardPlacement> restrict_to_stage(const std::vector<ShardPlacement>& placements, int64_t begin,
                                              int64_t end);
std::set<std::string> restrict_to_stage(const std::set<std::string>& names, int64_t begin, int64_t end);

// Checks that every placement fits a parameter of `full` and that every parameter of `local`
// is placed or listed in `unplaced` (a replica another rank places, a tied copy): a renamed layer
// would otherwise vanish from the assembled model without a word. Throws loom::Error naming it.
void check_placements(const nn::Module& full, const nn::Module& local, const std::vector<ShardPlacement>& placements,
                      const std::set<std::string>& unplaced);

// The whole model's state dict (the keys and shapes of `full`), assembled on every rank from
// every rank's `local` pieces. Ranks with `contributes` true (one data-parallel replica) write
// their placed pieces into zeros; the sum over `group` (the world) then holds every value once,
// bit for bit (x + 0 + ... + 0 is x). Collective over `group`: an all-reduce per tensor.
nn::StateDict gather_full_state_dict(const nn::Module& full, const nn::StateDict& local,
                                     const std::vector<ShardPlacement>& placements, bool contributes,
                                     ProcessGroup& group);

}  // namespace loom::distributed
