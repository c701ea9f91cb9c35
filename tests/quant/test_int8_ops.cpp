/*
 * The INT8 ops of the op table (ops/int8_ops.h), as QuantizedModel runs them on CUDA
 * (quant/device_layers.h), give exactly what the CPU's oneDNN layers give: run here on the CPU
 * (the ops' CPU kernels), a layer built from the same parameters must produce the same bytes as
 * Int8Linear / Int8Conv2d, for float and requantized outputs, ReLU, per-channel and per-tensor
 * scales, zero points that are folded into the bias (linear, unpadded convolution) and one that
 * is not (padded convolution). The CUDA kernels equal these CPU kernels (tests/cuda/ops/int8.cpp),
 * so a quantized model gives the same logits on both devices. Also int8_max_pool2d and
 * quantize/dequantize_per_tensor against quant's CPU kernels.
 */
#include <doctest/doctest.h>

#include <vector>

#include "ops/ops.h"
#include "quant/device_layers.h"
#include "quant/kernels/int8_conv2d.h"
#include "quant/kernels/int8_linear.h"
#include "quant/kernels/int8_pool.h"
#include "quant/kernels/quantize_kernels.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::quant;

namespace {

Tensor random_ints(IntArrayRef shape, int64_t lo, int64_t hi, DType dtype, uint64_t seed) {
  Generator gen(seed);
  return randint(lo, hi + 1, shape, DType::Int64, &gen).to(dtype);
}

// Counts the elements that differ (NaN never appears here).
int64_t differences(const Tensor& a, const Tensor& b) {
  REQUIRE(a.dtype() == b.dtype());
  REQUIRE(a.sizes().vec() == b.sizes().vec());
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  int64_t n = 0;
  for (size_t i = 0; i < x.size(); ++i) n += x[i] != y[i];
  return n;
}

std::vector<Int8Output> outputs() {
  return {Int8Output{.dtype = kFloat32},
          Int8Output{.dtype = kFloat32, .relu = true},
          Int8Output{.dtype = kUInt8, .scale = 0.05f, .zero_point = 0, .relu = true},
          Int8Output{.dtype = kUInt8, .scale = 0.031f, .zero_point = 117},
          Int8Output{.dtype = kInt8, .scale = 0.02f, .zero_point = -5}};
}

}  // namespace

TEST_CASE("int8 ops: a linear layer through int8_linear equals Int8Linear (oneDNN) exactly") {
  uint64_t seed = 10;
  for (const Int8Output& out : outputs()) {
    for (bool per_channel : {true, false}) {
      for (int32_t zp : {0, 73}) {
        CAPTURE(out.dtype);
        CAPTURE(out.relu);
        CAPTURE(per_channel);
        CAPTURE(zp);
        Tensor w = random_ints({19, 37}, -127, 127, kInt8, seed++);
        Tensor scales = per_channel ? test::pat({19}, 0.1 * seed, 0.002) + 0.004 : full({1}, 0.003f);
        Tensor bias = test::pat({19}, 0.2 * seed, 1.5);
        Int8Linear layer(w, scales, bias, 0.011f, zp, out);
        Tensor x = random_ints({13, 37}, 0, 255, kUInt8, seed++);
        const quant::detail::DeviceLayer ops_layer = quant::detail::device_layer(layer, kCPU);
        CHECK(differences(quant::detail::run_device_layer(ops_layer, x), layer.forward(x)) == 0);
        // A float input is quantized first, by both, with the layer's input qparams.
        Tensor xf = test::pat({13, 37}, 0.3 * seed, 1.2);
        CHECK(differences(quant::detail::run_device_layer(ops_layer, xf), layer.forward(xf)) == 0);
      }
    }
  }
}

TEST_CASE("int8 ops: a convolution through int8_im2col + int8_linear equals Int8Conv2d (oneDNN) exactly") {
  uint64_t seed = 50;
  for (const Int8Output& out : outputs()) {
    for (int64_t pad : {0, 1}) {
      for (int32_t zp : {0, 41}) {
        CAPTURE(out.dtype);
        CAPTURE(out.relu);
        CAPTURE(pad);
        CAPTURE(zp);
        Tensor w = random_ints({6, 3, 3, 3}, -127, 127, kInt8, seed++);
        Tensor scales = test::pat({6}, 0.1 * seed, 0.002) + 0.004;
        Tensor bias = test::pat({6}, 0.2 * seed, 1.5);
        Int8Conv2d layer(w, scales, bias, 0.02f, zp,
                         Int8ConvOptions{.stride_h = 1, .stride_w = 2, .pad_h = pad, .pad_w = pad}, out);
        const quant::detail::DeviceLayer ops_layer = quant::detail::device_layer(layer, kCPU);
        Tensor x = random_ints({2, 3, 7, 8}, 0, 255, kUInt8, seed++);
        CHECK(differences(quant::detail::run_device_layer(ops_layer, x).contiguous(), layer.forward(x).contiguous()) == 0);
        Tensor xf = test::pat({2, 3, 7, 8}, 0.3 * seed, 1.2);
        CHECK(differences(quant::detail::run_device_layer(ops_layer, xf).contiguous(), layer.forward(xf).contiguous()) == 0);
      }
    }
  }
}

TEST_CASE("int8 ops: int8_max_pool2d and quantize/dequantize_per_tensor equal quant's CPU kernels") {
  Tensor x = random_ints({2, 4, 7, 6}, 0, 255, kUInt8, 3);
  for (int64_t pad : {0, 1})
    CHECK(differences(int8_max_pool2d(x, {2, 2}, {2, 2}, {pad, pad}), quant::int8_max_pool2d(x, 2, 2, pad)) == 0);
  Tensor f = test::pat({5, 77}, 0.7, 4.0);  // 77 columns: quant's vector loop and its scalar tail
  for (DType dt : {kUInt8, kInt8}) {
    const int32_t zp = dt == kUInt8 ? 128 : 3;
    Tensor q = quantize_per_tensor(f, 0.03f, zp, dt);
    CHECK(differences(q, quantize_per_tensor_fast(f, 0.03f, zp, dt)) == 0);
    CHECK(differences(dequantize_per_tensor(q, 0.03f, zp), dequantize_per_tensor_fast(q, 0.03f, zp)) == 0);
  }
}

TEST_CASE("int8 ops: bad input is an error that names the op") {
  Tensor x = random_ints({2, 4}, 0, 255, kUInt8, 1), w = random_ints({3, 4}, -127, 127, kInt8, 2);
  CHECK_THROWS_WITH(int8_linear(x, w, full({2}, 0.1f), Tensor(), kFloat32, {}),
                    doctest::Contains("int8_linear: expected scales of shape [3] or [1], got [2]"));
  CHECK_THROWS_WITH(int8_linear(x, w, full({3}, 0.1f), Tensor(), kUInt8, Int8Epilogue{.output_zero_point = 300}),
                    doctest::Contains("output zero point 300"));
  CHECK_THROWS_WITH(int8_im2col(random_ints({1, 2, 3, 3}, 0, 9, kUInt8, 4), {5, 5}, Conv2dParams{}, 0),
                    doctest::Contains("int8_im2col: the kernel (5, 5) does not fit"));
  CHECK_THROWS_WITH(int8_max_pool2d(x.view({1, 1, 2, 4}), {2, 2}, {1, 1}, {2, 2}),
                    doctest::Contains("int8_max_pool2d: expected kernel"));
  CHECK_THROWS_WITH(dequantize_per_tensor(test::pat({3}, 0.1), 1.0f, 0), doctest::Contains("dequantize_per_tensor"));
}
