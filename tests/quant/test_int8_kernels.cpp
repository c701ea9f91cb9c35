/*
 * Tests of the INT8 CPU kernels (quant/kernels): Int8Linear, Int8Conv2d, int8_max_pool2d and
 * the per-tensor f32 <-> u8/s8 conversions.
 *
 * The reference is independent of oneDNN: plain loops in float64 over the dequantized integers
 * (x_real = s * (q - zp)), then the output transform written out by hand. Float outputs must
 * agree to ~1e-4 relative (the kernels scale in float32); requantized u8/s8 outputs within one
 * unit (a value that lands near a rounding tie in float64 may round the other way in float32).
 */
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "ops/ops.h"
#include "quant/kernels/int8_conv2d.h"
#include "quant/kernels/int8_linear.h"
#include "quant/kernels/int8_pool.h"
#include "quant/kernels/int8_split_weights.h"
#include "quant/kernels/quantize_kernels.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::quant;

namespace {

// Deterministic random integers in [lo, hi] as a tensor of `dtype`.
Tensor random_ints(IntArrayRef shape, int64_t lo, int64_t hi, DType dtype, uint64_t seed) {
  Generator gen(seed);
  return randint(lo, hi + 1, shape, DType::Int64, &gen).to(dtype);
}

Tensor scales_tensor(const std::vector<double>& v) {
  return test::make(v, {static_cast<int64_t>(v.size())}, kFloat32);
}

// The output transform of an int8 layer applied to the exact real result y (float64).
double requantize(double y, const Int8Output& o) {
  if (o.relu) y = std::max(y, 0.0);
  if (o.dtype == kFloat32) return y;
  const double lo = o.dtype == kUInt8 ? 0 : -128, hi = o.dtype == kUInt8 ? 255 : 127;
  return std::clamp(std::nearbyint(y / o.scale) + o.zero_point, lo, hi);
}

// Compares a layer's output with the float64 reference `real` (the exact real results, before
// the output transform).
void check_output(const Tensor& got, const std::vector<double>& real, const Int8Output& o) {
  REQUIRE(got.dtype() == o.dtype);
  REQUIRE(got.numel() == static_cast<int64_t>(real.size()));
  std::vector<double> g = got.to_vector<double>(), want(real.size());
  double max_abs = 0;
  for (size_t i = 0; i < real.size(); ++i) {
    want[i] = requantize(real[i], o);
    max_abs = std::max(max_abs, std::abs(want[i]));
  }
  if (o.dtype == kFloat32) {
    // 1e-4 relative to the output's magnitude: near-zero results come from cancellation.
    test::check_close(got, want, {1e-4, 1e-4 * max_abs});
  } else {
    size_t off_by_one = 0, bad = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      const double d = std::abs(g[i] - want[i]);
      off_by_one += d == 1;
      bad += d > 1;
    }
    CHECK_MESSAGE(bad == 0, bad, " of ", g.size(), " requantized values are off by more than 1");
    // Near-ties are rare: a systematic rounding error (truncation, half away from zero, a
    // mis-scaled zero point) moves far more than 1% of the values.
    CHECK_MESSAGE(off_by_one <= std::max<size_t>(2, g.size() / 100), off_by_one, " of ", g.size(),
                  " values are off by one");
  }
}

// Real results of a linear layer from its integers: [N, in] u8, [out, in] s8 -> [N, out].
std::vector<double> linear_reference(const Tensor& xq, double sx, int64_t zx, const Tensor& wq,
                                     const std::vector<double>& sw, const std::vector<double>& bias) {
  const int64_t n = xq.size(0), in = xq.size(1), out = wq.size(0);
  std::vector<double> x = xq.to_vector<double>(), w = wq.to_vector<double>(), y(static_cast<size_t>(n * out));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < out; ++c) {
      double acc = 0;
      for (int64_t k = 0; k < in; ++k)
        acc += sx * (x[i * in + k] - zx) * (sw[sw.size() == 1 ? 0 : c] * w[c * in + k]);
      y[i * out + c] = acc + (bias.empty() ? 0.0 : bias[c]);
    }
  return y;
}

