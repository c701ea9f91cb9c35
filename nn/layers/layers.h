/*
 * Every layer of loom::nn in one include (torch.nn's namespace in one line).
 */
#pragma once

#include "nn/init.h"
#include "nn/layers/activation.h"
#include "nn/layers/attention.h"
#include "nn/layers/batch_norm.h"
#include "nn/layers/containers.h"
#include "nn/layers/conv1d.h"
#include "nn/layers/conv2d.h"
#include "nn/layers/conv_transpose.h"
#include "nn/layers/dropout.h"
#include "nn/layers/embedding.h"
#include "nn/layers/flatten.h"
#include "nn/layers/group_norm.h"
#include "nn/layers/layer_norm.h"
#include "nn/layers/linear.h"
#include "nn/layers/pooling.h"
#include "nn/layers/rms_norm.h"
#include "nn/layers/rnn.h"
#include "nn/layers/rnn_cells.h"
#include "nn/layers/size2.h"
#include "nn/layers/transformer_block.h"
#include "nn/module.h"
