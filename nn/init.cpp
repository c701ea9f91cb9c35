/*
 * torch.nn.init's formulas (see init.h). The fills run under NoGradGuard: a parameter is a
 * leaf that requires grad, and an in-place write to it while recording would be refused (and
 * would not belong in any graph anyway).
 */
#include "nn/init.h"

#include <cmath>
#include <numbers>
#include <vector>

#include "core/grad_mode.h"
#include "ops/ops.h"

namespace loom::nn::init {
namespace {

void check_defined(const Tensor& tensor, std::string_view fn) {
  LOOM_CHECK(tensor.defined(), "nn::init::", fn, ": the tensor is undefined");
}

void check_floating(const Tensor& tensor, std::string_view fn) {
  check_defined(tensor, fn);
  LOOM_CHECK(tensor.is_floating_point(), "nn::init::", fn, ": expected a floating-point tensor, got ",
             tensor.dtype(), " ", tensor.sizes());
}

// The fan that kaiming_* scales by (torch's _calculate_correct_fan).
int64_t correct_fan(const Tensor& tensor, FanMode mode, std::string_view fn) {
  LOOM_CHECK(tensor.dim() >= 2, "nn::init::", fn,
             ": fan in and fan out can not be computed for a tensor with fewer than 2 dimensions, got shape ",
             tensor.sizes());
  auto [fan_in, fan_out] = fan_in_and_fan_out(tensor);
  return mode == kFanIn ? fan_in : fan_out;
}

// erf^-1 on (-1, 1): Giles' single-precision approximation ("Approximating the erfinv
// function", GPU Computing Gems, 2011) polished by two Newton steps on erf(x) = y, which
// brings it to double precision (Newton doubles the correct digits each step).
double erfinv(double y) {
  if (y <= -1.0) return -INFINITY;
  if (y >= 1.0) return INFINITY;
  double w = -std::log((1.0 - y) * (1.0 + y)), p;
  if (w < 5.0) {
    w -= 2.5;
    p = 2.81022636e-08;
    p = 3.43273939e-07 + p * w;
    p = -3.5233877e-06 + p * w;
    p = -4.39150654e-06 + p * w;
    p = 0.00021858087 + p * w;
    p = -0.00125372503 + p * w;
    p = -0.00417768164 + p * w;
    p = 0.246640727 + p * w;
    p = 1.50140941 + p * w;
  } else {
    w = std::sqrt(w) - 3.0;
    p = -0.000200214257;
    p = 0.000100950558 + p * w;
    p = 0.00134934322 + p * w;
    p = -0.00367342844 + p * w;
    p = 0.00573950773 + p * w;
    p = -0.0076224613 + p * w;
    p = 0.00943887047 + p * w;
    p = 1.00167406 + p * w;
    p = 2.83297682 + p * w;
  }
  double x = p * y;
  for (int step = 0; step < 2; ++step) {
    const double slope = 2.0 / std::sqrt(std::numbers::pi) * std::exp(-x * x);
    if (slope == 0.0) break;  // |x| so large that erf is flat in double: x is as good as it gets
    x -= (std::erf(x) - y) / slope;
  }
  return x;
}

// The standard normal CDF.
double norm_cdf(double x) {
  return (1.0 + std::erf(x / std::numbers::sqrt2)) / 2.0;
}

}  // namespace

FanMode::FanMode(std::string_view name) {
  if (name == "fan_in") {
    kind_ = kFanIn;
  } else if (name == "fan_out") {
    kind_ = kFanOut;
  } else {
    LOOM_FAIL("nn::init: mode '", name, "' not supported, expected 'fan_in' or 'fan_out'");
  }
}

Nonlinearity::Nonlinearity(std::string_view name) {
  static constexpr std::pair<std::string_view, Kind> kNames[] = {
      {"linear", kLinear},
      {"conv1d", kConv1d},
      {"conv2d", kConv2d},
      {"conv3d", kConv3d},
      {"conv_transpose1d", kConvTranspose1d},
      {"conv_transpose2d", kConvTranspose2d},
      {"conv_transpose3d", kConvTranspose3d},
      {"sigmoid", kSigmoid},
      {"tanh", kTanh},
      {"relu", kReLU},
      {"leaky_relu", kLeakyReLU},
      {"selu", kSELU},
  };
  for (const auto& [spelling, kind] : kNames) {
    if (name == spelling) {
      kind_ = kind;
      return;
    }
  }
  LOOM_FAIL("nn::init: unsupported nonlinearity '", name,
            "', expected one of linear, conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d, "
            "conv_transpose3d, sigmoid, tanh, relu, leaky_relu, selu");
}

double calculate_gain(Nonlinearity nonlinearity, std::optional<double> param) {
  switch (nonlinearity.kind()) {
    case kLinear:
    case kConv1d:
    case kConv2d:
    case kConv3d:
    case Nonlinearity::kConvTranspose1d:
    case Nonlinearity::kConvTranspose2d:
    case Nonlinearity::kConvTranspose3d:
    case kSigmoid:
      return 1.0;
    case kTanh:
      return 5.0 / 3.0;
    case kReLU:
      return std::sqrt(2.0);
    case kLeakyReLU: {
      const double slope = param.value_or(0.01);
      return std::sqrt(2.0 / (1.0 + slope * slope));
    }
    case kSELU:
      // Not derived: the value torch chose so that SELU networks keep unit variance in practice.
      return 3.0 / 4.0;
  }
  LOOM_FAIL("nn::init::calculate_gain: invalid nonlinearity ", static_cast<int>(nonlinearity.kind()));
}

std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& tensor) {
  check_defined(tensor, "fan_in_and_fan_out");
  LOOM_CHECK(tensor.dim() >= 2,
             "nn::init::fan_in_and_fan_out: fan in and fan out can not be computed for a tensor with fewer "
             "than 2 dimensions, got shape ",
             tensor.sizes());
  int64_t receptive_field = 1;
  for (int64_t d = 2; d < tensor.dim(); ++d) receptive_field *= tensor.size(d);
  return {tensor.size(1) * receptive_field, tensor.size(0) * receptive_field};
}