struct LinearCase {
  int64_t batch;
  int32_t input_zero_point;
  bool per_channel;
  bool with_bias;
  Int8Output output;
};

void run_linear_case(const LinearCase& lc, uint64_t seed) {
  const int64_t in = 70, out = 37;  // odd sizes: tails of every blocked loop
  const double sx = 0.02;
  Tensor wq = random_ints({out, in}, -127, 127, kInt8, seed);
  Tensor xq = random_ints({lc.batch, in}, 0, 255, kUInt8, seed + 1);
  std::vector<double> sw =
      lc.per_channel ? test::random_values(out, seed + 2, 0.001, 0.004) : std::vector<double>{0.003};
  for (double& s : sw) s = std::abs(s) + 1e-4;
  std::vector<double> bias = lc.with_bias ? test::random_values(out, seed + 3, 0.5) : std::vector<double>{};
  // Round the parameters to float32 first: the reference must see what the kernel sees.
  for (double& s : sw) s = static_cast<float>(s);
  for (double& b : bias) b = static_cast<float>(b);
  Tensor b = lc.with_bias ? test::make(bias, {out}, kFloat32) : Tensor();
  Int8Linear layer(wq, scales_tensor(sw), b, static_cast<float>(sx), lc.input_zero_point, lc.output);
  CHECK(layer.in_features() == in);
  CHECK(layer.out_features() == out);
  Tensor y = layer.forward(xq);
  CHECK(y.sizes() == IntArrayRef{lc.batch, out});
  check_output(y, linear_reference(xq, static_cast<float>(sx), lc.input_zero_point, wq, sw, bias), lc.output);
}

}  // namespace

TEST_CASE("int8 linear matches a float64 reference: batches, zero points, scales, bias, outputs") {
  uint64_t seed = 100;
  for (int64_t batch : {1, 7, 128}) {
    CAPTURE(batch);
    // Float output, non-zero input zero point (folded into the bias), per-channel scales, bias.
    run_linear_case({batch, 113, true, true, {kFloat32}}, seed++);
    // Per-tensor scale, no bias, zero input zero point.
    run_linear_case({batch, 0, false, false, {kFloat32}}, seed++);
    // Per-tensor scale, no bias, non-zero zero point: the fold alone makes a bias.
    run_linear_case({batch, 200, false, false, {kFloat32}}, seed++);
    // u8 output with fused ReLU and a zero point (the clamp sits at the zero point).
    run_linear_case({batch, 128, true, true, {kUInt8, 0.05f, 10, true}}, seed++);
    // u8 output without ReLU, s8 output with and without ReLU.
    run_linear_case({batch, 31, true, true, {kUInt8, 0.08f, 128, false}}, seed++);
    run_linear_case({batch, 31, false, true, {kInt8, 0.06f, -5, false}}, seed++);
    run_linear_case({batch, 0, true, false, {kInt8, 0.04f, 0, true}}, seed++);
    // Float output with ReLU.
    run_linear_case({batch, 77, true, true, {kFloat32, 1.0f, 0, true}}, seed++);
  }
}

