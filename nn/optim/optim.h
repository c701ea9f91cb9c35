/*
 * Everything of nn/optim in one include: the optimizers (SGD, Adam, AdamW), the learning-rate
 * schedules and gradient clipping. See docs/optim.md for a guide.
 */
#pragma once

#include "nn/optim/adam.h"
#include "nn/optim/clip_grad.h"
#include "nn/optim/lr_scheduler.h"
#include "nn/optim/optimizer.h"
#include "nn/optim/sgd.h"
