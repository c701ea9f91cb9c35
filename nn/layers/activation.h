/*
 * Activation layers, as torch.nn's: elementwise, any shape in and the same shape out, and no
 * parameters except PReLU's slope. They exist so that an activation can be an element of a
 * Sequential and show in print(model) as torch prints it; inside forward(), calling the op
 * (x.relu(), loom::leaky_relu(x, 0.2)) is the same. The formulas are in ops/elementwise.h and
 * ops/activation_ops.h.
 */
#pragma once

#include <cstdint>
#include <string>

#include "nn/module.h"
#include "ops/activation_ops.h"

namespace loom::nn {

// max(x, 0)
class ReLU : public Module {
 public:
  Tensor forward(const Tensor& input) override;
};

// x * Phi(x), with Phi the standard normal CDF ("none", exact, with erf) or its tanh
// approximation ("tanh": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))).
class GELU : public Module {
 public:
  // Throws if approximate is neither "none" nor "tanh".
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

  const std::string& approximate() const { return approximate_; }

 private:
  std::string approximate_;
};

// x * sigmoid(x) (swish)
class SiLU : public Module {
 public:
  Tensor forward(const Tensor& input) override;
};

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& input) override;
};

// 1 / (1 + exp(-x))
class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& input) override;
};

// x > 0 ? x : negative_slope * x
class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope_(negative_slope) {}
  Tensor forward(const Tensor& input) override { return leaky_relu(input, negative_slope_); }
  std::string extra_repr() const override;
  double negative_slope() const { return negative_slope_; }

 private:
  double negative_slope_;
};

// x > 0 ? x : alpha * (exp(x) - 1)
class ELU : public Module {
 public:
  explicit ELU(double alpha = 1.0) : alpha_(alpha) {}
  Tensor forward(const Tensor& input) override { return elu(input, alpha_); }
  std::string extra_repr() const override;
  double alpha() const { return alpha_; }

 private:
  double alpha_;
};

// scale * elu(x, alpha) with the self-normalising constants
class SELU : public Module {
 public:
  Tensor forward(const Tensor& input) override { return selu(input); }
};

// x > 0 ? x : alpha * (exp(x / alpha) - 1). Throws if alpha is 0.
class CELU : public Module {
 public:
  explicit CELU(double alpha = 1.0);
  Tensor forward(const Tensor& input) override { return celu(input, alpha_); }
  std::string extra_repr() const override;
  double alpha() const { return alpha_; }

 private:
  double alpha_;
};

// log(1 + exp(beta x)) / beta, linear above beta x > threshold. Throws if beta is 0.
class Softplus : public Module {
 public:
  explicit Softplus(double beta = 1.0, double threshold = 20.0);
  Tensor forward(const Tensor& input) override { return softplus(input, beta_, threshold_); }
  std::string extra_repr() const override;
  double beta() const { return beta_; }
  double threshold() const { return threshold_; }

 private:
  double beta_, threshold_;
};

// x clamped to [min_val, max_val]. Throws if min_val > max_val.
class Hardtanh : public Module {
 public:
  explicit Hardtanh(double min_val = -1.0, double max_val = 1.0);
  Tensor forward(const Tensor& input) override { return hardtanh(input, min_val_, max_val_); }
  std::string extra_repr() const override;
  double min_val() const { return min_val_; }
  double max_val() const { return max_val_; }

 private:
  double min_val_, max_val_;
};

// min(max(x, 0), 6)
class ReLU6 : public Module {
 public:
  Tensor forward(const Tensor& input) override { return relu6(input); }
};

class Hardsigmoid : public Module {
 public:
  Tensor forward(const Tensor& input) override { return hardsigmoid(input); }
};

class Hardswish : public Module {
 public:
  Tensor forward(const Tensor& input) override { return hardswish(input); }
};

class Mish : public Module {
 public:
  Tensor forward(const Tensor& input) override { return mish(input); }
};

class LogSigmoid : public Module {
 public:
  Tensor forward(const Tensor& input) override { return log_sigmoid(input); }
};

class Softsign : public Module {
 public:
  Tensor forward(const Tensor& input) override { return softsign(input); }
};

// x > 0 ? x : a * x with a learned slope `weight` [num_parameters], initialised to `init`:
// one slope shared by all channels (num_parameters = 1, torch's default) or one per channel
// (num_parameters = C of the input [N, C, *]). Throws if num_parameters < 1.
class PReLU : public Module {
 public:
  explicit PReLU(int64_t num_parameters = 1, double init = 0.25);
  Tensor forward(const Tensor& input) override { return prelu(input, weight); }
  // weight = init
  void reset_parameters();
  std::string extra_repr() const override;

  Tensor weight;  // [num_parameters]

 private:
  int64_t num_parameters_;
  double init_;
};

}  // namespace loom::nn