TEST_CASE("int8 linear: hand-computed 1x2 -> 2 example") {
  // x_q = [130, 126] with zp 128, scale 0.5 -> x = [1, -1]; W_q = [[2, 4], [-6, 8]], scales
  // [0.25, 0.5] -> W = [[0.5, 1], [-3, 4]]; bias [0.25, -1]: y = [0.5 - 1 + 0.25, -3 - 4 - 1].
  Tensor wq = test::make({2, 4, -6, 8}, {2, 2}, kInt8);
  Tensor x = test::make({130, 126}, {1, 2}, kUInt8);
  Int8Linear f32(wq, scales_tensor({0.25, 0.5}), test::make({0.25, -1}, {2}, kFloat32), 0.5f, 128, {});
  test::check_close(f32.forward(x), {-0.25, -8.0}, {1e-6, 1e-6});
  // u8 output (scale 0.25, zero point 40) with ReLU: relu(-0.25) = relu(-8) = 0 -> q = 40, 40.
  Int8Linear u8(wq, scales_tensor({0.25, 0.5}), test::make({0.25, -1}, {2}, kFloat32), 0.5f, 128,
                {kUInt8, 0.25f, 40, true});
  CHECK(u8.forward(x).to_vector<int>() == std::vector<int>{40, 40});
  // Without ReLU: round(-0.25 / 0.25) + 40 = 39; round(-8 / 0.25) + 40 = 8.
  Int8Linear u8n(wq, scales_tensor({0.25, 0.5}), test::make({0.25, -1}, {2}, kFloat32), 0.5f, 128,
                 {kUInt8, 0.25f, 40, false});
  CHECK(u8n.forward(x).to_vector<int>() == std::vector<int>{39, 8});
}

TEST_CASE("int8 linear: float32 input is quantized with the input qparams first") {
  const int64_t in = 50, out = 20;
  Tensor wq = random_ints({out, in}, -127, 127, kInt8, 7);
  Generator gen(8);
  Tensor x = randn({9, in}, kFloat32, &gen);
  const float sx = 0.03f;
  const int32_t zx = 120;
  Int8Linear layer(wq, scales_tensor({0.01}), Tensor(), sx, zx, {});
  Tensor from_float = layer.forward(x);
  Tensor from_u8 = layer.forward(quantize_per_tensor_fast(x, sx, zx, kUInt8));
  CHECK(from_float.to_vector<float>() == from_u8.to_vector<float>());
  // A transposed (non-contiguous) input gives the same result.
  Tensor xt = x.t().contiguous().t();
  REQUIRE(!xt.is_contiguous());
  CHECK(layer.forward(xt).to_vector<float>() == from_float.to_vector<float>());
  CHECK(layer.forward(quantize_per_tensor_fast(xt, sx, zx, kUInt8)).to_vector<float>() ==
        from_float.to_vector<float>());
  // And both equal the reference on torch's quantization of x (round(x / s) + zp, clamped).
  std::vector<double> xv = x.to_vector<double>(), q(xv.size());
  for (size_t i = 0; i < xv.size(); ++i)
    q[i] = std::clamp(std::nearbyint(static_cast<double>(static_cast<float>(xv[i]) * (1.0f / sx))) + zx, 0.0,
                      255.0);
  check_output(from_float,
               linear_reference(test::make(q, {9, in}, kUInt8), sx, zx, wq, {static_cast<float>(0.01)}, {}),
               {});
}

