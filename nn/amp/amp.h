/*
 * Mixed precision in one include: the autocast guard (core/autocast.h, policy in
 * ops/autocast.h) and the GradScaler, also under loom::nn::amp as torch groups them under
 * torch.amp / torch.cuda.amp. docs/amp.md explains when to use which.
 *
 *   {
 *     nn::amp::AutocastGuard autocast(kCPU);  // bf16 matmuls and convolutions
 *     loss = nn::functional::cross_entropy(model(x), y);
 *   }
 *   loss.backward();
 */
#pragma once

#include "core/autocast.h"
#include "nn/amp/grad_scaler.h"
#include "ops/autocast.h"

namespace loom::nn::amp {

using ::loom::autocast_dtype;
using ::loom::autocast_enabled;
using ::loom::AutocastGuard;
using ::loom::AutocastMode;
using ::loom::nn::GradScaler;
using ::loom::nn::GradScalerOptions;

}  // namespace loom::nn::amp
