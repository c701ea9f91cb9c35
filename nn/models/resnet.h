/*
 * A small ResNet for 32 x 32 images, after He et al., "Deep Residual Learning for Image
 * Recognition" (2016), section 4.2 (CIFAR-10): a 3x3 convolution to `base_width` channels,
 * three stages of BasicBlocks with base_width, 2 base_width and 4 base_width channels (the
 * first block of stages 2 and 3 halves the resolution with stride 2), global average pooling
 * and a linear classifier. blocks_per_stage = n gives ResNet-(6n + 2): 1 is ResNet-8
 * (78,042 parameters), 3 is ResNet-20 (272,474).
 *
 * Where the shape changes, the shortcut is a 1x1 convolution with stride plus BatchNorm (the
 * paper's option B, torchvision's "downsample"); elsewhere it is the identity. Names follow
 * torchvision's ResNet (conv1, bn1, layer1.0.conv1, layer2.0.downsample.0, fc), so the code
 * and checkpoints read like the model most users know. Initialisation as torchvision: convs
 * kaiming_normal_(fan_out, relu), BatchNorm weight 1 and bias 0, fc torch's Linear default.
 */
#pragma once

#include <cstdint>
#include <memory>

#include "nn/layers/batch_norm.h"
#include "nn/layers/containers.h"
#include "nn/layers/conv2d.h"
#include "nn/layers/linear.h"
#include "nn/module.h"

namespace loom::nn {

// relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), the convolutions 3x3 without bias.
class BasicBlock : public Module {
 public:
  // The block maps [N, in_channels, H, W] to [N, out_channels, H / stride, W / stride] (sizes
  // rounded up, as a 3x3 convolution with padding 1 does); a projection shortcut is made when
  // stride != 1 or the channel counts differ. Throws unless all are positive.
  BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride = 1);

  // [N, in_channels, H, W] -> [N, out_channels, Ho, Wo]. Throws (from conv1) on another
  // channel count.
  Tensor forward(const Tensor& x) override;

  Conv2d conv1;
  BatchNorm2d bn1;
  Conv2d conv2;
  BatchNorm2d bn2;
  std::shared_ptr<Sequential> downsample;  // conv1x1(stride) + BatchNorm2d, or null (identity)
};

struct ResNetConfig {
  int64_t in_channels = 3;
  int64_t num_classes = 10;
  int64_t blocks_per_stage = 1;  // 1: ResNet-8, 2: ResNet-14, 3: ResNet-20
  int64_t base_width = 16;       // channels of the first stage; doubled by each later stage
};

class ResNet : public Module {
 public:
  // Throws loom::Error unless every field of the config is positive.
  explicit ResNet(ResNetConfig config = {});

  // x: [N, in_channels, H, W] (32 x 32 for CIFAR; any size works, the strided convolutions
  // rounding up and the pooling being global) -> logits [N, num_classes]. Throws loom::Error
  // naming the shape otherwise.
  Tensor forward(const Tensor& x) override;

  const ResNetConfig& config() const { return config_; }

  Conv2d conv1;
  BatchNorm2d bn1;
  Sequential layer1;
  Sequential layer2;
  Sequential layer3;
  Linear fc;

 private:
  ResNetConfig config_;
};

}  // namespace loom::nn
