/*
 * Tests of fake quantization (quant/fake_quantize.h): forward values and gradients against
 * PyTorch 1.13's fake_quantize_per_tensor_affine / fake_quantize_per_channel_affine /
 * _fake_quantize_learnable_per_{tensor,channel}_affine, bit for bit where torch's result is
 * elementwise, within float32 summation error where torch sums (the scale and zero-point
 * gradients). Finite differences cannot check these: round() has zero derivative almost
 * everywhere and the straight-through estimator is a definition, not a derivative.
 *
 * Inputs are deterministic patterns both sides compute. The PyTorch side (/usr/bin/python3,
 * torch 1.13) starts with:
 *
 *   import math, torch
 *   def pat(shape, seed, scale=0.5):
 *       n = math.prod(shape)
 *       return torch.tensor([math.sin(seed + 0.61 * i) * scale for i in range(n)],
 *                           dtype=torch.float64).reshape(shape).float()
 *   def fp(t):  # fingerprint: sum of float32 bit patterns times (i + 1), mod 2^64
 *       b = t.contiguous().view(-1).view(torch.int32).long() & 0xffffffff
 *       return int((b * torch.arange(1, b.numel() + 1)).sum()) % 2**64
 *
 * and prints values with repr(float(v)) (float32 values printed exactly), so that the checks
 * below can be exact (Tol{0, 0}); large tensors are compared through fp(), which changes with
 * any bit of any element.
 */
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "autograd/autograd.h"
#include "core/grad_mode.h"
#include "quant/fake_quantize.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::test;
using loom::quant::fake_quantize_learnable_per_channel;
using loom::quant::fake_quantize_learnable_per_tensor;
using loom::quant::fake_quantize_per_channel;
using loom::quant::fake_quantize_per_tensor;

namespace {

constexpr Tol kExact{0, 0};
// The scale and zero-point gradients are sums: torch adds float32 partial sums, Loom adds in
// float64 and rounds once, so they differ by a few float32 ulps of the sum (or of its largest
// terms when the terms cancel).
constexpr Tol kSumTol{4e-6, 1e-7};

// The Python pat() above is tests/test_util.h's pat().

// The Python fp() above.
uint64_t fingerprint(const Tensor& t) {
  Tensor c = t.detach().contiguous();
  const float* p = c.data_ptr<float>();
  uint64_t sum = 0;
  for (int64_t i = 0; i < c.numel(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, p + i, sizeof bits);
    sum += static_cast<uint64_t>(bits) * static_cast<uint64_t>(i + 1);
  }
  return sum;
}

Tensor f32(const std::vector<double>& v) {
  return make(v, kFloat32);
}
Tensor i32(const std::vector<double>& v) {
  return make(v, kInt32);
}

int64_t count_nonzero(const Tensor& t) {
  int64_t n = 0;
  for (double v : values(t)) n += v != 0;
  return n;
}

}  // namespace

TEST_CASE("fake_quantize_per_tensor rounds half to even, clamps both ends and passes the gradient inside") {
  // x / scale hits the halves -3.5, -2.5, -0.5, 0.5, 1.5, 2.5, 10.5, 11.5, 12.5 (each rounds to
  // the even neighbour), and clamps below (-2.5, -1.75) and above (100) the range [0, 15]:
  //   x = torch.tensor([-2.5, -1.75, -1.5, -1.25, -0.25, 0.25, 0.75, 1.25, 0.1, 0.3, 2.0, 5.25,
  //                     5.75, 6.0, 6.25, 100.0], requires_grad=True)
  //   y = torch.fake_quantize_per_tensor_affine(x, 0.5, 3, 0, 15); y.backward(pat([16], 7))
  const std::vector<double> xv = {-2.5, -1.75, -1.5, -1.25, -0.25, 0.25, 0.75, 1.25,
                                  0.1,  0.3,   2.0,  5.25,  5.75,  6.0,  6.25, 100.0};
  const std::vector<double> expected_y = {-1.5, -1.5, -1.5, -1.0, 0.0, 0.0, 1.0, 1.0,
                                          0.0,  0.5,  2.0,  5.0,  6.0, 6.0, 6.0, 6.0};
  const std::vector<double> expected_dx = {0.0,
                                           0.0,
                                           0.46687987446784973,
                                           0.28016242384910583,
                                           -0.007610725704580545,
                                           -0.2926386594772339,
                                           -0.47211065888404846,
                                           -0.4812904894351959,
                                           -0.316866934299469,
                                           -0.038148198276758194,
                                           0.25433072447776794,
                                           0.4550715684890747,
                                           0.4916662573814392,
                                           0.35091501474380493,
                                           0.08358731120824814,
                                           -0.0};
  SUBCASE("float qparams") {
    Tensor x = f32(xv).requires_grad_();
    Tensor y = fake_quantize_per_tensor(x, 0.5f, 3, 0, 15);
    check_close(y, expected_y, kExact);
    REQUIRE(y.grad_fn() != nullptr);
    CHECK(y.grad_fn()->name() == "FakeQuantizePerTensorBackward");
    y.backward(pat({16}, 7));
    check_close(x.grad(), expected_dx, kExact);
  }
  SUBCASE("tensor qparams, [] and [1], int32 and int64 zero points; they get no gradient") {
    for (bool scalar_shape : {true, false}) {
      Tensor x = f32(xv).requires_grad_();
      Tensor scale = scalar_shape ? scalar_tensor(0.5, kFloat32) : f32({0.5});
      Tensor zp = scalar_shape ? scalar_tensor(3, kInt64) : i32({3});
      scale.requires_grad_();
      Tensor y = fake_quantize_per_tensor(x, scale, zp, 0, 15);
      check_close(y, expected_y, kExact);
      y.backward(pat({16}, 7));
      check_close(x.grad(), expected_dx, kExact);
      CHECK_FALSE(scale.grad().defined());
    }
  }
}

