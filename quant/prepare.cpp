/* Preparing a float model for PTQ calibration or QAT (see prepare.h). */
#include "quant/prepare.h"

#include <sstream>

#include "core/error.h"
#include "core/grad_mode.h"
#include "nn/layers/activation.h"
#include "nn/layers/batch_norm.h"
#include "nn/layers/dropout.h"
#include "nn/layers/flatten.h"
#include "nn/layers/linear.h"
#include "nn/layers/pooling.h"
#include "nn/models/mlp.h"
#include "nn/models/model_file.h"
#include "nn/models/small_cnn.h"
#include "ops/ops.h"
#include "quant/fold_batch_norm.h"

namespace loom::quant {
namespace {

// One float layer in execution order. Functional steps (SmallCNN's relu and pools) have no
// module; `module` is then null and the fields say what they do.
struct FloatLayer {
  std::string name;
  const nn::Module* module = nullptr;
  enum class Op { Module, ReLU, MaxPool2x2, Flatten } op = Op::Module;
};

// The layers of the models prepare() understands, in the order their forward runs them.
std::vector<FloatLayer> float_layers(const nn::Module& model) {
  using Op = FloatLayer::Op;
  if (const auto* cnn = dynamic_cast<const nn::SmallCNN*>(&model)) {
    // SmallCNN::forward: max_pool2d(c1(x).relu(), 2) -> the same with c2 -> fc(flatten(1)).
    return {{"c1", &cnn->c1},   {"relu", nullptr, Op::ReLU}, {"max_pool2d", nullptr, Op::MaxPool2x2},
            {"c2", &cnn->c2},   {"relu", nullptr, Op::ReLU}, {"max_pool2d", nullptr, Op::MaxPool2x2},
            {"flatten", nullptr, Op::Flatten}, {"fc", &cnn->fc}};
  }
  const auto* sequential = dynamic_cast<const nn::Sequential*>(&model);
  LOOM_CHECK(sequential != nullptr, "quantize: cannot prepare a ", model.type_name(),
             ": supported are nn::Sequential models (such as nn::MLP) and nn::SmallCNN");
  std::vector<FloatLayer> layers;
  // MLP::forward flattens [N, C, H, W] inputs before its first Linear.
  if (dynamic_cast<const nn::MLP*>(&model)) layers.push_back({"flatten", nullptr, Op::Flatten});
  for (const auto& [name, child] : sequential->named_children()) layers.push_back({name, child});
  return layers;
}

template <class M>
const M* as(const FloatLayer& layer) {
  return layer.module ? dynamic_cast<const M*>(layer.module) : nullptr;
}

bool is_relu(const FloatLayer& layer) {
  return layer.op == FloatLayer::Op::ReLU || as<nn::ReLU>(layer) != nullptr;
}

std::shared_ptr<QuantStage> weighted_stage(QuantStage::Kind kind, const FloatLayer& layer, const Tensor& weight,
                                           const Tensor& bias) {
  auto stage = std::make_shared<QuantStage>(kind, layer.name);
  NoGradGuard no_grad;
  // Copies: calibration must not touch the float model, and QAT trains these, not its weights.
  stage->weight = stage->register_parameter("weight", weight.detach().to(DType::Float32).clone());
  const int64_t out = weight.size(0);
  stage->bias = stage->register_parameter("bias", bias.defined() ? bias.detach().to(DType::Float32).clone()
                                                                 : zeros({out}));
  return stage;
}

std::vector<std::shared_ptr<QuantStage>> build_stages(const nn::Module& model) {
  using Kind = QuantStage::Kind;
  const std::vector<FloatLayer> layers = float_layers(model);
  std::vector<std::shared_ptr<QuantStage>> stages;
  for (size_t i = 0; i < layers.size(); ++i) {
    const FloatLayer& layer = layers[i];
    std::shared_ptr<QuantStage> stage;
    if (const auto* linear = as<nn::Linear>(layer)) {
      stage = weighted_stage(Kind::Linear, layer, linear->weight, linear->bias);
    } else if (const auto* conv = as<nn::Conv2d>(layer)) {
      stage = weighted_stage(Kind::Conv2d, layer, conv->weight, conv->bias);
      stage->conv = conv->options();
    } else if (is_relu(layer)) {
      stage = std::make_shared<QuantStage>(Kind::ReLU, layer.name);
    } else if (layer.op == FloatLayer::Op::MaxPool2x2) {
      stage = std::make_shared<QuantStage>(Kind::MaxPool2d, layer.name);
      stage->pool_kernel = stage->pool_stride = 2;
    } else if (const auto* pool = as<nn::MaxPool2d>(layer)) {
      LOOM_CHECK(pool->kernel_size().square() && pool->stride().square() && pool->padding().square() &&
                     pool->dilation() == nn::Size2(1) && !pool->ceil_mode(),
                 "quantize: layer '", layer.name, "' (", pool->extra_repr(),
                 "): only square max pooling without dilation or ceil_mode is supported in INT8");
      stage = std::make_shared<QuantStage>(Kind::MaxPool2d, layer.name);
      stage->pool_kernel = pool->kernel_size().h;
      stage->pool_stride = pool->stride().h;
      stage->pool_padding = pool->padding().h;
    } else if (layer.op == FloatLayer::Op::Flatten) {
      stage = std::make_shared<QuantStage>(Kind::Flatten, layer.name);
    } else if (const auto* flatten = as<nn::Flatten>(layer)) {
      LOOM_CHECK(flatten->start_dim() == 1 && flatten->end_dim() == -1, "quantize: layer '", layer.name,
                 "': only Flatten(1, -1) is supported, got ", flatten->extra_repr());
      stage = std::make_shared<QuantStage>(Kind::Flatten, layer.name);
    } else if (as<nn::Dropout>(layer) || as<nn::Identity>(layer)) {
      continue;  // the identity in eval mode, which is what an INT8 model runs
    } else if (as<nn::BatchNormBase>(layer)) {
      throw Error("quantize: layer '" + layer.name + "' (" + layer.module->type_name() +
                  ") does not follow a Conv2d or Linear, so it cannot be folded");
    } else {
      throw Error("quantize: layer '" + layer.name + "' (" + (layer.module ? layer.module->type_name() : "?") +
                  ") has no INT8 implementation; supported: Linear, Conv2d, BatchNorm after them, ReLU, "
                  "MaxPool2d, Flatten, Dropout, Identity");
    }
    if (stage->has_weight()) {
      // Fusion: Conv/Linear [+ BatchNorm] [+ ReLU] become one stage.
      if (i + 1 < layers.size()) {
        if (const auto* bn = as<nn::BatchNormBase>(layers[i + 1])) {
          NoGradGuard no_grad;
          FoldedWeights folded = fold_batch_norm(stage->weight, stage->bias, *bn);
          stage->weight.copy_(folded.weight);
          stage->bias.copy_(folded.bias);
          stage->source += " + " + layers[++i].name;
        }
      }
      if (i + 1 < layers.size() && is_relu(layers[i + 1])) {
        stage->relu = true;
        stage->source += " + " + layers[++i].name;
      }
    }
    stages.push_back(std::move(stage));
  }
  LOOM_CHECK(!stages.empty() && std::any_of(stages.begin(), stages.end(), [](const auto& s) { return s->has_weight(); }),
             "quantize: the ", model.type_name(), " has no Linear or Conv2d layer to quantize");
  return stages;
}

std::shared_ptr<PreparedModel> prepare_model(const nn::Module& model, const QConfig& config, bool qat) {
  config.validate();
  std::string architecture;
  try {
    architecture = nn::architecture_json(model);
  } catch (const Error&) {
    // A user's own Sequential: it quantizes fine, its file just cannot be rebuilt as float.
  }
  auto prepared = std::make_shared<PreparedModel>(build_stages(model), config, architecture);
  prepared->train(qat);
  prepared->enable_fake_quant(qat);
  return prepared;
}

}  // namespace

QuantStage::QuantStage(Kind kind_, std::string source_) : kind(kind_), source(std::move(source_)) {}

std::string QuantStage::type_name() const {
  switch (kind) {
    case Kind::Linear: return relu ? "LinearReLU" : "Linear";
    case Kind::Conv2d: return relu ? "Conv2dReLU" : "Conv2d";
    case Kind::MaxPool2d: return "MaxPool2d";
    case Kind::Flatten: return "Flatten";
    case Kind::ReLU: return "ReLU";
  }
  return "QuantStage";
}

std::string QuantStage::extra_repr() const {
  std::ostringstream os;
  if (kind == Kind::Linear) os << "in_features=" << weight.size(1) << ", out_features=" << weight.size(0) << ", ";
  if (kind == Kind::Conv2d)
    os << weight.size(1) * conv.groups << ", " << weight.size(0) << ", kernel_size=(" << weight.size(2) << ", "
       << weight.size(3) << "), ";
  if (kind == Kind::MaxPool2d) os << "kernel_size=" << pool_kernel << ", stride=" << pool_stride << ", ";
  os << "from '" << source << "'";
  return os.str();
}

Tensor QuantStage::forward(const Tensor& x) {
  switch (kind) {
    case Kind::Linear:
    case Kind::Conv2d: {
      Tensor w = (*weight_quant)(weight);
      Tensor y = kind == Kind::Linear ? linear(x, w, bias)
                                      : conv2d(x, w, bias, conv.stride.array(), conv.padding.array(),
                                               conv.dilation.array(), conv.groups);
      if (relu) y = y.relu();
      return (*output_quant)(y);
    }
    case Kind::MaxPool2d:
      return max_pool2d(x, {pool_kernel, pool_kernel}, {pool_stride, pool_stride}, {pool_padding, pool_padding});
    case Kind::Flatten: return x.flatten(1);
    case Kind::ReLU: return x.relu();
  }
  return x;
}

PreparedModel::PreparedModel(std::vector<std::shared_ptr<QuantStage>> stage_list, const QConfig& config,
                             std::string architecture)
    : config_(config), architecture_(std::move(architecture)) {
  input_quant = register_module("input_quant", std::make_shared<FakeQuantize>(config.activation_observer(),
                                                                                 config.learnable_ranges));
  for (auto& stage : stage_list) {
    if (stage->has_weight()) {
      stage->weight_quant = stage->register_module("weight_quant",
                                                   std::make_shared<FakeQuantize>(config.weight_observer()));
      stage->output_quant = stage->register_module(
          "output_quant", std::make_shared<FakeQuantize>(config.activation_observer(), config.learnable_ranges));
    }
    stages.push_back(stage);
  }
  register_module("stages", stages);
}

Tensor PreparedModel::forward(const Tensor& x) {
  LOOM_CHECK(x.defined(), "PreparedModel: input is an undefined tensor");
  Tensor h = (*input_quant)(x.to(DType::Float32));
  for (const auto& stage : stages) h = (*stage)(h);
  return h;
}

void PreparedModel::enable_fake_quant(bool on) {
  apply([on](nn::Module& m) {
    if (auto* fq = dynamic_cast<FakeQuantize*>(&m)) fq->enable_fake_quant(on);
  });
}

void PreparedModel::enable_observers(bool on) {
  apply([on](nn::Module& m) {
    if (auto* fq = dynamic_cast<FakeQuantize*>(&m)) fq->enable_observer(on);
  });
}

bool PreparedModel::calibrated() const {
  bool all = true;
  for (const nn::Module* m : modules())
    if (const auto* fq = dynamic_cast<const FakeQuantize*>(m)) all = all && fq->calibrated();
  return all;
}

std::shared_ptr<PreparedModel> prepare(const nn::Module& model, const QConfig& config) {
  return prepare_model(model, config, /*qat=*/false);
}

std::shared_ptr<PreparedModel> prepare_qat(const nn::Module& model, const QConfig& config) {
  return prepare_model(model, config, /*qat=*/true);
}

}  // namespace loom::quant