Tensor uniform_(const Tensor& tensor, double low, double high, Generator* generator) {
  check_floating(tensor, "uniform_");
  NoGradGuard no_grad;
  loom::uniform_(tensor, low, high, generator);
  return tensor;
}

Tensor normal_(const Tensor& tensor, double mean, double std, Generator* generator) {
  check_floating(tensor, "normal_");
  NoGradGuard no_grad;
  loom::normal_(tensor, mean, std, generator);
  return tensor;
}

Tensor trunc_normal_(const Tensor& tensor, double mean, double std, double a, double b,
                     Generator* generator) {
  check_floating(tensor, "trunc_normal_");
  LOOM_CHECK(std > 0, "nn::init::trunc_normal_: expected std > 0, got ", std);
  LOOM_CHECK(a < b, "nn::init::trunc_normal_: expected a < b, got a=", a, ", b=", b);
  NoGradGuard no_grad;
  // Inverse-CDF sampling, as torch: u ~ U(2 cdf(a') - 1, 2 cdf(b') - 1) with a', b' the
  // standardised bounds, then x = mean + std * sqrt(2) * erfinv(u), clamped against rounding.
  const double lo = 2.0 * norm_cdf((a - mean) / std) - 1.0;
  const double hi = 2.0 * norm_cdf((b - mean) / std) - 1.0;
  Tensor values = loom::rand({tensor.numel()}, kFloat64, generator);
  double* v = values.data_ptr<double>();
  for (int64_t i = 0; i < values.numel(); ++i) {
    const double x = mean + std * std::numbers::sqrt2 * erfinv(lo + (hi - lo) * v[i]);
    v[i] = std::min(std::max(x, a), b);
  }
  Tensor target = tensor;
  target.copy_(values.view(tensor.sizes()));
  return tensor;
}

Tensor constant_(const Tensor& tensor, double value) {
  check_defined(tensor, "constant_");
  NoGradGuard no_grad;
  Tensor target = tensor;
  target.fill_(value);
  return tensor;
}

Tensor zeros_(const Tensor& tensor) {
  return constant_(tensor, 0.0);
}

Tensor ones_(const Tensor& tensor) {
  return constant_(tensor, 1.0);
}

Tensor xavier_uniform_(const Tensor& tensor, double gain, Generator* generator) {
  check_floating(tensor, "xavier_uniform_");
  auto [fan_in, fan_out] = fan_in_and_fan_out(tensor);
  const double std = gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
  const double bound = std::sqrt(3.0) * std;  // U(-b, b) has standard deviation b / sqrt(3)
  return init::uniform_(tensor, -bound, bound, generator);
}

Tensor xavier_normal_(const Tensor& tensor, double gain, Generator* generator) {
  check_floating(tensor, "xavier_normal_");
  auto [fan_in, fan_out] = fan_in_and_fan_out(tensor);
  const double std = gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
  return init::normal_(tensor, 0.0, std, generator);
}

Tensor kaiming_uniform_(const Tensor& tensor, double a, FanMode mode, Nonlinearity nonlinearity,
                        Generator* generator) {
  check_floating(tensor, "kaiming_uniform_");
  if (tensor.numel() == 0) return tensor;
  const double std = calculate_gain(nonlinearity, a) /
                     std::sqrt(static_cast<double>(correct_fan(tensor, mode, "kaiming_uniform_")));
  const double bound = std::sqrt(3.0) * std;
  return init::uniform_(tensor, -bound, bound, generator);
}

Tensor kaiming_normal_(const Tensor& tensor, double a, FanMode mode, Nonlinearity nonlinearity,
                       Generator* generator) {
  check_floating(tensor, "kaiming_normal_");
  if (tensor.numel() == 0) return tensor;
  const double std = calculate_gain(nonlinearity, a) /
                     std::sqrt(static_cast<double>(correct_fan(tensor, mode, "kaiming_normal_")));
  return init::normal_(tensor, 0.0, std, generator);
}

}  // namespace loom::nn::init