TEST_CASE("fake_quantize_per_tensor matches torch bit for bit on a pattern, serial and parallel") {
  // for n, seed in [(1000, 1), (300001, 2)]:
  //     x = pat([n], seed, 3.0).requires_grad_()
  //     y = torch.fake_quantize_per_tensor_affine(x, 0.017, -5, -128, 127)
  //     dy = pat([n], seed + 10); y.backward(dy)
  //     ones = torch.autograd.grad(torch.fake_quantize_per_tensor_affine(x, 0.017, -5, -128, 127).sum(),
  //     x)[0] print(fp(y.detach()), int(ones.sum()), fp(x.grad))
  struct Case {
    int64_t n;
    double seed;
    uint64_t fp_y;
    int64_t inside;
    uint64_t fp_dx;
  };
  // 300001 elements are above the parallel grain: several threads, uneven chunk ends.
  for (const Case& c : {Case{1000, 1, 1066884789985617ull, 512, 801621959547289ull},
                        Case{300001, 2, 4004953134085822575ull, 155130, 17274188744433604023ull}}) {
    CAPTURE(c.n);
    Tensor x = pat({c.n}, c.seed, 3.0).requires_grad_();
    Tensor y = fake_quantize_per_tensor(x, 0.017f, -5, -128, 127);
    CHECK(fingerprint(y) == c.fp_y);
    y.backward(pat({c.n}, c.seed + 10));
    CHECK(fingerprint(x.grad()) == c.fp_dx);
    // The straight-through mask itself: the gradient of sum(y).
    Tensor x2 = pat({c.n}, c.seed, 3.0).requires_grad_();
    fake_quantize_per_tensor(x2, 0.017f, -5, -128, 127).sum().backward();
    CHECK(count_nonzero(x2.grad()) == c.inside);
    CHECK(values(x2.grad().sum())[0] == static_cast<double>(c.inside));
  }
}

