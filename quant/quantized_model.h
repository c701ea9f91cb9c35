/*
 * QuantizedModel: a model that runs in INT8 — integer weights, integer activations between
 * layers, oneDNN's int8 kernels (quant/kernels/) — and holds no float weights. It is what
 * convert() (convert.h) makes from a calibrated or QAT-trained PreparedModel, and what a
 * quantized-model file holds:
 *
 *   f32 input ─► [quantize u8] Conv2d+ReLU (s8 weights, s32 accumulate, requantize u8)
 *             ─► MaxPool (u8) ─► ... ─► Linear (dequantized f32 logits)
 *
 * Activations between convolutions stay NHWC-strided (logically [N, C, H, W]): oneDNN's int8
 * convolution and pooling kernels are fastest in that layout, so no reorder runs between them
 * (2.0 vs 3.0 ms for SmallCNN's layers at batch 64).
 *
 * to(Device::cuda()) gives a copy that runs on the GPU: the same stages through the INT8 ops of
 * ops/int8_ops.h (cuBLASLt's INT8 GEMM; convolutions as im2col + that GEMM), with the same
 * scales, biases and rounding as the CPU's kernels (quant/device_layers.h).
 *
 * The file is a safetensors file: for every layer i with weights, "stages.i.weight" (I8),
 * "stages.i.weight_scale" (F32, per output channel or one) and "stages.i.bias" (F32), and in the
 * header metadata "loom.quantized" = JSON describing the stages and every activation's scale and
 * zero point (docs/quantization.md shows one). Loading checks every field before building the
 * kernels, so a damaged or foreign file is a loom::Error that names the file and the field.
 */
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/serialize/safetensors.h"
#include "quant/device_layers.h"
#include "quant/kernels/int8_conv2d.h"
#include "quant/kernels/int8_linear.h"
#include "quant/stage_kind.h"

namespace loom::quant {

// The metadata key of the stage description in a quantized-model file.
inline constexpr const char* kQuantizedModelKey = "loom.quantized";

class QuantizedModel {
 public:
  // One layer of the INT8 model.
  struct Stage {
    using Kind = StageKind;
    Kind kind = Kind::Flatten;
    std::string source;                  // the float layers it came from ("c1 + relu")
    std::shared_ptr<Int8Linear> linear;  // Linear
    std::shared_ptr<Int8Conv2d> conv;    // Conv2d
    int64_t pool_kernel = 0, pool_stride = 0, pool_padding = 0;  // MaxPool2d
    // Integer outputs of Linear/Conv2d with fewer than 8 bits stay in [0, output_quant_max].
    int64_t output_quant_max = 255;
  };

  QuantizedModel(std::vector<Stage> stages, std::map<std::string, std::string> metadata = {});

  // x: Float32 input as the float model took it ([N, C, H, W] images, or [N, F]), on device()
  // -> Float32 logits on device(). Throws loom::Error naming the stage and the shapes on a
  // mismatch, or the devices when x is on another one.
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }

  // Writes the model (atomically) with its metadata plus `extra_metadata`.
  void save(const std::filesystem::path& path, const std::map<std::string, std::string>& extra_metadata = {}) const;
  // Reads and validates a file written by save(). Throws loom::Error naming the file and the
  // problem: not a quantized model, a missing or malformed field, a tensor of the wrong dtype
  // or shape, a scale that is not a positive, finite, normal float32, a zero point out of range,
  // a tensor larger than the file could hold.
  static std::shared_ptr<QuantizedModel> load(const std::filesystem::path& path);
  // The same from a safetensors file already read (e.g. nn::load_safetensors_from_bytes of a
  // download); `name` is what errors call it.
  static std::shared_ptr<QuantizedModel> from_safetensors(nn::SafetensorsFile file, const std::string& name);

  // A copy of the model that runs on `device` (the CPU: oneDNN's int8 kernels; CUDA: the INT8
  // ops, with its integer weights copied to the GPU once). It shares the stages (and so saves
  // and prints the same). Throws loom::Error for a stage with no path there (a grouped
  // convolution on CUDA), or when the build has no such device.
  std::shared_ptr<QuantizedModel> to(Device device) const;
  Device device() const { return device_; }

  const std::vector<Stage>& stages() const { return stages_; }
  // Bytes of the integer weights, scales and biases (what the file holds besides its header).
  int64_t weight_bytes() const;
  // The metadata it carries (architecture and input normalisation of the float model, qconfig).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // One line per stage: kind, shape, qparams.
  std::string to_string() const;

 private:
  Tensor forward_stage(size_t i, const Tensor& h) const;  // a Linear/Conv2d stage on device_

  std::vector<Stage> stages_;
  std::map<std::string, std::string> metadata_;
  Device device_ = Device::cpu();
  std::vector<detail::DeviceLayer> device_layers_;  // per stage (empty for stages without weights); not on the CPU
};

}  // namespace loom::quant