TEST_CASE("int8 linear: errors name the problem") {
  Tensor wq = random_ints({4, 3}, -5, 5, kInt8, 1);
  Tensor s = scales_tensor({0.1, 0.1, 0.1, 0.1});
  CHECK_THROWS_WITH_AS(Int8Linear(wq.to(kFloat32), s, Tensor(), 0.1f, 0, {}),
                       doctest::Contains("int8 weight"), Error);
  CHECK_THROWS_WITH_AS(Int8Linear(wq, scales_tensor({0.1, 0.1}), Tensor(), 0.1f, 0, {}),
                       doctest::Contains("weight scales of shape [4]"), Error);
  CHECK_THROWS_WITH_AS(Int8Linear(wq, scales_tensor({0.1, -0.1, 0.1, 0.1}), Tensor(), 0.1f, 0, {}),
                       doctest::Contains("positive finite weight scales"), Error);
  CHECK_THROWS_WITH_AS(Int8Linear(wq, s, test::make({1, 2}, {2}, kFloat32), 0.1f, 0, {}),
                       doctest::Contains("bias of shape [4]"), Error);
  CHECK_THROWS_WITH_AS(Int8Linear(wq, s, Tensor(), 0.1f, 300, {}), doctest::Contains("input zero point 300"),
                       Error);
  CHECK_THROWS_WITH_AS(Int8Linear(wq, s, Tensor(), 0.0f, 0, {}), doctest::Contains("input scale"), Error);
  CHECK_THROWS_WITH_AS(Int8Linear(wq, s, Tensor(), 0.1f, 0, {kInt32}), doctest::Contains("output dtype"),
                       Error);
  CHECK_THROWS_WITH_AS(Int8Linear(wq, s, Tensor(), 0.1f, 0, {kInt8, 0.1f, 200}),
                       doctest::Contains("output zero point 200"), Error);
  Int8Linear layer(wq, s, Tensor(), 0.1f, 0, {});
  CHECK_THROWS_WITH_AS(layer.forward(random_ints({2, 3}, 0, 5, kInt8, 2)), doctest::Contains("uint8"), Error);
  CHECK_THROWS_WITH_AS(layer.forward(random_ints({2, 5}, 0, 5, kUInt8, 2)),
                       doctest::Contains("expected an input [N, 3], got [2, 5]"), Error);
  CHECK_THROWS_WITH_AS(layer.forward(random_ints({3}, 0, 5, kUInt8, 2)), doctest::Contains("[N, 3]"), Error);
}

TEST_CASE("quantize_per_tensor_fast and dequantize_per_tensor_fast match torch's formulas") {
  // Values chosen at rounding ties and at both clamps: scale 0.5 -> x / s = 2.5 (ties to 2),
  // 3.5 (to 4), -0.5 (to -0), 1000 (clamps), -1000 (clamps), NaN (to qmin). The expected
  // integers are torch 1.13's: torch.quantize_per_tensor(x, 0.5, 10, torch.quint8).int_repr()
  // and (x, 0.5, -3, torch.qint8).
  Tensor x = test::make({1.25, 1.75, -0.25, 500, -500, std::numeric_limits<double>::quiet_NaN(), 0.0}, {7},
                        kFloat32);
  CHECK(quantize_per_tensor_fast(x, 0.5f, 10, kUInt8).to_vector<int>() ==
        std::vector<int>{12, 14, 10, 255, 0, 0, 10});
  CHECK(quantize_per_tensor_fast(x, 0.5f, -3, kInt8).to_vector<int>() ==
        std::vector<int>{-1, 1, -3, 127, -128, -128, -3});
  // Long enough for the vector loop, its tail and several threads; compared with scalar code.
  for (int64_t n : {int64_t{37}, int64_t{200003}}) {
    Generator gen(3);
    Tensor big = randn({n}, kFloat32, &gen) * 3.0;
    const float s = 0.0173f;
    std::vector<float> v = big.to_vector<float>();
    std::vector<int> want(v.size());
    for (size_t i = 0; i < v.size(); ++i)
      want[i] = static_cast<int>(std::clamp(std::nearbyint(v[i] * (1.0f / s)) + 128.0f, 0.0f, 255.0f));
    Tensor q = quantize_per_tensor_fast(big, s, 128, kUInt8);
    CHECK(q.to_vector<int>() == want);
    std::vector<float> back = dequantize_per_tensor_fast(q, s, 128).to_vector<float>();
    bool same = true;
    for (size_t i = 0; i < v.size(); ++i) same = same && back[i] == static_cast<float>(want[i] - 128) * s;
    CHECK(same);
  }
  // A channels-last tensor keeps its layout; values follow the logical index.
  Generator gen(4);
  Tensor nchw = randn({2, 3, 4, 5}, kFloat32, &gen);
  Tensor cl = nchw.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
  Tensor qcl = quantize_per_tensor_fast(cl, 0.1f, 0, kInt8);
  CHECK(qcl.strides() == cl.strides());
  CHECK(qcl.to_vector<int>() == quantize_per_tensor_fast(nchw, 0.1f, 0, kInt8).to_vector<int>());
  CHECK(dequantize_per_tensor_fast(qcl, 0.1f, 0).strides() == cl.strides());
  // Errors.
  CHECK_THROWS_WITH_AS(quantize_per_tensor_fast(x, 0.5f, 10, kInt32), doctest::Contains("uint8 or int8"),
                       Error);
  CHECK_THROWS_WITH_AS(quantize_per_tensor_fast(x, -1.0f, 10, kUInt8), doctest::Contains("scale"), Error);
  CHECK_THROWS_WITH_AS(quantize_per_tensor_fast(x, 1.0f, 128, kInt8), doctest::Contains("zero point 128"),
                       Error);
  CHECK_THROWS_WITH_AS(quantize_per_tensor_fast(x.to(kFloat64), 1.0f, 0, kUInt8),
                       doctest::Contains("float32"), Error);
  CHECK_THROWS_WITH_AS(dequantize_per_tensor_fast(x, 1.0f, 0), doctest::Contains("uint8 or int8"), Error);
}