TEST_CASE("fake_quantize_per_channel matches torch: conv weight along axis 0, activations along axis 1") {
  SUBCASE("conv weight [4, 3, 2, 2], axis 0, 4-bit range: clamps at both ends") {
    //   w = pat([4, 3, 2, 2], 3, 1.0).requires_grad_()
    //   y = torch.fake_quantize_per_channel_affine(w, torch.tensor([0.02, 0.05, 0.1, 0.013]),
    //           torch.tensor([0, 3, -4, 6], dtype=torch.int32), 0, -8, 7)
    //   y.backward(torch.ones_like(y))  -> y, w.grad (the mask)
    Tensor w = pat({4, 3, 2, 2}, 3, 1.0).requires_grad_();
    Tensor y = fake_quantize_per_channel(w, f32({0.02, 0.05, 0.1, 0.013}), i32({0, 3, -4, 6}), 0, -8, 7);
    CHECK(y.sizes() == w.sizes());
    check_close(y, {0.14000000059604645,  -0.1599999964237213,  -0.1599999964237213,
                    -0.1599999964237213,  -0.1599999964237213,  -0.1599999964237213,
                    0.14000000059604645,  0.14000000059604645,  0.14000000059604645,
                    0.14000000059604645,  0.14000000059604645,  -0.1599999964237213,
                    -0.550000011920929,   -0.550000011920929,   -0.550000011920929,
                    -0.4000000059604645,  0.20000000298023224,  0.20000000298023224,
                    0.20000000298023224,  0.20000000298023224,  0.20000000298023224,
                    -0.10000000149011612, -0.550000011920929,   -0.550000011920929,
                    -0.4000000059604645,  -0.4000000059604645,  0.0,
                    0.6000000238418579,   0.9000000357627869,   1.0,
                    0.6000000238418579,   0.10000000149011612,  -0.4000000059604645,
                    -0.4000000059604645,  -0.4000000059604645,  -0.4000000059604645,
                    -0.16899999976158142, 0.013000000268220901, 0.013000000268220901,
                    0.013000000268220901, 0.013000000268220901, 0.013000000268220901,
                    -0.18200001120567322, -0.18200001120567322, -0.18200001120567322,
                    -0.18200001120567322, -0.18200001120567322, 0.013000000268220901},
                kExact);
    y.backward(ones_like(y));
    check_close(w.grad(), {1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 0, 0,
                           0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
                kExact);
  }
  SUBCASE("activations [2, 3, 2, 2], axis 1") {
    //   a = pat([2, 3, 2, 2], 4, 1.0).requires_grad_()
    //   y = torch.fake_quantize_per_channel_affine(a, torch.tensor([0.1, 0.2, 0.05]),
    //           torch.tensor([0, -3, 5], dtype=torch.int32), 1, -8, 7)
    //   y.backward(torch.ones_like(y))
    Tensor a = pat({2, 3, 2, 2}, 4, 1.0).requires_grad_();
    Tensor y = fake_quantize_per_channel(a, f32({0.1, 0.2, 0.05}), i32({0, -3, 5}), 1, -8, 7);
    check_close(y,
                {-0.800000011920929,
                 -0.800000011920929,
                 -0.800000011920929,
                 -0.4000000059604645,
                 0.20000000298023224,
                 0.6000000238418579,
                 1.0,
                 1.0,
                 0.10000000149011612,
                 -0.05000000074505806,
                 -0.6500000357627869,
                 -0.6500000357627869,
                 -0.800000011920929,
                 -0.6000000238418579,
                 0.0,
                 0.6000000238418579,
                 1.0,
                 1.0,
                 0.6000000238418579,
                 0.20000000298023224,
                 -0.45000001788139343,
                 -0.6500000357627869,
                 -0.6500000357627869,
                 -0.6500000357627869},
                kExact);
    y.backward(ones_like(y));
    check_close(a.grad(), {1, 0, 0, 1, 1, 1, 1, 1, 0, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0}, kExact);
  }
  SUBCASE("channels last: [5, 3] along axis 1 (also written -1), int64 zero points") {
    //   c = pat([5, 3], 5, 1.0)
    //   y = torch.fake_quantize_per_channel_affine(c, torch.tensor([0.1, 0.2, 0.05]),
    //           torch.tensor([0, -3, 5], dtype=torch.int32), 1, -8, 7)
    const std::vector<double> expected = {-0.800000011920929,
                                          -0.6000000238418579,
                                          -0.05000000074505806,
                                          0.5,
                                          1.0,
                                          0.10000000149011612,
                                          0.699999988079071,
                                          0.20000000298023224,
                                          -0.45000001788139343,
                                          -0.800000011920929,
                                          -1.0,
                                          -0.6500000357627869,
                                          -0.20000000298023224,
                                          0.4000000059604645,
                                          0.10000000149011612};
    for (int64_t axis : {1, -1}) {
      Tensor y = fake_quantize_per_channel(pat({5, 3}, 5, 1.0), f32({0.1, 0.2, 0.05}),
                                           make({0, -3, 5}, kInt64), axis, -8, 7);
      check_close(y, expected, kExact);
    }
  }
  SUBCASE("large tensors (parallel chunks that start mid-channel), three layouts") {
    //   for shape, axis in [([20000, 16], 1), ([16, 20000], 0), ([8, 16, 50, 50], 1)]:
    //       x = pat(shape, 6, 2.0); C = shape[axis]
    //       s = torch.tensor([0.01 + 0.003 * k for k in range(C)])
    //       z = torch.tensor([(k * 7) % 21 - 10 for k in range(C)], dtype=torch.int32)
    //       print(fp(torch.fake_quantize_per_channel_affine(x, s, z, axis, -128, 127)))
    struct Case {
      std::vector<int64_t> shape;
      int64_t axis;
      uint64_t fp;
    };
    for (const Case& c :
         {Case{{20000, 16}, 1, 16706603492288481837ull}, Case{{16, 20000}, 0, 16581594722470799942ull},
          Case{{8, 16, 50, 50}, 1, 16694104826885626605ull}}) {
      CAPTURE(c.axis);
      const int64_t channels = c.shape[static_cast<size_t>(c.axis)];
      std::vector<double> s, z;
      for (int64_t k = 0; k < channels; ++k) {
        s.push_back(0.01 + 0.003 * static_cast<double>(k));
        z.push_back(static_cast<double>((k * 7) % 21 - 10));
      }
      Tensor y = fake_quantize_per_channel(pat(c.shape, 6, 2.0), f32(s), i32(z), c.axis, -128, 127);
      CHECK(fingerprint(y) == c.fp);
    }
  }
}

TEST_CASE("fake_quantize_learnable_per_tensor matches torch's values and scale/zero-point gradients") {
  //   for zp0, qmin, qmax in [(2.5, -8, 7), (-1.7, -8, 7), (3.2, 0, 15)]:
  //       x = pat([2, 3, 4], 8, 2.0).requires_grad_()
  //       s = torch.tensor([0.1], requires_grad=True); z = torch.tensor([zp0], requires_grad=True)
  //       gf = 1.0 / math.sqrt(24 * qmax)
  //       y = torch._fake_quantize_learnable_per_tensor_affine(x, s, z, qmin, qmax, gf)
  //       y.backward(pat([2, 3, 4], 9))  -> y, x.grad, s.grad, z.grad
  // zp 2.5 runs forward with 2 and backward with 3 (torch truncates zp + 0.5 there); -1.7 with
  // -2 and -1; both clamp at both ends of [-8, 7].
  struct Case {
    double zp;
    int64_t qmin, qmax;
    std::vector<double> y, dx;
    double dscale, dzp;
  };
  const std::vector<Case> cases = {
      {2.5,
       -8,
       7,
       {0.5,
        0.5,
        0.4000000059604645,
        -0.800000011920929,
        -1.0,
        -1.0,
        -1.0,
        -0.6000000238418579,
        0.5,
        0.5,
        0.5,
        0.5,
        0.5,
        -0.4000000059604645,
        -1.0,
        -1.0,
        -1.0,
        -0.9000000357627869,
        0.30000001192092896,
        0.5,
        0.5,
        0.5,
        0.5,
        -0.10000000149011612},
       {0.0,
        -0.0,
        -0.35700953006744385,
        -0.4931619465351105,
        -0.0,
        -0.0,
        0.0,
        0.32349467277526855,
        0.0,
        0.0,
        0.0,
        -0.0,
        -0.0,
        -0.46989867091178894,
        -0.0,
        -0.0,
        -0.0,
        0.24863272905349731,
        0.4523007869720459,
        0.0,
        0.0,
        0.0,
        -0.0,
        -0.430911123752594},
       1.841192364692688,
       -0.002263444708660245},
      {-1.7,
       -8,
       7,
       {0.9000000357627869,  0.9000000357627869,  0.4000000059604645,  -0.6000000238418579,
        -0.6000000238418579, -0.6000000238418579, -0.6000000238418579, -0.6000000238418579,
        0.6000000238418579,  0.9000000357627869,  0.9000000357627869,  0.9000000357627869,
        0.800000011920929,   -0.4000000059604645, -0.6000000238418579, -0.6000000238418579,
        -0.6000000238418579, -0.6000000238418579, 0.30000001192092896, 0.9000000357627869,
        0.9000000357627869,  0.9000000357627869,  0.9000000357627869,  -0.10000000149011612},
       {0.0,
        -0.0,
        -0.35700953006744385,
        -0.0,
        -0.0,
        -0.0,
        0.0,
        0.32349467277526855,
        0.48355722427368164,
        0.0,
        0.0,
        -0.0,
        -0.2872678339481354,
        -0.46989867091178894,
        -0.0,
        -0.0,
        -0.0,
        0.0,
        0.4523007869720459,
        0.0,
        0.0,
        0.0,
        -0.0,
        -0.430911123752594},
       1.917905330657959,
       0.0011375450994819403},
      {3.2,
       0,
       15,
       {1.2000000476837158,   1.2000000476837158,   0.4000000059604645,   -0.30000001192092896,
        -0.30000001192092896, -0.30000001192092896, -0.30000001192092896, -0.30000001192092896,
        0.6000000238418579,   1.2000000476837158,   1.2000000476837158,   1.2000000476837158,
        0.800000011920929,    -0.30000001192092896, -0.30000001192092896, -0.30000001192092896,
        -0.30000001192092896, -0.30000001192092896, 0.30000001192092896,  1.2000000476837158,
        1.2000000476837158,   1.2000000476837158,   1.100000023841858,    -0.10000000149011612},
       {0.0,
        -0.0,
        -0.35700953006744385,
        -0.0,
        -0.0,
        -0.0,
        0.0,
        0.0,
        0.48355722427368164,
        0.0,
        0.0,
        -0.0,
        -0.2872678339481354,
        -0.0,
        -0.0,
        -0.0,
        -0.0,
        0.0,
        0.4523007869720459,
        0.0,
        0.0,
        0.0,
        -0.20791324973106384,
        -0.430911123752594},
       1.4444032907485962,
       0.00045290938578546047},
  };
  for (const Case& c : cases) {
    CAPTURE(c.zp);
    Tensor x = pat({2, 3, 4}, 8, 2.0).requires_grad_();
    Tensor scale = f32({0.1}).requires_grad_();
    Tensor zp = f32({c.zp}).requires_grad_();
    const double grad_factor = 1.0 / std::sqrt(24.0 * static_cast<double>(c.qmax));
    Tensor y = fake_quantize_learnable_per_tensor(x, scale, zp, c.qmin, c.qmax, grad_factor);
    check_close(y, c.y, kExact);
    REQUIRE(y.grad_fn() != nullptr);
    CHECK(y.grad_fn()->name() == "FakeQuantizeLearnablePerTensorBackward");
    y.backward(pat({2, 3, 4}, 9));
    check_close(x.grad(), c.dx, kExact);
    REQUIRE(scale.grad().sizes() == IntArrayRef{1});
    check_close(scale.grad(), {c.dscale}, kSumTol);
    check_close(zp.grad(), {c.dzp}, kSumTol);
  }
  // 0-dim parameters get 0-dim gradients (the first case again).
  Tensor x = pat({2, 3, 4}, 8, 2.0);
  Tensor scale = scalar_tensor(0.1, kFloat32).requires_grad_();
  Tensor zp = scalar_tensor(2.5, kFloat32).requires_grad_();
  fake_quantize_learnable_per_tensor(x, scale, zp, -8, 7, 1.0 / std::sqrt(24.0 * 7))
      .backward(pat({2, 3, 4}, 9));
  CHECK(scale.grad().dim() == 0);
  check_close(scale.grad(), {cases[0].dscale}, kSumTol);
  check_close(zp.grad(), {cases[0].dzp}, kSumTol);
}

TEST_CASE("fake_quantize_learnable_per_channel matches torch's values and gradients") {
  SUBCASE("conv weight [4, 3, 2, 2] along axis 0, grad_factor 0.3") {
    //   w = pat([4, 3, 2, 2], 10, 1.0).requires_grad_()
    //   s = torch.tensor([0.05, 0.1, 0.2, 0.03], requires_grad=True)
    //   z = torch.tensor([0.4, 2.5, -1.5, 3.6], requires_grad=True)
    //   y = torch._fake_quantize_learnable_per_channel_affine(w, s, z, 0, -8, 7, 0.3)
    //   y.backward(pat([4, 3, 2, 2], 11))
    Tensor w = pat({4, 3, 2, 2}, 10, 1.0).requires_grad_();
    Tensor s = f32({0.05, 0.1, 0.2, 0.03}).requires_grad_();
    Tensor z = f32({0.4, 2.5, -1.5, 3.6}).requires_grad_();
    Tensor y = fake_quantize_learnable_per_channel(w, s, z, 0, -8, 7, 0.3);
    check_close(y,
                {-0.4000000059604645,
                 -0.4000000059604645,
                 -0.4000000059604645,
                 -0.4000000059604645,
                 -0.15000000596046448,
                 0.3499999940395355,
                 0.3499999940395355,
                 0.3499999940395355,
                 0.3499999940395355,
                 0.20000000298023224,
                 -0.4000000059604645,
                 -0.4000000059604645,
                 -1.0,
                 -0.800000011920929,
                 -0.30000001192092896,
                 0.30000001192092896,
                 0.5,
                 0.5,
                 0.5,
                 0.4000000059604645,
                 -0.20000000298023224,
                 -0.699999988079071,
                 -1.0,
                 -0.9000000357627869,
                 -0.4000000059604645,
                 0.20000000298023224,
                 0.6000000238418579,
                 1.0,
                 1.0,
                 0.6000000238418579,
                 0.0,
                 -0.6000000238418579,
                 -1.0,
                 -1.0,
                 -0.6000000238418579,
                 0.0,
                 0.08999999612569809,
                 0.08999999612569809,
                 0.08999999612569809,
                 0.08999999612569809,
                 0.08999999612569809,
                 -0.35999998450279236,
                 -0.35999998450279236,
                 -0.35999998450279236,
                 -0.35999998450279236,
                 -0.23999999463558197,
                 0.08999999612569809,
                 0.08999999612569809},
                kExact);
    y.backward(pat({4, 3, 2, 2}, 11));
    check_close(w.grad(),
                {-0.0,
                 -0.0,
                 -0.0,
                 0.0,
                 0.38333210349082947,
                 0.0,
                 0.0,
                 0.0,
                 -0.0,
                 -0.3523629605770111,
                 -0.4920324981212616,
                 -0.0,
                 -0.2525750696659088,
                 0.04017867147922516,
                 0.3184398114681244,
                 0.4818384349346161,
                 0.0,
                 0.0,
                 0.0,
                 -0.2818470597267151,
                 -0.46760496497154236,
                 -0.4846958816051483,
                 -0.32695508003234863,
                 -0.05128028616309166,
                 0.24289150536060333,
                 0.44945138692855835,
                 0.4938923418521881,
                 0.3601844012737274,
                 0.09655649960041046,
                 -0.2018997073173523,
                 -0.427529901266098,
                 -0.498948335647583,
                 -0.3903941512107849,
                 -0.14102324843406677,
                 0.1592153012752533,
                 0.4020242691040039,
                 0.0,
                 0.0,
                 0.0,
                 -0.0,
                 -0.0,
                 -0.0,
                 -0.0,
                 -0.0,
                 0.0,
                 0.3411441743373871,
                 0.0,
                 0.0},
                kExact);
    check_close(s.grad(), {5.618770599365234, 1.110898733139038, 0.11801354587078094, 5.363905429840088},
                kSumTol);
    check_close(z.grad(), {0.005166936665773392, -0.02303985133767128, 0.0, -0.004225892946124077}, kSumTol);
  }
  SUBCASE("channels last: [6, 3] along axis 1") {
    //   c = pat([6, 3], 12, 1.0).requires_grad_()
    //   s = torch.tensor([0.05, 0.1, 0.2], requires_grad=True)
    //   z = torch.tensor([0.4, 2.5, -1.5], requires_grad=True)
    //   y = torch._fake_quantize_learnable_per_channel_affine(c, s, z, 1, -8, 7, 1.0)
    //   y.backward(pat([6, 3], 13))
    Tensor c = pat({6, 3}, 12, 1.0).requires_grad_();
    Tensor s = f32({0.05, 0.1, 0.2}).requires_grad_();
    Tensor z = f32({0.4, 2.5, -1.5}).requires_grad_();
    Tensor y = fake_quantize_learnable_per_channel(c, s, z, 1, -8, 7);
    check_close(
        y,
        {-0.4000000059604645, 0.0, 0.6000000238418579, 0.3499999940395355, 0.5, 0.6000000238418579,
         0.05000000074505806, -0.5, -1.0, -0.4000000059604645, -0.699999988079071, -0.20000000298023224,
         0.3499999940395355, 0.5, 1.0, 0.3499999940395355, 0.20000000298023224, -0.4000000059604645},
        kExact);
    y.backward(pat({6, 3}, 13));
    check_close(
        c.grad(),
        {0.0, 0.43211790919303894, 0.4982856512069702, 0.0, 0.0, -0.1677032709121704, -0.407299280166626,
         -0.4999808073043823, -0.41231730580329895, -0.0, 0.1239171028137207, 0.3790661096572876, 0.0, 0.0,
         0.21799974143505096, -0.0, -0.34765511751174927, -0.4908175468444824},
        kExact);
    check_close(s.grad(), {5.331810474395752, 2.569190263748169, 0.11763918399810791}, kSumTol);
    check_close(z.grad(), {-0.04186331853270531, -0.056884218007326126, 0.0}, kSumTol);
  }
}

TEST_CASE("learnable fake quantization on large tensors: parallel chunks, sums against torch") {
  SUBCASE("per tensor, 300001 elements") {
    //   x = pat([300001], 14, 3.0).requires_grad_()
    //   s = torch.tensor([0.02], requires_grad=True); z = torch.tensor([4.3], requires_grad=True)
    //   y = torch._fake_quantize_learnable_per_tensor_affine(x, s, z, -128, 127, 0.01)
    //   y.backward(pat([300001], 15))
    //   print(fp(y.detach()), fp(x.grad), s.grad, z.grad)
    Tensor x = pat({300001}, 14, 3.0).requires_grad_();
    Tensor s = f32({0.02}).requires_grad_();
    Tensor z = f32({4.3}).requires_grad_();
    Tensor y = fake_quantize_learnable_per_tensor(x, s, z, -128, 127, 0.01);
    CHECK(fingerprint(y) == 4002896252205209236ull);
    y.backward(pat({300001}, 15));
    CHECK(fingerprint(x.grad()) == 5359029291810630828ull);
    // Sums of ~1.5e5 float32 terms: torch's float32 summation is itself ~1e-6 relative off.
    check_close(s.grad(), {33971.91015625}, Tol{2e-6, 0});
    // The zero-point terms (+-dy * scale * grad_factor, |terms| ~ 1e-4) cancel to -0.51.
    check_close(z.grad(), {-0.5101318359375}, Tol{0, 2e-5});
  }
  SUBCASE("per channel, [16, 3000, 7] along axis 1") {
    //   x = pat([16, 3000, 7], 16, 3.0).requires_grad_()
    //   s = torch.tensor([0.01 + 0.002 * k for k in range(3000)], requires_grad=True)
    //   z = torch.tensor([((k * 7) % 21 - 10) * 0.9 for k in range(3000)], requires_grad=True)
    //   y = torch._fake_quantize_learnable_per_channel_affine(x, s, z, 1, -128, 127, 0.01)
    //   y.backward(pat([16, 3000, 7], 17))
    //   print(fp(y.detach()), fp(x.grad), s.grad.double().sum(), z.grad.double().sum(),
    //         s.grad[:4], z.grad[:4], s.grad[2997:], z.grad[2997:])
    std::vector<double> sv, zv;
    for (int k = 0; k < 3000; ++k) {
      sv.push_back(0.01 + 0.002 * k);
      zv.push_back(((k * 7) % 21 - 10) * 0.9);
    }
    Tensor x = pat({16, 3000, 7}, 16, 3.0).requires_grad_();
    Tensor s = f32(sv).requires_grad_();
    Tensor z = f32(zv).requires_grad_();
    Tensor y = fake_quantize_learnable_per_channel(x, s, z, 1, -128, 127, 0.01);
    CHECK(fingerprint(y) == 2265384174282902298ull);
    y.backward(pat({16, 3000, 7}, 17));
    CHECK(fingerprint(x.grad()) == 9035474906510326826ull);
    check_close(s.grad().to(kFloat64).sum(), {131.328666993737}, Tol{1e-6, 0});
    check_close(z.grad().to(kFloat64).sum(), {0.0011447258766565938}, Tol{0, 1e-8});
    check_close(s.grad().slice(0, 0, 4),
                {22.05059242248535, 21.205890655517578, 20.143009185791016, 18.77031898498535}, kSumTol);
    check_close(
        z.grad().slice(0, 0, 4),
        {0.00023443799000233412, -1.2190823326818645e-05, -0.00011183648894075304, 0.0002518222318030894},
        kSumTol);
    check_close(s.grad().slice(0, 2997), {-0.07450802624225616, -0.07585233449935913, -0.07626309990882874},
                kSumTol);
    check_close(z.grad().slice(0, 2997), {0.0, 0.0, 0.0}, kExact);
  }
}

TEST_CASE("fake quantization without recording: no-grad mode, inputs that need no gradient") {
  Tensor x = pat({4, 3, 2, 2}, 3, 1.0).requires_grad_();
  Tensor recorded = fake_quantize_per_tensor(x, 0.05f, 2, -8, 7);
  Tensor s = f32({0.05}).requires_grad_(), z = f32({2.0}).requires_grad_();
  {
    NoGradGuard no_grad;
    Tensor y = fake_quantize_per_tensor(x, 0.05f, 2, -8, 7);
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
    check_close(y, values(recorded), kExact);
    Tensor yl = fake_quantize_learnable_per_tensor(x, s, z, -8, 7);
    CHECK(yl.grad_fn() == nullptr);
    check_close(yl, values(recorded), kExact);  // zero point 2.0 rounds to 2
    CHECK(fake_quantize_per_channel(x, f32({0.1, 0.1, 0.1, 0.1}), i32({0, 0, 0, 0}), 0, -8, 7).grad_fn() ==
          nullptr);
  }
  Tensor plain = x.detach();
  CHECK(fake_quantize_per_tensor(plain, 0.05f, 2, -8, 7).grad_fn() == nullptr);
  // Learnable: a node as soon as any of x, scale, zero_point needs a gradient; only those get one.
  // Their values do not depend on whether x needs one too.
  Tensor yl = fake_quantize_learnable_per_tensor(plain, s, f32({2.0}), -8, 7);
  REQUIRE(yl.grad_fn() != nullptr);
  yl.sum().backward();
  REQUIRE(s.grad().defined());
  Tensor s2 = f32({0.05}).requires_grad_();
  fake_quantize_learnable_per_tensor(x, s2, f32({2.0}), -8, 7).sum().backward();
  check_close(s.grad(), values(s2.grad()), kExact);
  CHECK(values(s.grad())[0] != 0.0);
  Tensor sc = f32({0.1, 0.2, 0.05, 0.3}).requires_grad_(), sc2 = f32({0.1, 0.2, 0.05, 0.3}).requires_grad_();
  fake_quantize_learnable_per_channel(plain, sc, f32({0, 1, 2, 3}), 0, -8, 7).sum().backward();
  fake_quantize_learnable_per_channel(x, sc2, f32({0, 1, 2, 3}), 0, -8, 7).sum().backward();
  check_close(sc.grad(), values(sc2.grad()), kExact);
  CHECK(fake_quantize_learnable_per_tensor(plain, f32({0.05}), f32({2.0}), -8, 7).grad_fn() == nullptr);
}

TEST_CASE("fake quantization of empty tensors") {
  Tensor x = empty({0, 3}, kFloat32).requires_grad_();
  Tensor y = fake_quantize_per_channel(x, f32({0.1, 0.1, 0.1}), i32({0, 0, 0}), 1, -8, 7);
  CHECK(y.sizes() == x.sizes());
  Tensor s = f32({0.1}).requires_grad_();
  Tensor yl = fake_quantize_learnable_per_tensor(x, s, f32({0}), -8, 7);
  CHECK(yl.numel() == 0);
  yl.sum().backward();
  check_close(s.grad(), {0.0}, kExact);
  CHECK(x.grad().sizes() == x.sizes());
}

TEST_CASE("fake quantization of non-contiguous inputs and with non-contiguous gradients") {
  // x^T's values in row-major order equal those of the contiguous copy.
  Tensor base = pat({3, 4}, 21, 1.0).requires_grad_();
  Tensor xt = base.t();
  REQUIRE_FALSE(xt.is_contiguous());
  Tensor y = fake_quantize_per_channel(xt, f32({0.1, 0.05, 0.2, 0.02}), i32({0, 1, -1, 3}), 0, -8, 7);
  Tensor expected = fake_quantize_per_channel(xt.detach().contiguous(), f32({0.1, 0.05, 0.2, 0.02}),
                                              i32({0, 1, -1, 3}), 0, -8, 7);
  check_close(y, values(expected), kExact);
  // sum()'s backward hands over an expanded (stride-0) gradient; the gradient lands in base's
  // layout, transposed back.
  y.sum().backward();
  Tensor mask_t = fake_quantize_per_channel(xt.detach().contiguous().requires_grad_(),
                                            f32({0.1, 0.05, 0.2, 0.02}), i32({0, 1, -1, 3}), 0, -8, 7);
  CHECK(base.grad().sizes() == base.sizes());
  const std::vector<double> g = values(base.grad());
  const std::vector<double> xv = values(base.detach());
  const std::vector<double> yv = values(expected.t().contiguous());
  for (size_t i = 0; i < g.size(); ++i) {
    // Inside the range the fake-quantized value is within half a step of x; the clamped ones
    // are the values with gradient 0.
    CAPTURE(i);
    CHECK((g[i] == 1.0 || g[i] == 0.0));
    if (g[i] == 1.0) CHECK(std::abs(yv[i] - xv[i]) <= 0.1 + 1e-7);
  }
  CHECK(count_nonzero(base.grad()) > 0);
  CHECK(count_nonzero(base.grad()) < base.numel());
}

TEST_CASE("fake quantization backward: saved tensors, second backward, create_graph") {
  SUBCASE("a second backward without retain_graph throws; with it, gradients accumulate") {
    Tensor x = pat({8}, 22, 1.0).requires_grad_();
    Tensor y = fake_quantize_per_tensor(x, 0.1f, 0, -4, 3);
    y.sum().backward({}, true);
    Tensor first = x.grad().clone();
    y.sum().backward();
    check_close(x.grad(), values(first * 2.0), kExact);
    CHECK_THROWS_WITH_AS(y.sum().backward(), doctest::Contains("second time"), Error);
  }
  SUBCASE("a scale modified in place between forward and backward is detected") {
    Tensor x = pat({8}, 22, 1.0).requires_grad_();
    Tensor s = f32({0.1}).requires_grad_();
    Tensor y = fake_quantize_learnable_per_tensor(x, s, f32({0.0}), -4, 3);
    {
      NoGradGuard no_grad;
      s.mul_(2.0);
    }
    CHECK_THROWS_WITH_AS(y.sum().backward(), doctest::Contains("modified by an inplace operation"), Error);
  }
  SUBCASE("create_graph: the straight-through gradient is differentiable in the incoming gradient") {
    // d(sum(x.grad))/d(g) = mask, since x.grad = g * mask.
    Tensor x = pat({8}, 22, 1.0).requires_grad_();
    Tensor y = fake_quantize_per_tensor(x, 0.1f, 0, -4, 3);
    Tensor g = pat({8}, 23, 1.0).requires_grad_();
    y.backward(g, true, true);
    REQUIRE(x.grad().requires_grad());
    Tensor mask = x.grad().detach().ne(0.0).to(kFloat32);
    x.grad().sum().backward();
    check_close(g.grad(), values(mask), kExact);
    CHECK(count_nonzero(mask) > 0);
    CHECK(count_nonzero(mask) < 8);
  }
  SUBCASE("create_graph through the learnable backward throws (torch has no double backward there either)") {
    Tensor x = pat({8}, 22, 1.0).requires_grad_();
    Tensor y = fake_quantize_learnable_per_tensor(x, f32({0.1}).requires_grad_(), f32({0.0}), -4, 3);
    Tensor g = pat({8}, 23, 1.0).requires_grad_();
    CHECK_THROWS_WITH_AS(y.backward(g, true, true), doctest::Contains("second derivative"), Error);
  }
}

TEST_CASE("fake quantization rejects bad input with messages that name the function and the value") {
  const Tensor x = pat({4, 3}, 1, 1.0);
  SUBCASE("scale <= 0, NaN, infinite, or with an infinite reciprocal") {
    CHECK_THROWS_WITH_AS(fake_quantize_per_tensor(x, 0.0f, 0, -128, 127),
                         doctest::Contains("fake_quantize_per_tensor: scale must be positive"), Error);
    CHECK_THROWS_WITH_AS(fake_quantize_per_tensor(x, -0.5f, 0, -128, 127), doctest::Contains("got -0.5"),
                         Error);
    CHECK_THROWS_AS(fake_quantize_per_tensor(x, NAN, 0, -128, 127), Error);
    CHECK_THROWS_AS(fake_quantize_per_tensor(x, INFINITY, 0, -128, 127), Error);
    CHECK_THROWS_AS(fake_quantize_per_tensor(x, 1e-40f, 0, -128, 127), Error);  // 1 / 1e-40f overflows
    CHECK_THROWS_WITH_AS(
        fake_quantize_per_channel(x, f32({0.1, -0.1, 0.1, 0.1}), i32({0, 0, 0, 0}), 0, -128, 127),
        doctest::Contains("scale[1] must be positive"), Error);
    CHECK_THROWS_WITH_AS(fake_quantize_learnable_per_tensor(x, f32({0.0}), f32({0.0}), -128, 127),
                         doctest::Contains("fake_quantize_learnable_per_tensor: scale must be positive"),
                         Error);
    CHECK_THROWS_WITH_AS(
        fake_quantize_learnable_per_channel(x, f32({0.1, 0.1, 0.0}), f32({0, 0, 0}), 1, -128, 127),
        doctest::Contains("scale[2] must be positive"), Error);
  }
  SUBCASE("quant_min >= quant_max, a range too wide for float32, a learnable range without 0") {
    CHECK_THROWS_WITH_AS(
        fake_quantize_per_tensor(x, 0.1f, 0, 5, 5),
        doctest::Contains("expected quant_min < quant_max, got quant_min = 5, quant_max = 5"), Error);
    CHECK_THROWS_WITH_AS(fake_quantize_per_channel(x, f32({0.1, 0.1, 0.1}), i32({0, 0, 0}), 1, 127, -128),
                         doctest::Contains("fake_quantize_per_channel: expected quant_min < quant_max"),
                         Error);
    CHECK_THROWS_WITH_AS(fake_quantize_per_tensor(x, 0.1f, 0, 0, int64_t{1} << 31),
                         doctest::Contains("must lie in [-8388608, 8388608]"), Error);
    CHECK_THROWS_WITH_AS(fake_quantize_learnable_per_tensor(x, f32({0.1}), f32({3.0}), 1, 255),
                         doctest::Contains("must contain 0"), Error);
  }
  SUBCASE("zero point outside [quant_min, quant_max] (non-learnable), or not finite (learnable)") {
    CHECK_THROWS_WITH_AS(fake_quantize_per_tensor(x, 0.1f, 300, 0, 255),
                         doctest::Contains("zero_point = 300 is outside [quant_min, quant_max] = [0, 255]"),
                         Error);
    CHECK_THROWS_WITH_AS(fake_quantize_per_tensor(x, f32({0.1}), make({-1}, kInt64), 0, 255),
                         doctest::Contains("zero_point = -1 is outside"), Error);
    CHECK_THROWS_WITH_AS(fake_quantize_per_channel(x, f32({0.1, 0.1, 0.1}), i32({0, 0, -9}), 1, -8, 7),
                         doctest::Contains("zero_point[2] = -9 is outside [quant_min, quant_max] = [-8, 7]"),
                         Error);
    CHECK_THROWS_WITH_AS(fake_quantize_learnable_per_tensor(x, f32({0.1}), f32({NAN}), -8, 7),
                         doctest::Contains("zero_point must be finite"), Error);
    // A learnable zero point outside the range is clamped (as in torch), not an error.
    check_close(fake_quantize_learnable_per_tensor(x, f32({0.1}), f32({40.0}), -8, 7),
                values(fake_quantize_per_tensor(x, 0.1f, 7, -8, 7)), kExact);
  }
  SUBCASE("channel count mismatch, axis out of range, 0-dim input") {
    CHECK_THROWS_WITH_AS(fake_quantize_per_channel(x, f32({0.1, 0.1, 0.1}), i32({0, 0, 0}), 0, -8, 7),
                         doctest::Contains("expected scale of shape [4] (x.size(0)), got [3]"), Error);
    CHECK_THROWS_WITH_AS(fake_quantize_per_channel(x, f32({0.1, 0.1, 0.1}), i32({0, 0}), 1, -8, 7),
                         doctest::Contains("expected zero_point of shape [3] (x.size(1)), got [2]"), Error);
    CHECK_THROWS_WITH_AS(
        fake_quantize_learnable_per_channel(x, f32({0.1, 0.1, 0.1, 0.1}), f32({0, 0, 0}), 0, -8, 7),
        doctest::Contains("expected zero_point of shape [4]"), Error);
    CHECK_THROWS_WITH_AS(
        fake_quantize_per_channel(x, f32({0.1, 0.1, 0.1}), i32({0, 0, 0}), 2, -8, 7),
        doctest::Contains("fake_quantize_per_channel: axis 2 is out of range for x of shape [4, 3]"), Error);
    CHECK_THROWS_WITH_AS(fake_quantize_learnable_per_channel(x, f32({0.1}), f32({0}), -3, -8, 7),
                         doctest::Contains("axis -3 is out of range"), Error);
    CHECK_THROWS_WITH_AS(
        fake_quantize_per_channel(scalar_tensor(1.0, kFloat32), f32({0.1}), i32({0}), 0, -8, 7),
        doctest::Contains("at least one dimension"), Error);
  }
  SUBCASE("wrong dtypes and shapes") {
    CHECK_THROWS_WITH_AS(fake_quantize_per_tensor(make({1, 2}, kInt32), 0.1f, 0, -8, 7),
                         doctest::Contains("fake_quantize_per_tensor: expected a float32 x, got int32"),
                         Error);
    CHECK_THROWS_WITH_AS(
        fake_quantize_per_channel(make({1, 2}, kFloat64), f32({0.1, 0.1}), i32({0, 0}), 0, -8, 7),
        doctest::Contains("expected a float32 x, got float64"), Error);
    CHECK_THROWS_WITH_AS(
        fake_quantize_learnable_per_tensor(make({1, 2}, kFloat16), f32({0.1}), f32({0}), -8, 7),
        doctest::Contains("expected a float32 x, got float16"), Error);
    CHECK_THROWS_WITH_AS(fake_quantize_per_tensor(x, make({0.1}, kFloat64), i32({0}), -8, 7),
                         doctest::Contains("expected a float32 scale, got float64"), Error);
    CHECK_THROWS_WITH_AS(fake_quantize_per_tensor(x, f32({0.1}), f32({0}), -8, 7),
                         doctest::Contains("expected an int32 or int64 zero_point, got float32"), Error);
    CHECK_THROWS_WITH_AS(fake_quantize_per_tensor(x, f32({0.1, 0.2}), i32({0}), -8, 7),
                         doctest::Contains("expected a one-element scale ([] or [1]), got shape [2]"), Error);
    CHECK_THROWS_WITH_AS(
        fake_quantize_learnable_per_tensor(x, f32({0.1}), i32({0}), -8, 7),
        doctest::Contains("expected a float32 zero_point (a learnable parameter), got int32"), Error);
    CHECK_THROWS_WITH_AS(fake_quantize_per_tensor(Tensor(), 0.1f, 0, -8, 7), doctest::Contains("undefined"),
                         Error);
  }
}

