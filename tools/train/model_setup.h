/*
 * What `train` builds from its options: the model from the zoo (nn/models), the --teacher model,
 * the optimizer and the learning-rate schedule. Bad input throws loom::Error naming the flag.
 */
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "nn/nn.h"
#include "tools/train/options.h"
#include "tools/train/run_data.h"

namespace loom::train {

// The whole --model for the data `d` (drawn from the current generator state).
std::shared_ptr<nn::Module> make_model(const TrainOptions& o, const Data& d);
// The --teacher model file (model.safetensors of an earlier run), checked against the data: it
// must predict the same classes (or tokens) as the student, from the same inputs.
std::shared_ptr<nn::Module> load_teacher(const TrainOptions& o, const Data& d);
// Every optimizer here acts element by element, so one over a ZeRO shard's slices of the
// parameters computes what one over the whole parameters would.
std::unique_ptr<nn::Optimizer> make_optimizer(const TrainOptions& o, std::vector<Tensor> params);
// --schedule over `total_steps` optimizer steps; nullptr for none.
std::unique_ptr<nn::LRScheduler> make_schedule(const TrainOptions& o, nn::Optimizer& optimizer, int64_t total_steps);

}  // namespace loom::train
