/*
 * Everything a user of quantization needs: qparams and observers, fake-quantization for QAT,
 * the PTQ/QAT flows (prepare -> calibrate or train -> convert), INT8 kernels and quantized-model
 * files, and knowledge distillation. docs/quantization.md walks through them.
 */
#pragma once
#include "quant/convert.h"
#include "quant/distill.h"
#include "quant/fake_quantize.h"
#include "quant/fake_quantize_module.h"
#include "quant/fold_batch_norm.h"
#include "quant/observer.h"
#include "quant/prepare.h"
#include "quant/qconfig.h"
#include "quant/qparams.h"
#include "quant/quantized_model.h"
#include "quant/kernels/int8_conv2d.h"
#include "quant/kernels/int8_linear.h"
#include "quant/kernels/int8_pool.h"
#include "quant/kernels/quantize_kernels.h"
