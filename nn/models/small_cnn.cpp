/*
 * SmallCNN (see small_cnn.h). The pools and activations are functional, as in the anchor,
 * so that the children are exactly the three layers that hold parameters.
 */
#include "nn/models/small_cnn.h"

#include "ops/ops.h"

namespace loom::nn {
namespace {

// The side of the feature map that reaches fc: two 2x2 max pools, each rounding down.
int64_t pooled_side(int64_t in_channels, int64_t num_classes, int64_t image_size) {
  LOOM_CHECK(in_channels > 0 && num_classes > 0, "SmallCNN: expected positive in_channels and num_classes, got ",
             in_channels, " and ", num_classes);
  LOOM_CHECK(image_size >= 4, "SmallCNN: expected image_size >= 4 (two 2x2 max pools), got ", image_size);
  return image_size / 2 / 2;
}

}  // namespace

SmallCNN::SmallCNN(int64_t in_channels, int64_t num_classes, int64_t image_size)
    : c1(in_channels, 32, 5, {.padding = 2}),
      c2(32, 64, 5, {.padding = 2}),
      fc(64 * pooled_side(in_channels, num_classes, image_size) * pooled_side(in_channels, num_classes, image_size),
         num_classes),
      in_channels_(in_channels),
      image_size_(image_size) {
  register_module("c1", c1);
  register_module("c2", c2);
  register_module("fc", fc);
}

Tensor SmallCNN::forward(const Tensor& x) {
  LOOM_CHECK(x.defined(), "SmallCNN: input is an undefined tensor");
  LOOM_CHECK(x.dim() == 4 && x.size(1) == in_channels_ && x.size(2) == image_size_ && x.size(3) == image_size_,
             "SmallCNN: expected input of shape [N, ", in_channels_, ", ", image_size_, ", ", image_size_,
             "], got ", x.sizes());
  Tensor h = max_pool2d(c1(x).relu(), {2, 2});
  h = max_pool2d(c2(h).relu(), {2, 2});
  return fc(h.flatten(1));
}

}  // namespace loom::nn
