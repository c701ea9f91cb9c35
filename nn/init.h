/*
 * loom::nn::init: the weight initialisations of torch.nn.init, with the same formulas, so that
 * a model built in Loom starts from the same distributions as its PyTorch twin.
 *
 * Every function fills its tensor in place, without recording autograd (parameters are leaves
 * that require grad; writing them must not become part of a graph), and returns it. Random
 * fills draw from loom's default generator (loom::manual_seed) unless given one.
 *
 * Fans follow torch's _calculate_fan_in_and_fan_out: for a weight [out, in, *kernel],
 * fan_in = in * prod(kernel) and fan_out = out * prod(kernel); a Linear weight [out, in] has
 * fan_in = in, fan_out = out.
 *
 *   nn::init::kaiming_normal_(conv.weight, 0.0, nn::init::kFanOut, nn::init::kReLU);
 *   nn::init::kaiming_normal_(conv.weight, 0.0, "fan_out", "relu");  // the same, torch's spelling
 */
#pragma once

#include <optional>
#include <string_view>
#include <utility>

#include "core/random.h"
#include "core/tensor.h"

namespace loom::nn::init {

// Which fan kaiming_* scales by: fan_in keeps the forward activations' variance, fan_out the
// backward gradients'. Built from the enum or from torch's strings "fan_in" / "fan_out"
// (anything else throws loom::Error).
class FanMode {
 public:
  enum Kind { kFanIn, kFanOut };
  constexpr FanMode(Kind kind) : kind_(kind) {}                   // NOLINT(google-explicit-constructor)
  FanMode(std::string_view name);                                 // NOLINT(google-explicit-constructor)
  FanMode(const char* name) : FanMode(std::string_view(name)) {}  // NOLINT(google-explicit-constructor)
  constexpr Kind kind() const { return kind_; }
  constexpr bool operator==(const FanMode&) const = default;

 private:
  Kind kind_;
};

// The nonlinearity that follows the initialised layer, for calculate_gain. Built from the enum
// or from torch's strings ("linear", "conv2d", "sigmoid", "tanh", "relu", "leaky_relu",
// "selu", ...; anything else throws loom::Error).
class Nonlinearity {
 public:
  enum Kind {
    kLinear,
    kConv1d,
    kConv2d,
    kConv3d,
    kConvTranspose1d,
    kConvTranspose2d,
    kConvTranspose3d,
    kSigmoid,
    kTanh,
    kReLU,
    kLeakyReLU,
    kSELU,
  };
  constexpr Nonlinearity(Kind kind) : kind_(kind) {}  // NOLINT(google-explicit-constructor)
  Nonlinearity(std::string_view name);                // NOLINT(google-explicit-constructor)
  Nonlinearity(const char* name)
      : Nonlinearity(std::string_view(name)) {}  // NOLINT(google-explicit-constructor)
  constexpr Kind kind() const { return kind_; }
  constexpr bool operator==(const Nonlinearity&) const = default;

 private:
  Kind kind_;
};

// libtorch's spellings (torch::kFanIn, torch::kReLU, ...).
inline constexpr FanMode::Kind kFanIn = FanMode::kFanIn;
inline constexpr FanMode::Kind kFanOut = FanMode::kFanOut;
inline constexpr Nonlinearity::Kind kLinear = Nonlinearity::kLinear;
inline constexpr Nonlinearity::Kind kConv1d = Nonlinearity::kConv1d;
inline constexpr Nonlinearity::Kind kConv2d = Nonlinearity::kConv2d;
inline constexpr Nonlinearity::Kind kConv3d = Nonlinearity::kConv3d;
inline constexpr Nonlinearity::Kind kSigmoid = Nonlinearity::kSigmoid;
inline constexpr Nonlinearity::Kind kTanh = Nonlinearity::kTanh;
inline constexpr Nonlinearity::Kind kReLU = Nonlinearity::kReLU;
inline constexpr Nonlinearity::Kind kLeakyReLU = Nonlinearity::kLeakyReLU;
inline constexpr Nonlinearity::Kind kSELU = Nonlinearity::kSELU;

// The recommended gain for a nonlinearity (torch.nn.init.calculate_gain): 1 for linear, conv
// and sigmoid; 5/3 for tanh; sqrt(2) for relu; sqrt(2 / (1 + slope^2)) for leaky_relu, whose
// negative slope is `param` (0.01 when not given; ignored by the others, as in torch); 3/4 for selu.
double calculate_gain(Nonlinearity nonlinearity, std::optional<double> param = {});

// (fan_in, fan_out) of a weight [out, in, *kernel]. Throws for fewer than 2 dims.
std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& tensor);

// ---- plain fills -------------------------------------------------------------------------
// U(low, high). Throws if low > high.
Tensor uniform_(const Tensor& tensor, double low = 0.0, double high = 1.0, Generator* generator = nullptr);
// N(mean, std^2). Throws if std < 0.
Tensor normal_(const Tensor& tensor, double mean = 0.0, double std = 1.0, Generator* generator = nullptr);
// N(mean, std^2) restricted to [a, b], drawn by inverting the normal CDF as torch does (values
// are computed in float64 and then converted). Throws if std <= 0 or a >= b.
Tensor trunc_normal_(const Tensor& tensor, double mean = 0.0, double std = 1.0, double a = -2.0,
                     double b = 2.0, Generator* generator = nullptr);
Tensor constant_(const Tensor& tensor, double value);
Tensor zeros_(const Tensor& tensor);
Tensor ones_(const Tensor& tensor);

// ---- scaled by the fans ------------------------------------------------------------------
// Glorot & Bengio (2010): U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)).
// Throws for fewer than 2 dims.
Tensor xavier_uniform_(const Tensor& tensor, double gain = 1.0, Generator* generator = nullptr);
// N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_normal_(const Tensor& tensor, double gain = 1.0, Generator* generator = nullptr);
// He et al. (2015): U(-b, b) with b = gain * sqrt(3 / fan), gain = calculate_gain(nonlinearity, a),
// fan = fan_in or fan_out by `mode`. `a` is the negative slope of a following leaky_relu (torch's
// nn.Linear and nn.Conv2d use a = sqrt(5)). A tensor with no elements is left as it is (torch
// warns). Throws for fewer than 2 dims.
Tensor kaiming_uniform_(const Tensor& tensor, double a = 0.0, FanMode mode = kFanIn,
                        Nonlinearity nonlinearity = kLeakyReLU, Generator* generator = nullptr);
// N(0, std^2) with std = gain / sqrt(fan).
Tensor kaiming_normal_(const Tensor& tensor, double a = 0.0, FanMode mode = kFanIn,
                       Nonlinearity nonlinearity = kLeakyReLU, Generator* generator = nullptr);

}  // namespace loom::nn::init
