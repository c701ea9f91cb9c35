/*
 * Model files: a zoo model's weights in a safetensors file whose metadata also says what
 * architecture they belong to, so that a program given only the file (tools/quantize, a
 * distillation teacher, an inference script) can rebuild the model and load it:
 *
 *   __metadata__ = {"loom.architecture": "{\"model\": \"cnn\", \"in_channels\": 1, ...}", ...}
 *
 * The tensors are the model's state_dict, exactly as torch would name them, so the file also
 * loads into the PyTorch anchors' models with safetensors.torch.load_file.
 */
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "nn/module.h"

namespace loom::nn {

// Metadata keys. The architecture JSON (architecture_json) is required by load_model; the others
// are written by tools/train: the per-channel normalisation its image inputs had,
// {"mean": [...], "std": [...]}, which whoever runs the model must apply too, and its options.
inline constexpr const char* kArchitectureKey = "loom.architecture";
inline constexpr const char* kInputNormalizationKey = "loom.input_normalization";
inline constexpr const char* kTrainOptionsKey = "loom.train_options";

// The architecture of a zoo model as compact JSON: {"model": "mlp", "sizes": [784, 512, 10]},
// {"model": "cnn", "in_channels": 1, "num_classes": 10, "image_size": 28},
// {"model": "resnet", ...ResNetConfig}, {"model": "gpt", ...GPTConfig}.
// Throws loom::Error for a module that is not one of nn::MLP (with ReLU), SmallCNN, ResNet, GPT.
std::string architecture_json(const Module& model);

// Builds the (freshly initialised) model an architecture_json string describes.
// Throws loom::Error naming the field for malformed JSON, an unknown model or a bad value.
std::shared_ptr<Module> make_model(const std::string& architecture);

// Writes model.state_dict() and {kArchitectureKey: architecture_json(model)} plus `metadata` to
// `path`, atomically. Throws what architecture_json and save_safetensors throw.
void save_model(const std::filesystem::path& path, const Module& model,
                std::map<std::string, std::string> metadata = {});

struct LoadedModel {
  std::shared_ptr<Module> model;               // in train mode, as constructed
  std::map<std::string, std::string> metadata;  // the file's whole metadata table
};
// Rebuilds the architecture a save_model file names and loads its weights (strict).
// Throws loom::Error naming the file when it has no architecture metadata (a bare state dict:
// "... was not written by save_model"), or when the tensors do not fit the architecture (the
// missing/unexpected keys or the mismatching shapes).
LoadedModel load_model(const std::filesystem::path& path);

}  // namespace loom::nn