namespace {

// Real results of a convolution from its integers (float64 loops, zero padding in the real
// domain): x [N, C, H, W] u8, w [O, C / g, kh, kw] s8 -> [N, O, Ho, Wo] row-major.
std::vector<double> conv_reference(const Tensor& xq, double sx, int64_t zx, const Tensor& wq,
                                   const std::vector<double>& sw, const std::vector<double>& bias,
                                   const Int8ConvOptions& o) {
  const int64_t n = xq.size(0), c = xq.size(1), h = xq.size(2), w = xq.size(3);
  const int64_t oc = wq.size(0), icg = wq.size(1), kh = wq.size(2), kw = wq.size(3), ocg = oc / o.groups;
  const int64_t ho = (h + 2 * o.pad_h - o.dilation_h * (kh - 1) - 1) / o.stride_h + 1;
  const int64_t wo = (w + 2 * o.pad_w - o.dilation_w * (kw - 1) - 1) / o.stride_w + 1;
  std::vector<double> x = xq.contiguous().to_vector<double>(), wt = wq.to_vector<double>();
  std::vector<double> y(static_cast<size_t>(n * oc * ho * wo));
  for (double& v : x) v = sx * (v - zx);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t oo = 0; oo < oc; ++oo) {
      const double s = sw[sw.size() == 1 ? 0 : oo];
      const int64_t g = oo / ocg;
      for (int64_t yy = 0; yy < ho; ++yy)
        for (int64_t xx = 0; xx < wo; ++xx) {
          double acc = 0;
          for (int64_t ci = 0; ci < icg; ++ci)
            for (int64_t a = 0; a < kh; ++a)
              for (int64_t b = 0; b < kw; ++b) {
                const int64_t iy = yy * o.stride_h - o.pad_h + a * o.dilation_h;
                const int64_t ix = xx * o.stride_w - o.pad_w + b * o.dilation_w;
                if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                acc += x[((i * c + g * icg + ci) * h + iy) * w + ix] * s *
                       wt[((oo * icg + ci) * kh + a) * kw + b];
              }
          y[((i * oc + oo) * ho + yy) * wo + xx] = acc + (bias.empty() ? 0.0 : bias[oo]);
        }
    }
  return y;
}

struct ConvCase {
  int64_t batch, in, out, size, kernel;
  Int8ConvOptions options;
  int32_t input_zero_point;
  bool per_channel, with_bias;
  Int8Output output;
};

