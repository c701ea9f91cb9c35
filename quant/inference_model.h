/*
 * InferenceModel: a model file loaded for inference, whichever tool wrote it — tools/train's
 * float model (nn::save_model: "loom.architecture" in the metadata) or tools/quantize's INT8
 * model (QuantizedModel::save: "loom.quantized") — as one function from a batch of inputs to
 * logits, on the device asked for, with what its caller must know to feed it: the input
 * normalisation train recorded, and a GPT's context.
 *
 * It lives in quant because that is the lowest layer that reads both formats (nn knows only the
 * float one). It does not open datasets: data/batch_prediction.h takes the function and the
 * input description, so predict's pieces meet only in the tool.
 */
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace loom::quant {

struct InferenceModel {
  // Inputs [B, ...] on `device` -> logits [B, ..., K] on `device`. Call under NoGradGuard.
  std::function<Tensor(const Tensor&)> forward;
  Device device = kCPU;
  bool int8 = false;
  std::string description;  // "cnn (SmallCNN, 26,474 parameters, f32)", "INT8 (5 stages from cnn)"
  std::map<std::string, std::string> metadata;  // the file's metadata table
  int64_t context = 0;  // a language model's (GPT) tokens per window; 0 for image models
  int64_t vocab = 0;    // a language model's vocabulary size; 0 for image models
  // The per-channel normalisation of its image inputs, as tools/train recorded it; empty when
  // the file records none (inputs are then x / 255).
  std::vector<float> mean, std;
};

// Loads the model in `path` (in eval mode) onto `device`. Throws loom::Error naming the file
// when it is missing, is not a safetensors file, is a safetensors file that is not a Loom model
// (neither metadata key), or does not load (see nn::load_model, QuantizedModel::load); and when
// its input normalisation metadata is malformed or the device is not in this build.
InferenceModel load_inference_model(const std::filesystem::path& path, Device device = kCPU);

}  // namespace loom::quant
