/*
 * CPU kernels of the INT8 inference ops (ops/int8_ops.h): plain integer loops, the reference
 * the CUDA kernels are tested against. quant::QuantizedModel runs oneDNN's int8 primitives on
 * the CPU (quant/kernels/); these compute the same values with the same rounding
 * (ops/int8_math.h; tests/quant/test_int8_ops.cpp compares them with Int8Linear/Int8Conv2d).
 */
#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/parallel.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/dispatch.h"
#include "ops/int8_math.h"

namespace loom::cpu {

namespace {

void int8_linear_kernel(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& scales,
                        const Tensor& bias, const Int8Epilogue& e) {
  const int64_t m = x.size(0), k = x.size(1), o = w.size(0);
  const uint8_t* xp = x.data_ptr<uint8_t>();
  const int8_t* wp = w.data_ptr<int8_t>();
  const float* sp = scales.data_ptr<float>();
  const float* bp = bias.defined() ? bias.data_ptr<float>() : nullptr;
  const bool per_channel = scales.numel() > 1;
  // The input zero point's term, zp * sum_k w[c, k], exact in int32 (|sum| <= 128 k).
  std::vector<int32_t> zero_point_term(static_cast<size_t>(o), 0);
  if (e.input_zero_point != 0)
    for (int64_t c = 0; c < o; ++c) {
      int32_t row_sum = 0;
      for (int64_t i = 0; i < k; ++i) row_sum += wp[c * k + i];
      zero_point_term[c] = e.input_zero_point * row_sum;
    }
  float* out_f32 = out.dtype() == kFloat32 ? out.data_ptr<float>() : nullptr;
  uint8_t* out_u8 = out.dtype() == kUInt8 ? out.data_ptr<uint8_t>() : nullptr;
  int8_t* out_s8 = out.dtype() == kInt8 ? out.data_ptr<int8_t>() : nullptr;
  parallel_for(0, m, std::max<int64_t>(1, 65536 / std::max<int64_t>(1, k * o)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      for (int64_t c = 0; c < o; ++c) {
        int32_t acc = 0;
        for (int64_t i = 0; i < k; ++i) acc += int32_t{xp[r * k + i]} * int32_t{wp[c * k + i]};
        const float f = int8_dequantized_sum(acc - zero_point_term[c], bp ? bp[c] : 0.0f,
                                             sp[per_channel ? c : 0], e.relu);
        if (out_f32)
          out_f32[r * o + c] = f;
        else if (out_u8)
          out_u8[r * o + c] = static_cast<uint8_t>(int8_round_clamp(f, e.output_zero_point, 0, 255));
        else
          out_s8[r * o + c] = static_cast<int8_t>(int8_round_clamp(f, e.output_zero_point, -128, 127));
      }
  });
}

void int8_im2col_kernel(const Tensor& out, const Tensor& x, std::array<int64_t, 2> kernel, const Conv2dParams& p,
                        int32_t pad_value) {
  const int64_t n = x.size(0), h = x.size(2), w = x.size(3);
  const int64_t cols = out.size(1), positions = out.size(0) / n;
  const int64_t wo = (w + 2 * p.padding[1] - p.dilation[1] * (kernel[1] - 1) - 1) / p.stride[1] + 1;
  const uint8_t* xp = x.data_ptr<uint8_t>();
  uint8_t* op = out.data_ptr<uint8_t>();
  parallel_for(0, out.size(0), 64, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / positions, oy = row % positions / wo, ox = row % wo;
      for (int64_t col = 0; col < cols; ++col) {
        const int64_t c = col / (kernel[0] * kernel[1]), i = col / kernel[1] % kernel[0], j = col % kernel[1];
        const int64_t iy = oy * p.stride[0] - p.padding[0] + i * p.dilation[0];
        const int64_t ix = ox * p.stride[1] - p.padding[1] + j * p.dilation[1];
        const bool inside = iy >= 0 && iy < h && ix >= 0 && ix < w;
        op[row * cols + col] = inside ? xp[b * x.stride(0) + c * x.stride(1) + iy * x.stride(2) + ix * x.stride(3)]
                                      : static_cast<uint8_t>(pad_value);
      }
    }
  });
}

