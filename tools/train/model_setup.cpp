/* The model, teacher, optimizer and schedule of a `train` run (see model_setup.h). */
#include "tools/train/model_setup.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/grad_mode.h"
#include "ops/ops.h"
#include "tools/train/fail.h"

namespace loom::train {
namespace {

namespace fs = std::filesystem;

}  // namespace

std::shared_ptr<nn::Module> make_model(const TrainOptions& o, const Data& d) {
  switch (o.model) {
    case ModelKind::kGpt:
      return std::make_shared<nn::GPT>(nn::GPTConfig{.vocab_size = d.vocab,
                                                     .context = o.context,
                                                     .n_layers = o.layers,
                                                     .n_heads = o.heads,
                                                     .d_model = o.d_model,
                                                     .dropout = o.dropout,
                                                     .gelu_approximate = o.gelu});
    case ModelKind::kMlp: {
      std::vector<int64_t> sizes{d.channels * d.height * d.width};
      for (int64_t h : parse_hidden(o.hidden)) sizes.push_back(h);
      sizes.push_back(d.classes);
      return std::make_shared<nn::MLP>(sizes);
    }
    case ModelKind::kCnn:
      if (d.height != d.width || d.height % 4 != 0)
        fail("--model cnn needs square images with a side divisible by 4; " + o.data + " has " +
             std::to_string(d.height) + "x" + std::to_string(d.width) + " (use --model mlp or resnet)");
      return std::make_shared<nn::SmallCNN>(d.channels, d.classes, d.height);
    case ModelKind::kResnet:
      break;
  }
  return std::make_shared<nn::ResNet>(
      nn::ResNetConfig{.in_channels = d.channels, .num_classes = d.classes, .blocks_per_stage = o.blocks});
}

std::shared_ptr<nn::Module> load_teacher(const TrainOptions& o, const Data& d) {
  if (!fs::exists(o.teacher))
    fail("--teacher " + o.teacher + ": no such file (give a run's model.safetensors)");
  nn::LoadedModel teacher;
  try {
    teacher = nn::load_model(o.teacher);
  } catch (const Error& e) {
    fail(std::string("--teacher: ") + e.what());
  }
  auto it = teacher.metadata.find(nn::kInputNormalizationKey);
  if (!d.tokens && it != teacher.metadata.end() &&
      it->second != nlohmann::json{{"mean", d.mean}, {"std", d.std}}.dump())
    fail("--teacher " + o.teacher + " was trained on inputs normalised differently (" + it->second +
         "): train it on the same --data");
  // One example through the teacher: it must take this data's input and predict as many classes
  // (or tokens) as the student does.
  data::Example example = d.train->get(0);
  data::SampleRng rng(0, 0, 0);
  if (d.train_transform) example = d.train_transform->apply(example, rng);
  NoGradGuard no_grad;
  Tensor out;
  try {
    teacher.model->eval();
    out = (*teacher.model)(example.data.unsqueeze(0));
  } catch (const Error& e) {
    fail("--teacher " + o.teacher + " does not take this data's examples: " + e.what());
  }
  const int64_t classes = d.tokens ? d.vocab : d.classes;
  if (out.size(-1) != classes) {
    std::ostringstream message;
    message << "--teacher " << o.teacher << " outputs " << out.sizes() << " for one example, but the "
            << to_string(o.model) << " student predicts " << classes << (d.tokens ? " tokens" : " classes");
    fail(message.str());
  }
  return teacher.model;
}

// With --cuda-graph the optimizer is capturable: its captured step reads the step counts and the
// schedule's lr on the GPU. So it is with --amp fp16 on CUDA: the loss scaler then leaves the skip
// of an inf/NaN step to the GPU instead of waiting for it every step (nn/amp/grad_scaler.h).
std::unique_ptr<nn::Optimizer> make_optimizer(const TrainOptions& o, std::vector<Tensor> params) {
  const bool capturable = o.cuda_graph || (o.device == DeviceKind::kCuda && o.amp == AmpMode::kFp16);
  switch (o.optimizer) {
    case OptimizerKind::kSgd:
      return std::make_unique<nn::SGD>(
          std::move(params),
          nn::SGDOptions{
              .lr = o.lr, .momentum = o.momentum, .weight_decay = o.weight_decay, .capturable = capturable});
    case OptimizerKind::kAdam:
      return std::make_unique<nn::Adam>(
          std::move(params),
          nn::AdamOptions{.lr = o.lr, .weight_decay = o.weight_decay, .capturable = capturable});
    case OptimizerKind::kAdamW:
      break;
  }
  return std::make_unique<nn::AdamW>(
      std::move(params),
      nn::AdamWOptions{.lr = o.lr, .weight_decay = o.weight_decay, .capturable = capturable});
}

std::unique_ptr<nn::LRScheduler> make_schedule(const TrainOptions& o, nn::Optimizer& optimizer,
                                               int64_t total_steps) {
  switch (o.schedule) {
    case LrSchedule::kCosine: return std::make_unique<nn::CosineWithWarmup>(optimizer, o.warmup, total_steps);
    case LrSchedule::kStep:
      return std::make_unique<nn::StepLR>(optimizer, std::max<int64_t>(1, total_steps / 3), 0.1);
    case LrSchedule::kLinear: return std::make_unique<nn::LinearLR>(optimizer, 1.0, 0.0, total_steps);
    case LrSchedule::kOneCycle: return std::make_unique<nn::OneCycleLR>(optimizer, o.lr, total_steps);
    case LrSchedule::kNone: break;
  }
  return nullptr;
}

}  // namespace loom::train
