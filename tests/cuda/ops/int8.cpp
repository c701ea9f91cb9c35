/*
 * The INT8 inference ops on CUDA against their CPU kernels: int8_linear (cuBLASLt's INT8 GEMM
 * plus the shift, zero-point and requantize kernels) for every output dtype, per-channel and
 * per-tensor scales, with and without bias, ReLU and zero points, and for K and O that are and
 * are not multiples of 4 (cuBLASLt's padding); int8_im2col with stride, padding, dilation and an
 * NHWC-strided input; int8_max_pool2d on uint8 and int8; quantize/dequantize with ties, NaN,
 * out-of-range values and strided inputs. Integer results must be equal; float32 results too,
 * since both backends run the same float32 steps (ops/int8_math.h).
 */
#include <cmath>
#include <limits>
#include <vector>

#include "ops/ops.h"
#include "tests/cuda/ops/cuda_test_util.h"

namespace loom {
namespace {

using test::check_cuda_matches_cpu;
using test::CudaCase;
using test::pat;
using test::Tol;

LOOM_CUDA_COVERS(Op::int8_linear, Op::int8_im2col, Op::int8_max_pool2d, Op::quantize_per_tensor,
                 Op::dequantize_per_tensor);

const Device kGpu = Device::cuda(0);
constexpr Tol kExact{0.0, 0.0};

// Integers in [low, high) of `dtype`, a fixed pattern per seed.
Tensor ints(IntArrayRef shape, int64_t low, int64_t high, DType dtype, uint64_t seed) {
  Generator g(seed);
  return randint(low, high, shape, kInt64, &g).to(dtype);
}

// x [N, C, H, W] as is, or the same values NHWC-strided (how QuantizedModel keeps activations).
Tensor as_layout(const Tensor& x, bool nhwc) {
  return nhwc ? x.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2}) : x;
}

TEST_CASE("int8: int8_linear on CUDA (cuBLASLt INT8) equals the CPU kernel") {
  LOOM_REQUIRE_GPU();
  struct Shape {
    int64_t m, k, o;
  };
  uint64_t seed = 1;
  for (Shape s : {Shape{3, 5, 7}, Shape{4, 16, 12}, Shape{1, 33, 10}, Shape{9, 8, 1}}) {
    for (DType out : {kFloat32, kUInt8, kInt8}) {
      for (int variant = 0; variant < 4; ++variant) {
        CAPTURE(s.m);
        CAPTURE(s.k);
        CAPTURE(s.o);
        CAPTURE(out);
        CAPTURE(variant);
        const bool per_channel = variant % 2 == 0, with_bias = variant < 2;
        Int8Epilogue e;
        e.input_zero_point = variant == 1 ? 0 : 37 + variant;
        e.output_zero_point = out == kUInt8 ? 11 * variant : out == kInt8 ? -3 * variant : 0;
        e.relu = variant >= 2;
        Tensor x = ints({s.m, s.k}, 0, 256, kUInt8, seed++);
        Tensor w = ints({s.o, s.k}, -128, 128, kInt8, seed++);
        // Scales that bring the sums (up to ~255 * 128 * k) to a few hundred output steps.
        Tensor scales = (pat({per_channel ? s.o : 1}, 0.1 * seed, 0.5) + 1.0) * (0.6 / (128.0 * s.k));
        Tensor bias = with_bias ? pat({s.o}, 0.3 * seed, 500.0) : Tensor();
        check_cuda_matches_cpu(
            [&](const std::vector<Tensor>& in) { return int8_linear(in[0], in[1], in[2], in[3], out, e); },
            {x, w, scales, bias}, CudaCase{.backward = false, .tol = kExact});
      }
    }
  }
  // A transposed (non-contiguous) input is made contiguous by the op.
  Tensor xt = ints({6, 4}, 0, 256, kUInt8, 99).t();
  Tensor w = ints({5, 6}, -128, 128, kInt8, 98), scales = full({1}, 1e-3f);
  check_cuda_matches_cpu(
      [&](const std::vector<Tensor>& in) { return int8_linear(in[0], in[1], in[2], Tensor(), kUInt8, {}); },
      {xt, w, scales}, CudaCase{.backward = false, .tol = kExact});
}