void run_conv_case(const ConvCase& cc, uint64_t seed) {
  const double sx = 0.03;
  Tensor wq = random_ints({cc.out, cc.in / cc.options.groups, cc.kernel, cc.kernel}, -127, 127, kInt8, seed);
  Tensor xq = random_ints({cc.batch, cc.in, cc.size, cc.size}, 0, 255, kUInt8, seed + 1);
  std::vector<double> sw =
      cc.per_channel ? test::random_values(cc.out, seed + 2, 0.001, 0.003) : std::vector<double>{0.002};
  for (double& s : sw) s = static_cast<float>(std::abs(s) + 1e-4);
  std::vector<double> bias =
      cc.with_bias ? test::random_values(cc.out, seed + 3, 0.5) : std::vector<double>{};
  for (double& b : bias) b = static_cast<float>(b);
  Tensor b = cc.with_bias ? test::make(bias, {cc.out}, kFloat32) : Tensor();
  Int8Conv2d conv(wq, scales_tensor(sw), b, static_cast<float>(sx), cc.input_zero_point, cc.options,
                  cc.output);
  CHECK(conv.in_channels() == cc.in);
  CHECK(conv.out_channels() == cc.out);
  const std::vector<double> want =
      conv_reference(xq, static_cast<float>(sx), cc.input_zero_point, wq, sw, bias, cc.options);
  Tensor y = conv.forward(xq);
  REQUIRE(y.dim() == 4);
  CHECK(y.size(0) == cc.batch);
  CHECK(y.size(1) == cc.out);
  CHECK(y.is_contiguous() != cc.options.channels_last_output);
  check_output(y, want, cc.output);
  // An NHWC-strided input gives the same result.
  Tensor xcl = xq.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
  check_output(conv.forward(xcl), want, cc.output);
}

}  // namespace

TEST_CASE("int8 conv2d matches a float64 reference") {
  uint64_t seed = 500;
  // SmallCNN's first conv on Fashion-MNIST: 1 -> 32, 5x5, padding 2 (oneDNN's source zero point).
  for (int64_t batch : {1, 3}) {
    CAPTURE(batch);
    run_conv_case({batch, 1, 32, 28, 5, {.pad_h = 2, .pad_w = 2}, 113, true, true, {kUInt8, 0.05f, 0, true}},
                  seed++);
    // Its second conv, 32 -> 64 on 14x14, float output.
    run_conv_case({batch, 32, 64, 14, 5, {.pad_h = 2, .pad_w = 2}, 0, true, true, {kFloat32}}, seed++);
  }
  // Stride 2 with padding and a non-zero zero point, s8 output.
  run_conv_case({2,
                 8,
                 16,
                 11,
                 3,
                 {.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1},
                 90,
                 true,
                 true,
                 {kInt8, 0.07f, 3, false}},
                seed++);
  // Groups 2, no padding (the zero point is folded into the bias), per-tensor scale, no bias.
  run_conv_case({2, 6, 10, 9, 3, {.groups = 2}, 140, false, false, {kFloat32}}, seed++);
  // Groups 2 with padding and dilation 2, u8 output with a zero point, NHWC-strided output.
  run_conv_case(
      {2,
       4,
       8,
       10,
       3,
       {.pad_h = 2, .pad_w = 1, .dilation_h = 2, .dilation_w = 1, .groups = 2, .channels_last_output = true},
       60,
       true,
       true,
       {kUInt8, 0.1f, 128, false}},
      seed++);
  // Rectangular stride, no padding, fused ReLU with float output.
  run_conv_case({1, 3, 5, 12, 5, {.stride_h = 1, .stride_w = 3}, 0, true, true, {kFloat32, 1.0f, 0, true}},
                seed++);
}