template <class Q>
void max_pool(const Tensor& out, const Tensor& x, const Pool2dParams& p) {
  const int64_t h = x.size(2), w = x.size(3), ho = out.size(2), wo = out.size(3);
  const Q* xp = x.data_ptr<Q>();
  Q* op = out.data_ptr<Q>();
  parallel_for(0, out.size(0) * out.size(1), 16, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t b = plane / out.size(1), c = plane % out.size(1);
      const Q* in = xp + b * x.stride(0) + c * x.stride(1);
      for (int64_t oy = 0; oy < ho; ++oy)
        for (int64_t ox = 0; ox < wo; ++ox) {
          Q best = std::numeric_limits<Q>::min();
          for (int64_t i = 0; i < p.kernel[0]; ++i)
            for (int64_t j = 0; j < p.kernel[1]; ++j) {
              const int64_t iy = oy * p.stride[0] - p.padding[0] + i, ix = ox * p.stride[1] - p.padding[1] + j;
              if (iy >= 0 && iy < h && ix >= 0 && ix < w) best = std::max(best, in[iy * x.stride(2) + ix * x.stride(3)]);
            }
          op[b * out.stride(0) + c * out.stride(1) + oy * out.stride(2) + ox * out.stride(3)] = best;
        }
    }
  });
}

void int8_max_pool2d_kernel(const Tensor& out, const Tensor&, const Tensor& x, const Pool2dParams& p) {
  if (x.dtype() == kUInt8)
    max_pool<uint8_t>(out, x, p);
  else
    max_pool<int8_t>(out, x, p);
}

// out and in of one shape and any strides, walked in row-major order of the shape.
template <class F>
void for_each_pair(const Tensor& out, const Tensor& in, const F& f) {
  const int64_t n = out.numel(), nd = out.dim();
  parallel_for(0, n, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      int64_t rest = i, out_offset = 0, in_offset = 0;
      for (int64_t d = nd - 1; d >= 0; --d) {
        const int64_t idx = rest % out.size(d);
        rest /= out.size(d);
        out_offset += idx * out.stride(d);
        in_offset += idx * in.stride(d);
      }
      f(out_offset, in_offset);
    }
  });
}

void quantize_kernel(const Tensor& out, const Tensor& in, float scale, int32_t zero_point) {
  const float inv = 1.0f / scale;
  const float* ip = in.data_ptr<float>();
  if (out.dtype() == kUInt8) {
    uint8_t* op = out.data_ptr<uint8_t>();
    for_each_pair(out, in, [&](int64_t o, int64_t i) {
      op[o] = static_cast<uint8_t>(int8_quantize(ip[i], inv, zero_point, 0, 255));
    });
  } else {
    int8_t* op = out.data_ptr<int8_t>();
    for_each_pair(out, in, [&](int64_t o, int64_t i) {
      op[o] = static_cast<int8_t>(int8_quantize(ip[i], inv, zero_point, -128, 127));
    });
  }
}

void dequantize_kernel(const Tensor& out, const Tensor& in, float scale, int32_t zero_point) {
  float* op = out.data_ptr<float>();
  auto run = [&](const auto* ip) {
    for_each_pair(out, in, [&](int64_t o, int64_t i) {
      op[o] = int8_fmul(static_cast<float>(static_cast<int32_t>(ip[i]) - zero_point), scale);
    });
  };
  if (in.dtype() == kUInt8)
    run(in.data_ptr<uint8_t>());
  else
    run(in.data_ptr<int8_t>());
}

}  // namespace

void register_int8_kernels() {
  register_kernel<Op::int8_linear>(DeviceType::CPU, int8_linear_kernel);
  register_kernel<Op::int8_im2col>(DeviceType::CPU, int8_im2col_kernel);
  register_kernel<Op::int8_max_pool2d>(DeviceType::CPU, int8_max_pool2d_kernel);
  register_kernel<Op::quantize_per_tensor>(DeviceType::CPU, quantize_kernel);
  register_kernel<Op::dequantize_per_tensor>(DeviceType::CPU, dequantize_kernel);
}

}  // namespace loom::cpu