TEST_CASE("int8: int8_linear rejects mismatched operands, naming the op") {
  LOOM_REQUIRE_GPU();
  Tensor x = ints({2, 4}, 0, 256, kUInt8, 1).to(kGpu), w = ints({3, 4}, -128, 128, kInt8, 2).to(kGpu);
  Tensor scales = full({3}, 0.01f, kGpu);
  CHECK_THROWS_WITH(int8_linear(x, w.to(kCPU), scales, Tensor(), kFloat32, {}), doctest::Contains("int8_linear"));
  CHECK_THROWS_WITH(int8_linear(x.to(kInt8), w, scales, Tensor(), kFloat32, {}),
                    doctest::Contains("expected x uint8"));
  CHECK_THROWS_WITH(int8_linear(x, w.narrow(1, 0, 3), scales, Tensor(), kFloat32, {}),
                    doctest::Contains("[M, K]"));
}

TEST_CASE("int8: int8_im2col on CUDA equals the CPU kernel") {
  LOOM_REQUIRE_GPU();
  struct Case {
    std::array<int64_t, 2> kernel, stride, padding, dilation;
  };
  for (Case c : {Case{{3, 3}, {1, 1}, {1, 1}, {1, 1}}, Case{{2, 3}, {2, 1}, {0, 1}, {1, 2}},
                 Case{{1, 1}, {1, 1}, {0, 0}, {1, 1}}}) {
    for (bool nhwc : {false, true}) {
      CAPTURE(nhwc);
      Conv2dParams p;
      p.stride = c.stride;
      p.padding = c.padding;
      p.dilation = c.dilation;
      check_cuda_matches_cpu(
          [&](const std::vector<Tensor>& in) { return int8_im2col(as_layout(in[0], nhwc), c.kernel, p, 77); },
          {ints({2, 3, 5, 6}, 0, 256, kUInt8, 7)}, CudaCase{.backward = false, .tol = kExact});
    }
  }
}

TEST_CASE("int8: int8_max_pool2d on CUDA equals the CPU kernel, layout kept") {
  LOOM_REQUIRE_GPU();
  for (DType dt : {kUInt8, kInt8}) {
    for (bool nhwc : {false, true}) {
      for (int64_t padding : {0, 1}) {
        CAPTURE(dt);
        CAPTURE(nhwc);
        CAPTURE(padding);
        Tensor x = ints({2, 3, 6, 7}, dt == kUInt8 ? 0 : -128, dt == kUInt8 ? 256 : 128, dt, 5);
        check_cuda_matches_cpu(
            [&](const std::vector<Tensor>& in) {
              Tensor y = int8_max_pool2d(as_layout(in[0], nhwc), {2, 2}, {2, 2}, {padding, padding});
              CHECK(y.is_contiguous() == !nhwc);
              return y;
            },
            {x}, CudaCase{.backward = false, .tol = kExact});
      }
    }
  }
}

TEST_CASE("int8: quantize_per_tensor and dequantize_per_tensor on CUDA equal the CPU kernels") {
  LOOM_REQUIRE_GPU();
  // Ties (k + 0.5 steps) round to even; values beyond the range clamp; NaN goes to the minimum.
  std::vector<float> values{0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 1000.0f, -1000.0f, std::nanf(""), 0.0f, 0.26f};
  Tensor special = tensor(values, {2, 5});
  Tensor strided = pat({6, 8}, 0.4, 3.0).t();
  for (const Tensor& x : {special, strided}) {
    for (DType dt : {kUInt8, kInt8}) {
      CAPTURE(dt);
      const int32_t zp = dt == kUInt8 ? 100 : -7;
      check_cuda_matches_cpu([&](const std::vector<Tensor>& in) { return quantize_per_tensor(in[0], 0.5f, zp, dt); },
                             {x}, CudaCase{.backward = false, .tol = kExact});
      Tensor q = quantize_per_tensor(x, 0.05f, zp, dt);
      check_cuda_matches_cpu([&](const std::vector<Tensor>& in) { return dequantize_per_tensor(in[0], 0.05f, zp); },
                             {q.t()}, CudaCase{.backward = false, .tol = kExact});
    }
  }
  CHECK_THROWS_WITH(quantize_per_tensor(special.to(kGpu), 0.0f, 0, kUInt8), doctest::Contains("positive finite scale"));
  CHECK_THROWS_WITH(quantize_per_tensor(special.to(kGpu), 1.0f, 300, kUInt8), doctest::Contains("zero point 300"));
}

}  // namespace
}  // namespace loom
