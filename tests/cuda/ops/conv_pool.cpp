/*
 * CUDA convolution and pooling against the CPU, forward and backward through autograd, for every
 * floating dtype: conv2d with stride, padding, dilation, groups (and depthwise), with and without
 * bias, 1x1, on NCHW, channels_last and transposed inputs and channels_last weights, reaching both
 * weight-gradient kernels (a thread per weight for short reductions, a block per weight for
 * long ones); max pooling with its indices (which must equal the CPU's), padding, dilation and
 * ceil_mode; average pooling with ceil_mode and count_include_pad; adaptive average pooling to
 * 1x1, to a non-divisible size and to a larger one. And the errors: bad convolution shapes and
 * max-pool indices out of range must be reported on CUDA too. The convolutions run through cuDNN
 * (ops/cuda/cudnn_conv.h), channels_last with groups and dilation included, and once more with
 * cuDNN switched off, through Loom's own kernels.
 */
#include "ops/conv_pool.h"

#include <array>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/cuda.h"
#include "core/cuda_graph.h"
#include "ops/cuda/cudnn_conv.h"
#include "tests/cuda/ops/cuda_test_util.h"

namespace loom {
namespace {

using test::check_cuda_matches_cpu;
using test::CudaCase;
using test::pat;

LOOM_CUDA_COVERS(Op::conv2d, Op::conv2d_backward_input, Op::conv2d_backward_weight, Op::max_pool2d,
                 Op::max_pool2d_backward, Op::avg_pool2d, Op::avg_pool2d_backward, Op::adaptive_avg_pool2d,
                 Op::adaptive_avg_pool2d_backward);

// How a 4-D [N, C, H, W] operand reaches the op: the base tensor that is created, and the view of
// it, taken inside the compared function so that both devices see the same strides.
struct Layout {
  std::string name;
  std::function<std::vector<int64_t>(int64_t, int64_t, int64_t, int64_t)> base;
  std::function<Tensor(const Tensor&)> view;
};

const std::vector<Layout>& layouts() {
  static const std::vector<Layout> all{
      {"contiguous",
       [](int64_t n, int64_t c, int64_t h, int64_t w) {
         return std::vector<int64_t>{n, c, h, w};
       },
       [](const Tensor& t) { return t; }},
      {"channels_last",
       [](int64_t n, int64_t c, int64_t h, int64_t w) {
         return std::vector<int64_t>{n, h, w, c};
       },
       [](const Tensor& t) {
         return t.permute({0, 3, 1, 2});
       }},
      {"transposed",
       [](int64_t n, int64_t c, int64_t h, int64_t w) {
         return std::vector<int64_t>{n, c, w, h};
       },
       [](const Tensor& t) { return t.transpose(2, 3); }},
  };
  return all;
}

Tensor input(const Layout& l, int64_t n, int64_t c, int64_t h, int64_t w, DType dt, double seed) {
  return pat(l.base(n, c, h, w), seed).to(dt);
}

// ---- convolution ------------------------------------------------------------------------------

struct ConvCase {
  std::string name;
  int64_t n, cin, h, w, cout, kh, kw;
  Conv2dParams p;
  bool bias;
};

// Weight-gradient reductions over N * Ho * Wo: 2 * 9 * 9 = 162 terms (stride 1, "same" padding)
// take the block-per-weight kernel, the strided cases (2 * 3 * 3 and so on) the thread-per-weight
// one.
const std::vector<ConvCase>& conv_cases() {
  static const std::vector<ConvCase> all{
      {"3x3 same, bias", 2, 3, 9, 9, 4, 3, 3, {{1, 1}, {1, 1}, {1, 1}, 1}, true},
      {"stride 2 padding 1 dilation 2 groups 2, bias",
       2,
       4,
       9,
       8,
       4,
       3,
       3,
       {{2, 2}, {1, 1}, {2, 2}, 2},
       true},
      {"stride 2 padding 1 dilation 2 groups 2, no bias",
       1,
       4,
       7,
       9,
       2,
       3,
       2,
       {{2, 1}, {1, 0}, {2, 1}, 2},
       false},
      {"depthwise, no bias", 2, 4, 6, 7, 4, 3, 3, {{1, 2}, {1, 1}, {1, 1}, 4}, false},
      {"depthwise x2, bias", 1, 3, 5, 5, 6, 3, 3, {{1, 1}, {0, 0}, {1, 1}, 3}, true},
      {"1x1, no bias", 2, 4, 9, 9, 3, 1, 1, {{1, 1}, {0, 0}, {1, 1}, 1}, false},
      {"1x1 stride 2, bias", 2, 3, 5, 6, 2, 1, 1, {{2, 2}, {0, 0}, {1, 1}, 1}, true},
  };
  return all;
}

void check_conv(const ConvCase& cc, DType dt, const Layout& x_layout, bool weight_channels_last) {
  CAPTURE(cc.name);
  CAPTURE(dt);
  CAPTURE(x_layout.name);
  CAPTURE(weight_channels_last);
  const int64_t cg = cc.cin / cc.p.groups;
  Tensor x = input(x_layout, cc.n, cc.cin, cc.h, cc.w, dt, 0.3);
  Tensor w = weight_channels_last ? pat({cc.cout, cc.kh, cc.kw, cg}, 1.7).to(dt)
                                  : pat({cc.cout, cg, cc.kh, cc.kw}, 1.7).to(dt);
  Tensor b = cc.bias ? pat({cc.cout}, 2.9).to(dt) : Tensor();
  const Conv2dParams p = cc.p;
  check_cuda_matches_cpu(
      [&](const std::vector<Tensor>& in) {
        Tensor weight = weight_channels_last ? in[1].permute({0, 3, 1, 2}) : in[1];
        return conv2d(x_layout.view(in[0]), weight, in[2], p.stride, p.padding, p.dilation, p.groups);
      },
      {x, w, b});
}

TEST_CASE("conv_pool: conv2d forward and backward") {
  LOOM_REQUIRE_GPU();
  for (const ConvCase& cc : conv_cases())
    for (DType dt : test::cuda_float_dtypes()) check_conv(cc, dt, layouts()[0], false);
}

TEST_CASE("conv_pool: conv2d on channels_last and transposed inputs and channels_last weights") {
  LOOM_REQUIRE_GPU();
  for (const ConvCase& cc : conv_cases()) {
    check_conv(cc, kFloat32, layouts()[1], false);
    check_conv(cc, kFloat32, layouts()[2], false);
    check_conv(cc, kFloat32, layouts()[0], true);
    check_conv(cc, kBFloat16, layouts()[1], true);
  }
}

// The backward kernels called directly, the weight gradient also without a bias gradient (the
// 16-bit types run through autograd above).
TEST_CASE("conv_pool: conv2d_backward_input and conv2d_backward_weight") {
  LOOM_REQUIRE_GPU();
  for (const ConvCase& cc : conv_cases())
    for (DType dt : {kFloat32, kFloat64}) {
      CAPTURE(cc.name);
      CAPTURE(dt);
      const int64_t cg = cc.cin / cc.p.groups;
      const std::vector<int64_t> x_sizes{cc.n, cc.cin, cc.h, cc.w}, w_sizes{cc.cout, cg, cc.kh, cc.kw};
      Tensor x = pat(x_sizes, 0.4).to(dt), w = pat(w_sizes, 1.1).to(dt);
      const Conv2dParams p = cc.p;
      Tensor y = conv2d(x, w, {}, p.stride, p.padding, p.dilation, p.groups);
      Tensor gy = pat(y.sizes(), 2.2).to(dt);
      CudaCase no_grad;
      no_grad.backward = false;
      check_cuda_matches_cpu(
          [&](const std::vector<Tensor>& in) { return conv2d_backward_input(in[0], in[1], x_sizes, p); },
          {gy, w}, no_grad);
      for (bool with_bias : {false, true})
        check_cuda_matches_cpu(
            [&](const std::vector<Tensor>& in) {
              auto [gw, gb] = conv2d_backward_weight(in[0], in[1], w_sizes, with_bias, p);
              return with_bias ? std::vector<Tensor>{gw, gb} : std::vector<Tensor>{gw};
            },
            {gy, x}, no_grad);
    }
}

TEST_CASE("conv_pool: conv2d bad inputs throw on CUDA") {
  LOOM_REQUIRE_GPU();
  Tensor x = pat({1, 3, 5, 5}, 0.1).to(Device::cuda());
  Tensor w = pat({4, 1, 3, 3}, 0.2).to(Device::cuda());
  CHECK_THROWS_WITH_AS(conv2d(x, w, {}, {1, 1}, {0, 0}, {1, 1}, 2), doctest::Contains("does not divide"),
                       Error);
  Tensor big = pat({2, 3, 7, 7}, 0.3).to(Device::cuda());
  CHECK_THROWS_WITH_AS(conv2d(x, big, {}, {1, 1}, {0, 0}, {1, 1}, 1),
                       doctest::Contains("is larger than the padded input"), Error);
  Tensor w3 = pat({2, 3, 3, 3}, 0.4).to(Device::cuda());
  Tensor bad_bias = pat({3}, 0.5).to(Device::cuda());
  CHECK_THROWS_WITH_AS(conv2d(x, w3, bad_bias, {1, 1}, {0, 0}, {1, 1}, 1),
                       doctest::Contains("expected a bias"), Error);
}

// Channels-last activations with grouped, dilated, strided convolutions: cuDNN gets NHWC
// descriptors for x and y, and the weight turned NHWC to match when it is not.
const std::vector<ConvCase>& channels_last_cases() {
  static const std::vector<ConvCase> all{
      {"groups 2 dilation 2 stride 2, bias", 2, 4, 8, 7, 6, 3, 3, {{2, 2}, {2, 1}, {2, 2}, 2}, true},
      {"groups 4 dilation 1x2, bias", 1, 4, 6, 9, 8, 3, 2, {{1, 1}, {1, 2}, {1, 2}, 4}, true},
      {"groups 2 dilation 2x1 stride 1x2, no bias", 2, 6, 5, 6, 4, 2, 3, {{1, 2}, {0, 1}, {2, 1}, 2}, false},
  };
  return all;
}

TEST_CASE("conv_pool: conv2d on channels_last with groups and dilation, every dtype, forward and backward") {
  LOOM_REQUIRE_GPU();
  for (const ConvCase& cc : channels_last_cases())
    for (DType dt : test::cuda_float_dtypes()) {
      check_conv(cc, dt, layouts()[1], false);
      check_conv(cc, dt, layouts()[1], true);
    }
}

// The backward ops called directly with channels_last grad_out and input, so that cuDNN's
// backward data and backward filter see NHWC operands (the weight gradient is written NHWC
// and copied to the NCHW result); and the gradient of a sum, whose grad_out is expanded.
TEST_CASE("conv_pool: conv2d_backward_input and conv2d_backward_weight on channels_last tensors") {
  LOOM_REQUIRE_GPU();
  const Layout& cl = layouts()[1];
  for (const ConvCase& cc : channels_last_cases())
    for (DType dt : {kFloat32, kFloat16}) {
      CAPTURE(cc.name);
      CAPTURE(dt);
      const int64_t cg = cc.cin / cc.p.groups;
      const std::vector<int64_t> x_sizes{cc.n, cc.cin, cc.h, cc.w}, w_sizes{cc.cout, cg, cc.kh, cc.kw};
      const Conv2dParams p = cc.p;
      Tensor x = input(cl, cc.n, cc.cin, cc.h, cc.w, dt, 0.4), w = pat(w_sizes, 1.1).to(dt);
      Tensor y = conv2d(cl.view(x), w, {}, p.stride, p.padding, p.dilation, p.groups);
      Tensor gy = input(cl, y.size(0), y.size(1), y.size(2), y.size(3), dt, 2.2);
      CudaCase no_grad;
      no_grad.backward = false;
      check_cuda_matches_cpu(
          [&](const std::vector<Tensor>& in) { return conv2d_backward_input(cl.view(in[0]), in[1], x_sizes, p); },
          {gy, w}, no_grad);
      check_cuda_matches_cpu(
          [&](const std::vector<Tensor>& in) {
            auto [gw, gb] = conv2d_backward_weight(cl.view(in[0]), cl.view(in[1]), w_sizes, true, p);
            return std::vector<Tensor>{gw, gb};
          },
          {gy, x}, no_grad);
      check_cuda_matches_cpu(
          [&](const std::vector<Tensor>& in) {
            return conv2d(cl.view(in[0]), in[1], {}, p.stride, p.padding, p.dilation, p.groups).sum();
          },
          {x, w});
    }
}

// The wrapper itself: cuDNN takes a dense NCHW or NHWC float convolution (so the cases above do
// reach it) and declines, writing nothing, what is not dense in either order or not floating.
TEST_CASE("conv_pool: cudnn_convolution runs dense float convolutions and declines the rest") {
  LOOM_REQUIRE_GPU();
  const Conv2dParams p{{2, 1}, {1, 1}, {1, 2}, 2};
  Tensor x = pat({2, 4, 7, 6}, 0.3), w = pat({6, 2, 3, 3}, 1.7);
  Tensor want = conv2d(x, w, {}, p.stride, p.padding, p.dilation, p.groups);
  // On the device with NCHW or NHWC strides (a copy with .to() would be NCHW-contiguous).
  auto on_device = [](const Tensor& t, bool channels_last) {
    if (!channels_last) return t.to(Device::cuda());
    return contiguous(t.permute({0, 2, 3, 1})).to(Device::cuda()).permute({0, 3, 1, 2});
  };
  for (bool channels_last : {false, true}) {
    CAPTURE(channels_last);
    Tensor y = on_device(zeros(want.sizes()), channels_last);
    REQUIRE(cuda::cudnn_convolution(cuda::CudnnConvKind::kForward, on_device(x, channels_last),
                                    on_device(w, channels_last), y, p));
    test::check_same(y, want, test::cuda_tol_for(kFloat32), "y");
  }
  Tensor y = zeros(want.sizes().vec(), Device::cuda());
  Tensor transposed = contiguous(x.transpose(2, 3)).to(Device::cuda()).transpose(2, 3);
  Tensor xd = x.to(Device::cuda()), wd = w.to(Device::cuda());
  CHECK_FALSE(cuda::cudnn_convolution(cuda::CudnnConvKind::kForward, transposed, wd, y, p));
  CHECK_FALSE(cuda::cudnn_convolution(cuda::CudnnConvKind::kForward, xd.to(kInt32), wd.to(kInt32),
                                      y.to(kInt32), p));
  CHECK_FALSE(cuda::cudnn_convolution(cuda::CudnnConvKind::kForward, xd, wd.to(kFloat64), y, p));
  CHECK(y.abs().sum().item<double>() == 0.0);
}

// Loom's own kernels stay as the fallback for what cuDNN has no engine for; with cuDNN switched
// off the cases reach them here (the emulated cuDNN runs every case above).
TEST_CASE("conv_pool: conv2d with cuDNN off runs Loom's kernels") {
  LOOM_REQUIRE_GPU();
  test::CudnnEnabledGuard off(false);
  for (const ConvCase& cc : conv_cases()) {
    check_conv(cc, kFloat32, layouts()[0], false);
    check_conv(cc, kFloat16, layouts()[1], true);
  }
  for (const ConvCase& cc : channels_last_cases()) check_conv(cc, kBFloat16, layouts()[1], false);
}

// ---- pooling ----------------------------------------------------------------------------------

struct PoolCase {
  std::string name;
  int64_t h, w;
  Pool2dParams p;
};

Pool2dParams pool_params(std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                         std::array<int64_t, 2> padding, std::array<int64_t, 2> dilation, bool ceil_mode,
                         bool count_include_pad) {
  return make_pool2d_params(kernel, stride, padding, dilation, ceil_mode, count_include_pad);
}

// 8 rows with kernel 3, stride 2, padding 1 give 4 outputs, 5 with ceil_mode (the last window
// hangs over the padding).
std::vector<PoolCase> max_pool_cases() {
  return {
      {"k3 s2 p1", 8, 7, pool_params({3, 3}, {2, 2}, {1, 1}, {1, 1}, false, true)},
      {"k3 s2 p1 ceil", 8, 7, pool_params({3, 3}, {2, 2}, {1, 1}, {1, 1}, true, true)},
      {"k3 s1 p1 dilation 2", 7, 9, pool_params({3, 3}, {1, 1}, {1, 1}, {2, 2}, false, true)},
      {"k3x2 s2x1 p1x0 dilation 2x1 ceil", 9, 6, pool_params({3, 2}, {2, 1}, {1, 0}, {2, 1}, true, true)},
      {"k2 s2", 6, 8, pool_params({2, 2}, {2, 2}, {0, 0}, {1, 1}, false, true)},
  };
}

TEST_CASE("conv_pool: max_pool2d values, indices and backward") {
  LOOM_REQUIRE_GPU();
  for (const PoolCase& pc : max_pool_cases())
    for (DType dt : test::cuda_float_dtypes())
      for (const Layout& l : layouts()) {
        if (l.name != "contiguous" && dt != kFloat32 && dt != kBFloat16) continue;
        CAPTURE(pc.name);
        CAPTURE(dt);
        CAPTURE(l.name);
        const Pool2dParams p = pc.p;
        check_cuda_matches_cpu(
            [&](const std::vector<Tensor>& in) {
              auto [out, indices] = max_pool2d_with_indices(l.view(in[0]), p);
              return std::vector<Tensor>{out, indices};
            },
            {input(l, 2, 3, pc.h, pc.w, dt, 0.6)});
      }
}

// A NaN wins its windows, -inf inputs keep an index inside the input, and ties (values -2..2)
// keep the first maximum.
TEST_CASE("conv_pool: max_pool2d special values and ties") {
  LOOM_REQUIRE_GPU();
  Tensor special = pat({1, 2, 6, 6}, 0.8, 2.9).to(kInt32).to(kFloat32);
  special.select(1, 1).fill_(-std::numeric_limits<double>::infinity());
  special.select(1, 0).select(1, 2).select(1, 3).fill_(std::numeric_limits<double>::quiet_NaN());
  for (const PoolCase& pc : max_pool_cases()) {
    CAPTURE(pc.name);
    const Pool2dParams p = pc.p;
    CudaCase c;
    c.backward = false;
    check_cuda_matches_cpu(
        [&](const std::vector<Tensor>& in) {
          auto [out, indices] = max_pool2d_with_indices(in[0], p);
          return std::vector<Tensor>{out, indices};
        },
        {special}, c);
  }
}

TEST_CASE(
    "conv_pool: max_pool2d_backward reports indices out of range on CUDA, in a CUDA graph's replay too") {
  LOOM_REQUIRE_GPU();
  const Pool2dParams p = pool_params({2, 2}, {2, 2}, {0, 0}, {1, 1}, false, true);
  Tensor grad = pat({1, 1, 2, 2}, 0.1).to(Device::cuda());
  Tensor good = test::make({0, 3, 9, 15}, {1, 1, 2, 2}, kInt64).to(Device::cuda());
  Tensor gx = max_pool2d_backward(grad, good, {1, 1, 4, 4}, p);
  Tensor expected = max_pool2d_backward(grad.to(kCPU), good.to(kCPU), {1, 1, 4, 4}, p);
  test::check_same(gx, expected, test::cuda_tol_for(kFloat32), "grad_input");
  Tensor bad = test::make({0, 3, 16, 15}, {1, 1, 2, 2}, kInt64).to(Device::cuda());
  // Eagerly too the check runs on the GPU, and the host's next wait reports it.
  Tensor unchecked = max_pool2d_backward(grad, bad, {1, 1, 4, 4}, p);
  CHECK_THROWS_WITH_AS(
      (void)unchecked.to(kCPU),
      doctest::Contains(
          "max_pool2d_backward: an index out of range for an input plane of 4x4 (at position 2)"),
      Error);
  // Captured, the check runs at each replay.
  Tensor indices = good.clone(), captured;
  cuda::CudaGraph graph;
  cuda::capture(graph, [&] { captured = max_pool2d_backward(grad, indices, {1, 1, 4, 4}, p); });
  graph.replay();
  test::check_same(captured, expected, test::cuda_tol_for(kFloat32), "replayed grad_input");
  indices.copy_(bad);
  graph.replay();
  CHECK_THROWS_WITH_AS(cuda::synchronize(),
                       doctest::Contains("max_pool2d_backward: an index out of range for an input plane of 4x4 (at "
                                         "position 2), in a replay of a CUDA graph"),
                       Error);
}

std::vector<PoolCase> avg_pool_cases() {
  std::vector<PoolCase> cases;
  for (bool ceil_mode : {false, true})
    for (bool include_pad : {false, true}) {
      const std::string suffix = std::string(ceil_mode ? " ceil" : "") + (include_pad ? " include_pad" : "");
      cases.push_back(
          {"k3 s2 p1" + suffix, 8, 7, pool_params({3, 3}, {2, 2}, {1, 1}, {1, 1}, ceil_mode, include_pad)});
      cases.push_back({"k3x2 s2x3 p1x1" + suffix, 9, 8,
                       pool_params({3, 2}, {2, 3}, {1, 1}, {1, 1}, ceil_mode, include_pad)});
    }
  cases.push_back({"k2 s2", 6, 8, pool_params({2, 2}, {2, 2}, {0, 0}, {1, 1}, false, true)});
  cases.push_back({"k3 s1", 5, 6, pool_params({3, 3}, {1, 1}, {0, 0}, {1, 1}, false, true)});
  return cases;
}

TEST_CASE("conv_pool: avg_pool2d forward and backward") {
  LOOM_REQUIRE_GPU();
  for (const PoolCase& pc : avg_pool_cases())
    for (DType dt : test::cuda_float_dtypes())
      for (const Layout& l : layouts()) {
        if (l.name != "contiguous" && dt != kFloat32 && dt != kFloat16) continue;
        CAPTURE(pc.name);
        CAPTURE(dt);
        CAPTURE(l.name);
        const Pool2dParams p = pc.p;
        check_cuda_matches_cpu(
            [&](const std::vector<Tensor>& in) {
              return avg_pool2d(l.view(in[0]), p.kernel, p.stride, p.padding, p.ceil_mode,
                                p.count_include_pad);
            },
            {input(l, 2, 3, pc.h, pc.w, dt, 0.9)});
      }
}

TEST_CASE("conv_pool: adaptive_avg_pool2d forward and backward") {
  LOOM_REQUIRE_GPU();
  struct AdaptiveCase {
    int64_t h, w, ho, wo;
  };
  const std::vector<AdaptiveCase> cases{{9, 9, 1, 1}, {5, 7, 3, 2}, {5, 7, 5, 7}, {4, 6, 2, 3}, {3, 4, 5, 7}};
  for (const AdaptiveCase& ac : cases)
    for (DType dt : test::cuda_float_dtypes())
      for (const Layout& l : layouts()) {
        if (l.name != "contiguous" && dt != kFloat32 && dt != kBFloat16) continue;
        CAPTURE(ac.h);
        CAPTURE(ac.w);
        CAPTURE(ac.ho);
        CAPTURE(ac.wo);
        CAPTURE(dt);
        CAPTURE(l.name);
        check_cuda_matches_cpu(
            [&](const std::vector<Tensor>& in) {
              return adaptive_avg_pool2d(l.view(in[0]), {ac.ho, ac.wo});
            },
            {input(l, 2, 4, ac.h, ac.w, dt, 1.3)});
      }
}

// The gradient of a sum reaches the backward kernels as an expanded (stride-0) grad_out.
TEST_CASE("conv_pool: pooling backward with an expanded grad_out") {
  LOOM_REQUIRE_GPU();
  for (DType dt : {kFloat32, kBFloat16}) {
    CAPTURE(dt);
    const Pool2dParams p = pool_params({3, 3}, {2, 2}, {1, 1}, {1, 1}, true, false);
    Tensor x = pat({2, 3, 8, 7}, 1.9).to(dt);
    check_cuda_matches_cpu(
        [&](const std::vector<Tensor>& in) { return std::get<0>(max_pool2d_with_indices(in[0], p)).sum(); },
        {x});
    check_cuda_matches_cpu(
        [&](const std::vector<Tensor>& in) {
          return avg_pool2d(in[0], p.kernel, p.stride, p.padding, p.ceil_mode, p.count_include_pad).sum();
        },
        {x});
    check_cuda_matches_cpu(
        [&](const std::vector<Tensor>& in) {
          return adaptive_avg_pool2d(in[0], {3, 2}).sum();
        },
        {x});
  }
}

}  // namespace
}  // namespace loom
