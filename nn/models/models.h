/*
 * The model zoo in one include: the networks of the benchmarks and examples, each the twin of
 * a PyTorch reference model (see each header).
 */
#pragma once

#include "nn/models/gpt.h"
#include "nn/models/mlp.h"
#include "nn/models/resnet.h"
#include "nn/models/model_file.h"
#include "nn/models/small_cnn.h"
