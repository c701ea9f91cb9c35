/*
 * The kinds of layer an INT8 model is made of, shared by the prepared float model
 * (prepare.h's QuantStage) and the converted one (quantized_model.h), so that convert maps one
 * onto the other without a translation table.
 */
#pragma once

namespace loom::quant {

enum class StageKind { Linear, Conv2d, MaxPool2d, Flatten, ReLU };

// The name a quantized-model file uses for it: "linear", "conv2d", "max_pool2d", "flatten", "relu".
constexpr const char* stage_kind_name(StageKind kind) {
  switch (kind) {
    case StageKind::Linear: return "linear";
    case StageKind::Conv2d: return "conv2d";
    case StageKind::MaxPool2d: return "max_pool2d";
    case StageKind::Flatten: return "flatten";
    case StageKind::ReLU: return "relu";
  }
  return "?";
}

}  // namespace loom::quant
