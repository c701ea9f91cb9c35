/*
 * SmallCNN: the two-convolution network of the CIFAR-10 / Fashion-MNIST benchmarks, the twin
 * of the PyTorch anchor SmallCNN (same layers, names c1, c2, fc, and parameter count):
 *
 *   conv5x5(in -> 32, pad 2) - relu - maxpool 2 - conv5x5(32 -> 64, pad 2) - relu - maxpool 2
 *   - flatten - linear(64 * (s/4)^2 -> classes)
 *
 * 94,666 parameters for 3 x 32 x 32 images and 10 classes; Fashion-MNIST (1 x 28 x 28) is
 * SmallCNN(1, 10, 28), whose fc is 64 * 7 * 7 -> 10.
 */
#pragma once

#include <cstdint>

#include "nn/layers/conv2d.h"
#include "nn/layers/linear.h"
#include "nn/module.h"

namespace loom::nn {

class SmallCNN : public Module {
 public:
  // image_size: the height and width of the (square) input images; each max pool halves it,
  // rounding down, as torch's. Throws loom::Error unless all three are positive and the
  // image is at least 4 x 4.
  explicit SmallCNN(int64_t in_channels = 3, int64_t num_classes = 10, int64_t image_size = 32);

  // x: [N, in_channels, image_size, image_size] -> logits [N, num_classes]. Throws
  // loom::Error naming the expected and the actual shape.
  Tensor forward(const Tensor& x) override;

  int64_t in_channels() const { return in_channels_; }
  int64_t num_classes() const { return fc.out_features(); }
  int64_t image_size() const { return image_size_; }

  Conv2d c1;
  Conv2d c2;
  Linear fc;

 private:
  int64_t in_channels_, image_size_;
};

}  // namespace loom::nn