TEST_CASE("int8 conv2d: float32 input and errors") {
  Tensor wq = random_ints({4, 2, 3, 3}, -100, 100, kInt8, 11);
  Tensor s = scales_tensor({0.01, 0.02, 0.03, 0.04});
  Int8Conv2d conv(wq, s, Tensor(), 0.05f, 100, {.pad_h = 1, .pad_w = 1}, {});
  Generator gen(12);
  Tensor x = randn({2, 2, 6, 6}, kFloat32, &gen);
  CHECK(conv.forward(x).to_vector<float>() ==
        conv.forward(quantize_per_tensor_fast(x, 0.05f, 100, kUInt8)).to_vector<float>());

  CHECK_THROWS_WITH_AS(Int8Conv2d(wq.to(kFloat32), s, Tensor(), 0.1f, 0, {}, {}),
                       doctest::Contains("int8 weight"), Error);
  CHECK_THROWS_WITH_AS(Int8Conv2d(wq.view({4, 18}), s, Tensor(), 0.1f, 0, {}, {}),
                       doctest::Contains("4-D weight"), Error);
  CHECK_THROWS_WITH_AS(Int8Conv2d(wq, scales_tensor({0.1, 0.1, 0.1}), Tensor(), 0.1f, 0, {}, {}),
                       doctest::Contains("weight scales of shape [4]"), Error);
  CHECK_THROWS_WITH_AS(Int8Conv2d(wq, s, Tensor(), 0.1f, 0, {.groups = 3}, {}), doctest::Contains("groups"),
                       Error);
  CHECK_THROWS_WITH_AS(Int8Conv2d(wq, s, Tensor(), 0.1f, 0, {.stride_h = 0}, {}),
                       doctest::Contains("strides"), Error);
  CHECK_THROWS_WITH_AS(Int8Conv2d(wq, s, Tensor(), 0.1f, 0, {.pad_w = -1}, {}), doctest::Contains("paddings"),
                       Error);
  CHECK_THROWS_WITH_AS(conv.forward(random_ints({1, 3, 6, 6}, 0, 9, kUInt8, 1)),
                       doctest::Contains("expected an input [N, 2, H, W], got [1, 3, 6, 6]"), Error);
  CHECK_THROWS_WITH_AS(conv.forward(random_ints({1, 2, 6, 6}, 0, 9, kInt8, 1)), doctest::Contains("uint8"),
                       Error);
  CHECK_THROWS_WITH_AS(conv.forward(random_ints({2, 6, 6}, 0, 9, kUInt8, 1)),
                       doctest::Contains("[N, 2, H, W]"), Error);
  Int8Conv2d big(random_ints({2, 2, 5, 5}, -9, 9, kInt8, 3), scales_tensor({0.1}), Tensor(), 0.1f, 0, {}, {});
  CHECK_THROWS_WITH_AS(big.forward(random_ints({1, 2, 4, 4}, 0, 9, kUInt8, 1)),
                       doctest::Contains("smaller than"), Error);
}

TEST_CASE("int8 max pool equals a float max pool of the dequantized values") {
  const float s = 0.1f;
  for (DType dt : {kUInt8, kInt8}) {
    CAPTURE(dt);
    const int32_t zp = dt == kUInt8 ? 120 : -7;
    Tensor q = dt == kUInt8 ? random_ints({2, 5, 13, 11}, 0, 255, dt, 21)
                            : random_ints({2, 5, 13, 11}, -128, 127, dt, 21);
    for (auto [k, st, p] :
         {std::tuple{2, 2, 0}, std::tuple{3, 2, 1}, std::tuple{3, 1, 0}, std::tuple{4, 3, 2}}) {
      CAPTURE(k);
      CAPTURE(st);
      CAPTURE(p);
      Tensor want = max_pool2d(dequantize_per_tensor_fast(q, s, zp), {k, k}, {st, st}, {p, p});
      Tensor got = int8_max_pool2d(q, k, st, p);
      CHECK(got.dtype() == dt);
      CHECK(got.sizes() == want.sizes());
      CHECK(got.is_contiguous());
      CHECK(dequantize_per_tensor_fast(got, s, zp).to_vector<float>() == want.to_vector<float>());
      // NHWC-strided in, NHWC-strided out, same values.
      Tensor qcl = q.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
      Tensor gcl = int8_max_pool2d(qcl, k, st, p);
      CHECK(gcl.stride(1) == 1);
      CHECK(gcl.to_vector<int>() == got.to_vector<int>());
    }
  }
  // Hand-computed: one 2x4 plane, 2x2 windows.
  Tensor h = test::make({1, 9, 3, 4, 250, 0, 7, 8}, {1, 1, 2, 4}, kUInt8);
  CHECK(int8_max_pool2d(h, 2, 2).to_vector<int>() == std::vector<int>{250, 8});
  // Errors.
  CHECK_THROWS_WITH_AS(int8_max_pool2d(h.to(kFloat32), 2, 2), doctest::Contains("uint8 or int8"), Error);
  CHECK_THROWS_WITH_AS(int8_max_pool2d(h.view({2, 4}), 2, 2), doctest::Contains("[N, C, H, W]"), Error);
  CHECK_THROWS_WITH_AS(int8_max_pool2d(h, 2, 2, 2), doctest::Contains("at most half"), Error);
  CHECK_THROWS_WITH_AS(int8_max_pool2d(h, 0, 2), doctest::Contains("kernel and stride"), Error);
  CHECK_THROWS_WITH_AS(int8_max_pool2d(h, 3, 1), doctest::Contains("smaller than the kernel"), Error);
}

