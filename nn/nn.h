/*
 * loom::nn in one include, for programs that use the whole of it (torch.nn, torch.optim and
 * torch.cuda.amp in one line): modules and layers, losses, initialisation, the model zoo,
 * optimizers and LR schedules, mixed precision and checkpoints.
 */
#pragma once

#include "autograd/autograd.h"  // the tensor API, factories and ops, gradients (as torch/torch.h)
#include "nn/amp/amp.h"
#include "nn/graphed_step.h"
#include "nn/init.h"
#include "nn/layers/layers.h"
#include "nn/loss.h"
#include "nn/models/models.h"
#include "nn/module.h"
#include "nn/optim/optim.h"
#include "nn/serialize/serialize.h"
#include "nn/state_dict.h"
#include "nn/training_state.h"
