/*
 * MLP: the multi-layer perceptron of the MNIST benchmarks — Linear, activation, ..., Linear.
 *
 * It is a Sequential itself, not a module holding one, so that its parameters are named as
 * those of the PyTorch anchor, a bare nn.Sequential ("0.weight", "0.bias", "2.weight", ...)
 * and a state dict saved from torch loads as it is.
 *
 *   nn::MLP mlp;                      // 784 -> 512 -> 512 -> 10 with ReLU: 669,706 parameters
 *   Tensor logits = mlp(images);      // [N, 1, 28, 28] (flattened) or [N, 784] -> [N, 10]
 */
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "nn/layers/containers.h"

namespace loom::nn {

class MLP : public Sequential {
 public:
  // Makes the activation module placed between two Linear layers (a new one each time).
  using ActivationFactory = std::function<std::shared_ptr<Module>()>;

  // sizes: the feature counts from input to output (at least two, all positive); one Linear
  // per consecutive pair, with `activation` (ReLU when empty) between them but not after the
  // last. Children "0", "1", ... as torch's Sequential. Throws loom::Error on bad sizes.
  explicit MLP(std::vector<int64_t> sizes = {784, 512, 512, 10}, ActivationFactory activation = {});

  // x: [N, sizes.front()], or [N, *] whose trailing dims hold sizes.front() values per sample
  // (an image [N, 1, 28, 28] is flattened) -> [N, sizes.back()]. Throws loom::Error naming the
  // shape when the features per sample do not match.
  Tensor forward(const Tensor& x) override;

  const std::vector<int64_t>& sizes() const { return sizes_; }

 private:
  std::vector<int64_t> sizes_;
};

}  // namespace loom::nn
