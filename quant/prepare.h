/*
 * The first half of both quantization flows: a float model turned into a list of stages, each
 * of which will become one INT8 kernel (or a pass-through op on INT8 tensors), with a
 * FakeQuantize wherever the INT8 model will hold an integer tensor:
 *
 *   float:    c1 ─ relu ─ pool ─ c2 ─ relu ─ pool ─ flatten ─ fc
 *   prepared: [in FQ] ─ Conv2d+ReLU [w FQ, out FQ] ─ MaxPool ─ Conv2d+ReLU [w FQ, out FQ]
 *             ─ MaxPool ─ Flatten ─ Linear [w FQ, out FQ]
 *
 * Fusion happens here: a BatchNorm after a convolution or linear layer is folded into its
 * weights (fold_batch_norm.h), and a ReLU after it becomes part of the stage (the INT8 kernel
 * applies it while requantizing, so the activation range the observer sees is the post-ReLU
 * one). Max pooling and flattening keep their input's qparams: they move integers around.
 *
 * PTQ (prepare): eval mode, observers on, fake-quant off; run calibration batches through it,
 *   then convert() (convert.h).
 * QAT (prepare_qat): train mode, observers and fake-quant on; train it like any model (its
 *   parameters() are the stage weights and biases), then convert().
 *
 * What can be prepared: an nn::Sequential (nn::MLP is one) of Linear, Conv2d, BatchNorm1d/2d,
 * ReLU, MaxPool2d, Flatten, Dropout and Identity layers, and nn::SmallCNN. Anything else is a
 * loom::Error naming the layer.
 */
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nn/layers/containers.h"
#include "nn/layers/conv2d.h"
#include "nn/module.h"
#include "quant/fake_quantize_module.h"
#include "quant/qconfig.h"
#include "quant/stage_kind.h"

namespace loom::quant {

// One stage of a prepared model (see the header comment). Its float forward is the fused
// computation of the layers it came from.
class QuantStage : public nn::Module {
 public:
  using Kind = StageKind;

  // Linear / Conv2d: copies of the (BN-folded) weight and bias, registered as parameters.
  QuantStage(Kind kind, std::string source);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override;
  std::string extra_repr() const override;
  bool has_weight() const { return kind == Kind::Linear || kind == Kind::Conv2d; }

  Kind kind;
  std::string source;  // the float layers it came from: "c1 + ReLU"
  Tensor weight, bias;  // has_weight(): [out, in] or [out, in/groups, kh, kw]; bias [out]
  nn::Conv2dOptions conv;  // Conv2d
  bool relu = false;       // Linear / Conv2d: ReLU fused after it
  int64_t pool_kernel = 0, pool_stride = 0, pool_padding = 0;  // MaxPool2d (square)
  int64_t flatten_start = 1;  // Flatten: [N, ...] -> [N, prod(...)]
  std::shared_ptr<FakeQuantize> weight_quant, output_quant;  // has_weight()
};

class PreparedModel : public nn::Module {
 public:
  PreparedModel(std::vector<std::shared_ptr<QuantStage>> stages, const QConfig& config, std::string architecture);
  // The float forward with observers and (QAT) fake-quantization: [N, ...] -> logits.
  Tensor forward(const Tensor& x) override;

  // QAT on/off: fake-quantization of every weight and activation (observers stay as they are).
  void enable_fake_quant(bool on);
  // Observers on/off (freeze the ranges late in QAT, as torch's recipe does).
  void enable_observers(bool on);
  // Every FakeQuantize has seen data.
  bool calibrated() const;

  const QConfig& config() const { return config_; }
  // architecture_json of the float model it came from ("" when it is not a zoo model).
  const std::string& architecture() const { return architecture_; }
  std::shared_ptr<FakeQuantize> input_quant;
  nn::ModuleList stages;

 private:
  QConfig config_;
  std::string architecture_;
};

// PTQ: the stages of `model` (weights copied, BatchNorm folded with its running statistics)
// with observers, in eval mode. `model` is not modified. Throws loom::Error naming the first
// layer it cannot quantize, or a config error.
std::shared_ptr<PreparedModel> prepare(const nn::Module& model, const QConfig& config = {});
// QAT: the same, in train mode with fake-quantization on.
std::shared_ptr<PreparedModel> prepare_qat(const nn::Module& model, const QConfig& config = {});

}  // namespace loom::quant
