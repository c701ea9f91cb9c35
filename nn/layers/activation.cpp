/*
 * The activation layers: each forwards to its op; here are their checks, PReLU's parameter
 * and torch's printing.
 */
#include "nn/layers/activation.h"

#include "nn/init.h"
#include "nn/layers/repr.h"
#include "ops/ops.h"

namespace loom::nn {

Tensor ReLU::forward(const Tensor& input) {
  return relu(input);
}

GELU::GELU(std::string approximate) : approximate_(std::move(approximate)) {
  LOOM_CHECK(approximate_ == "none" || approximate_ == "tanh",
             "GELU: approximate must be 'none' or 'tanh', got '", approximate_, "'");
}

Tensor GELU::forward(const Tensor& input) {
  return gelu(input, approximate_);
}

std::string GELU::extra_repr() const {
  return "approximate='" + approximate_ + "'";
}

Tensor SiLU::forward(const Tensor& input) {
  return silu(input);
}

Tensor Tanh::forward(const Tensor& input) {
  return tanh(input);
}

Tensor Sigmoid::forward(const Tensor& input) {
  return sigmoid(input);
}

std::string LeakyReLU::extra_repr() const {
  return "negative_slope=" + detail::python_float(negative_slope_);
}

std::string ELU::extra_repr() const {
  return "alpha=" + detail::python_float(alpha_);
}

CELU::CELU(double alpha) : alpha_(alpha) {
  LOOM_CHECK(alpha != 0.0, "CELU: alpha must not be 0 (it divides the input)");
}

std::string CELU::extra_repr() const {
  return "alpha=" + detail::python_float(alpha_);
}

Softplus::Softplus(double beta, double threshold) : beta_(beta), threshold_(threshold) {
  LOOM_CHECK(beta != 0.0, "Softplus: beta must not be 0 (it divides the result)");
}

std::string Softplus::extra_repr() const {
  return "beta=" + detail::python_float(beta_) + ", threshold=" + detail::python_float(threshold_);
}

Hardtanh::Hardtanh(double min_val, double max_val) : min_val_(min_val), max_val_(max_val) {
  LOOM_CHECK(min_val <= max_val, "Hardtanh: min_val (", min_val, ") must not be greater than max_val (", max_val,
             ")");
}

std::string Hardtanh::extra_repr() const {
  return "min_val=" + detail::python_float(min_val_) + ", max_val=" + detail::python_float(max_val_);
}

PReLU::PReLU(int64_t num_parameters, double init) : num_parameters_(num_parameters), init_(init) {
  LOOM_CHECK(num_parameters >= 1, "PReLU: expected num_parameters >= 1, got ", num_parameters);
  weight = register_parameter("weight", loom::empty({num_parameters}));
  reset_parameters();
}

void PReLU::reset_parameters() {
  init::constant_(weight, init_);
}

std::string PReLU::extra_repr() const {
  return "num_parameters=" + std::to_string(num_parameters_);
}

}  // namespace loom::nn
