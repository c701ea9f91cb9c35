/*
 * LayerNorm, as torch.nn.LayerNorm: normalises over the trailing `normalized_shape` dims of
 * each sample, with an elementwise affine transform (weight ones, bias zeros).
 */
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "nn/module.h"

namespace loom::nn {

class LayerNorm : public Module {
 public:
  // weight and bias shaped `normalized_shape` when elementwise_affine (bias only if `bias`, as
  // torch 2's argument). Throws if normalized_shape is empty or has a size below 1, or eps < 0.
  explicit LayerNorm(std::vector<int64_t> normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     bool bias = true);
  // LayerNorm({2, 3}): without this overload a braced list would be ambiguous between the
  // vector and (through the deleted copy constructor) the single-size form.
  explicit LayerNorm(std::initializer_list<int64_t> normalized_shape, double eps = 1e-5,
                     bool elementwise_affine = true, bool bias = true)
      : LayerNorm(std::vector<int64_t>(normalized_shape), eps, elementwise_affine, bias) {}
  // LayerNorm over the last dim only: LayerNorm(d_model).
  explicit LayerNorm(int64_t normalized_size, double eps = 1e-5, bool elementwise_affine = true,
                     bool bias = true)
      : LayerNorm(std::vector<int64_t>{normalized_size}, eps, elementwise_affine, bias) {}

  // [*, *normalized_shape] -> the same shape:
  //   y = (x - mean) / sqrt(var + eps) * weight + bias   (biased variance over the trailing dims)
  // Throws if the trailing dims differ from normalized_shape.
  Tensor forward(const Tensor& input) override;
  // weight = 1, bias = 0.
  void reset_parameters();
  std::string extra_repr() const override;

  const std::vector<int64_t>& normalized_shape() const { return normalized_shape_; }
  double eps() const { return eps_; }

  Tensor weight;  // normalized_shape, undefined unless elementwise_affine
  Tensor bias;    // normalized_shape, undefined unless elementwise_affine and bias

 private:
  std::vector<int64_t> normalized_shape_;
  double eps_;
  bool elementwise_affine_;
};

}  // namespace loom::nn