// The largest products an int8 layer can meet: 255 x 127 and 255 x -128, summed over 256 inputs.
// CPUs without VNNI add products in pairs in a saturating int16 (2 x 255 x 127 > 32767); the
// layers then reduce over split weight halves (int8_split_weights.h), so the sums stay exact.
TEST_CASE("int8 linear and conv2d: extreme products are exact on every CPU") {
  CAPTURE(int8_products_saturate());
  const int64_t k = 256;
  Tensor w = empty({3, k}, TensorOptions(kInt8));
  int8_t* wp = w.data_ptr<int8_t>();
  for (int64_t i = 0; i < k; ++i) {
    wp[i] = 127;
    wp[k + i] = -128;
    wp[2 * k + i] = static_cast<int8_t>(i % 2 ? 127 : -128);
  }
  Tensor x = full({2, k}, 255.0).to(kUInt8);
  const std::vector<float> want{255.0f * 127 * k, -255.0f * 128 * k, 255.0f * (127 - 128) * k / 2};
  Int8Linear linear(w, full({1}, 1.0), Tensor(), 1.0f, 0, {});
  Tensor y = linear.forward(x);
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t c = 0; c < 3; ++c) CHECK(y[r][c].item<float>() == want[static_cast<size_t>(c)]);
  // The same products as a 1x1 convolution over 256 channels, in 2 groups of 128.
  Int8ConvOptions grouped;
  grouped.groups = 2;
  Tensor wc = w.narrow(1, 0, 128).reshape({3, 128, 1, 1}).repeat({2, 1, 1, 1});  // 6 output channels
  Int8Conv2d conv(wc, full({1}, 1.0), Tensor(), 1.0f, 0, grouped, {});
  Tensor yc = conv.forward(full({1, k, 2, 2}, 255.0).to(kUInt8));
  for (int64_t c = 0; c < 6; ++c) CHECK(yc[0][c][1][1].item<float>() == want[static_cast<size_t>(c % 3)] / 2);
}

TEST_CASE("split weight halves: [x, x] . halves equals x . w for every int8 weight") {
  Tensor w = arange(-128, 128).to(kInt8).reshape({2, 128});
  Tensor halves = split_weight_halves(w).to(kInt64);
  REQUIRE((halves.size(0) == 2 && halves.size(1) == 256));
  CHECK(halves.abs().max().item<int64_t>() <= 64);
  CHECK(equal(halves.narrow(1, 0, 128) + halves.narrow(1, 128, 128), w.to(kInt64)));
  Tensor x = arange(0, 8).to(kUInt8).reshape({1, 4, 2});
  Tensor twice = repeat_input_channels(x, 2).to(kInt64);  // groups of 2 channels: [0 1 0 1 | 2 3 2 3]
  CHECK(twice.flatten().to_vector<int64_t>() ==
        std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 4, 5, 6, 7});
}
