/*
 * `train --resume` of a checkpoint that a job of another layout (--dp, --tp, --pp, --zero, or
 * number of ranks) wrote: this rank's sections cut anew from every saving rank's files
 * (distributed/reshard.h; docs/checkpoints.md, "Resharding").
 */
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>

#include "nn/serialize/checkpoint.h"
#include "tools/train/options.h"
#include "tools/train/parallelism.h"

namespace loom::train {

// The latest checkpoint in `checkpoints` as this rank's sections for the job `job` of layout
// `mesh` ({"dp","tp","pp","zero"}); prints one line to `out`. Throws InputError naming both
// layouts and why when it cannot be resharded (another model or optimizer, a checkpoint without
// layouts), or when there is no checkpoint.
nn::Checkpoint resharded_checkpoint(const TrainOptions& options, nn::CheckpointManager& checkpoints,
                                    Parallelism& job, const nlohmann::json& mesh, std::ostream& out);

}  // namespace loom::train
