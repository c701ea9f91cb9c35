/*
 * BasicBlock and ResNet (see resnet.h).
 */
#include "nn/models/resnet.h"

#include "nn/init.h"
#include "ops/ops.h"

namespace loom::nn {
namespace {

// torchvision's initialisation of the convolutions: He et al.'s normal with fan_out, for the
// ReLU that follows. (torch's Conv2d default, kaiming_uniform_(a = sqrt(5)), is meant for
// layers without that ReLU and trains deep ResNets more slowly.)
void init_conv(Conv2d& conv) { init::kaiming_normal_(conv.weight, 0.0, init::kFanOut, init::kReLU); }

int64_t checked_width(const ResNetConfig& c) {
  LOOM_CHECK(c.in_channels > 0 && c.num_classes > 0 && c.blocks_per_stage > 0 && c.base_width > 0,
             "ResNet: expected positive in_channels, num_classes, blocks_per_stage and base_width, got ",
             c.in_channels, ", ", c.num_classes, ", ", c.blocks_per_stage, " and ", c.base_width);
  return c.base_width;
}

}  // namespace

BasicBlock::BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride)
    : conv1(in_channels, out_channels, 3, {.stride = stride, .padding = 1, .bias = false}),
      bn1(out_channels),
      conv2(out_channels, out_channels, 3, {.padding = 1, .bias = false}),
      bn2(out_channels) {
  register_module("conv1", conv1);
  register_module("bn1", bn1);
  register_module("conv2", conv2);
  register_module("bn2", bn2);
  init_conv(conv1);
  init_conv(conv2);
  if (stride != 1 || in_channels != out_channels) {
    auto projection = std::make_shared<Conv2d>(in_channels, out_channels, 1, Conv2dOptions{.stride = stride,
                                                                                           .bias = false});
    init_conv(*projection);
    downsample = register_module("downsample", std::make_shared<Sequential>());
    downsample->push_back(projection);
    downsample->push_back(std::make_shared<BatchNorm2d>(out_channels));
  }
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor out = bn1(conv1(x)).relu();
  out = bn2(conv2(out));
  return (out + (downsample ? (*downsample)(x) : x)).relu();
}

ResNet::ResNet(ResNetConfig config)
    : conv1(config.in_channels, checked_width(config), 3, {.padding = 1, .bias = false}),
      bn1(config.base_width),
      fc(4 * config.base_width, config.num_classes),
      config_(config) {
  register_module("conv1", conv1);
  register_module("bn1", bn1);
  init_conv(conv1);
  int64_t channels = config.base_width;
  Sequential* stages[] = {&layer1, &layer2, &layer3};
  for (int64_t s = 0; s < 3; ++s) {
    const int64_t width = config.base_width << s;
    for (int64_t b = 0; b < config.blocks_per_stage; ++b) {
      const int64_t stride = s > 0 && b == 0 ? 2 : 1;
      stages[s]->push_back(std::make_shared<BasicBlock>(channels, width, stride));
      channels = width;
    }
    register_module("layer" + std::to_string(s + 1), *stages[s]);
  }
  register_module("fc", fc);
}

Tensor ResNet::forward(const Tensor& x) {
  LOOM_CHECK(x.defined(), "ResNet: input is an undefined tensor");
  LOOM_CHECK(x.dim() == 4 && x.size(1) == config_.in_channels, "ResNet: expected input of shape [N, ",
             config_.in_channels, ", H, W], got ", x.sizes());
  Tensor h = bn1(conv1(x)).relu();
  h = layer3(layer2(layer1(h)));
  return fc(adaptive_avg_pool2d(h, {1, 1}).flatten(1));
}

}  // namespace loom::nn
