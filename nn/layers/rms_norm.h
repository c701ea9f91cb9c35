/*
 * RMSNorm, as torch.nn.RMSNorm (Zhang & Sennrich, 2019): scales each sample by the root mean
 * square of its trailing `normalized_shape` dims, with no centring and no bias, then by a
 * learned elementwise weight (ones). The normalisation of LLaMA-style transformers.
 */
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "nn/module.h"

namespace loom::nn {

class RMSNorm : public Module {
 public:
  // weight shaped `normalized_shape` when elementwise_affine. eps unset means the machine
  // epsilon of the computing dtype, as torch. Throws if normalized_shape is empty or has a
  // size below 1, or eps < 0.
  explicit RMSNorm(std::vector<int64_t> normalized_shape, std::optional<double> eps = std::nullopt,
                   bool elementwise_affine = true);
  explicit RMSNorm(std::initializer_list<int64_t> normalized_shape, std::optional<double> eps = std::nullopt,
                   bool elementwise_affine = true)
      : RMSNorm(std::vector<int64_t>(normalized_shape), eps, elementwise_affine) {}
  // RMSNorm over the last dim only: RMSNorm(d_model).
  explicit RMSNorm(int64_t normalized_size, std::optional<double> eps = std::nullopt,
                   bool elementwise_affine = true)
      : RMSNorm(std::vector<int64_t>{normalized_size}, eps, elementwise_affine) {}

  // [*, *normalized_shape] -> the same shape: x / sqrt(mean(x^2) + eps) * weight
  // (loom::rms_norm). Throws if the trailing dims differ from normalized_shape.
  Tensor forward(const Tensor& input) override;
  // weight = 1.
  void reset_parameters();
  std::string extra_repr() const override;

  const std::vector<int64_t>& normalized_shape() const { return normalized_shape_; }
  std::optional<double> eps() const { return eps_; }

  Tensor weight;  // normalized_shape, undefined unless elementwise_affine

 private:
  std::vector<int64_t> normalized_shape_;
  std::optional<double> eps_;
  bool elementwise_affine_;
};

}  // namespace loom::nn
