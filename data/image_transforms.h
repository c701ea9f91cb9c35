/*
 * Image transforms on example.data of shape [C, H, W] (any leading dims; the last two are
 * height and width), as torchvision's: Normalize, RandomCrop with padding,
 * RandomHorizontalFlip. The target passes through.
 *
 * They run once per sample on a loader worker, so they are plain loops over raw memory rather
 * than tensor ops: a 28x28 image is cheaper to move than an op is to dispatch.
 */
#pragma once

#include <vector>

#include "data/transform.h"

namespace loom::data {

// [C, H, W] -> float32 [C, H, W]: (x - mean[c]) / std[c]. uint8 input is first scaled to
// [0, 1] (x / 255, as torchvision's ToTensor); other dtypes are taken as they are. mean and
// std have one value per channel, or one for all.
class Normalize : public Transform {
 public:
  Normalize(std::vector<float> mean, std::vector<float> std);
  Example apply(const Example& example, SampleRng& rng) const override;
  bool is_random() const override { return false; }
  std::string description() const override;

 private:
  std::vector<float> mean_, std_;
};

// [..., H, W] -> [..., height, width]: pads each side by `padding` with zeros, then cuts a
// height x width window at a uniformly random position (draws: row offset, then column).
class RandomCrop : public Transform {
 public:
  RandomCrop(int64_t height, int64_t width, int64_t padding = 0);
  Example apply(const Example& example, SampleRng& rng) const override;
  bool is_random() const override { return true; }
  std::string description() const override;

 private:
  int64_t height_, width_, padding_;
};

// Mirrors the last dimension with probability p (one draw per sample, whatever p).
class RandomHorizontalFlip : public Transform {
 public:
  explicit RandomHorizontalFlip(double p = 0.5);
  Example apply(const Example& example, SampleRng& rng) const override;
  bool is_random() const override { return true; }
  std::string description() const override;

 private:
  double p_;
};

}  // namespace loom::data
