/*
 * Everything a user of autograd needs: tensors' requires_grad/grad/backward (core/tensor.h,
 * defined here), grad(), the grad-mode guards, hooks, checkpointing, gradcheck and graph
 * inspection.
 */
#pragma once

#include "autograd/checkpoint.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "autograd/graph.h"
#include "autograd/node.h"
#include "ops/ops.h"
