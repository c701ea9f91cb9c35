/*
 * Tests of quantization parameters: the integer ranges, choose_qparams against
 * torch.ao.quantization's observers (PyTorch 1.13), quantize / dequantize against
 * torch.quantize_per_tensor / quantize_per_channel (ties, clamping, non-contiguous input), the
 * round-trip error bound, and the errors on bad input.
 *
 * Inputs are deterministic patterns both sides compute:
 *
 *   import math, torch
 *   def pat(shape, seed, scale=0.5):
 *       n = math.prod(shape)
 *       return torch.tensor([math.sin(seed + 0.61 * i) * scale for i in range(n)],
 *                           dtype=torch.float64).reshape(shape).float()
 */
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <string>
#include <vector>

#include "quant/qparams.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::quant;
using namespace loom::test;

namespace {

struct Expected {
  float scale;
  int32_t zero_point;
};

// The (min, max) pairs of the torch comparison: a mixed range, one above zero, one below, the
// empty range (scale falls back to eps), a huge one, a symmetric one and a tiny one.
const std::vector<std::pair<float, float>> kRanges = {{-1.3f, 2.7f},  {0.5f, 3.0f},       {-5.0f, -1.0f},
                                                      {0.0f, 0.0f},   {-0.001f, 1000.0f}, {-3.7f, 3.7f},
                                                      {-0.25f, 0.01f}};

void check_against(DType dtype, bool symmetric, bool reduce_range, const std::vector<Expected>& expected) {
  REQUIRE(expected.size() == kRanges.size());
  for (size_t k = 0; k < kRanges.size(); ++k) {
    CAPTURE(k);
    const QParams qp = choose_qparams(kRanges[k].first, kRanges[k].second, dtype, symmetric, reduce_range);
    CHECK(qp.axis == -1);
    CHECK(qp.dtype == dtype);
    CHECK(qp.scale.dtype() == kFloat32);
    CHECK(qp.zero_point.dtype() == kInt32);
    CHECK(qp.scale.sizes() == IntArrayRef{1});
    // torch computes in float32 too: the same float, give or take the last bit of a division.
    CHECK(qp.scale_at(0) == doctest::Approx(expected[k].scale).epsilon(1e-6));
    CHECK(qp.zero_point_at(0) == expected[k].zero_point);
  }
}

std::vector<int64_t> ints(const Tensor& t) {
  return t.to_vector<int64_t>();
}

}  // namespace

TEST_CASE("quant_range: 8-bit ranges, reduce_range and fewer bits") {
  CHECK(quant_range(kUInt8) == std::pair<int64_t, int64_t>{0, 255});
  CHECK(quant_range(kInt8) == std::pair<int64_t, int64_t>{-128, 127});
  CHECK(quant_range(kUInt8, true) == std::pair<int64_t, int64_t>{0, 127});
  CHECK(quant_range(kInt8, true) == std::pair<int64_t, int64_t>{-64, 63});
  CHECK(quant_range(kUInt8, false, 4) == std::pair<int64_t, int64_t>{0, 15});
  CHECK(quant_range(kInt8, false, 4) == std::pair<int64_t, int64_t>{-8, 7});
  CHECK(quant_range(kInt8, true, 4) == std::pair<int64_t, int64_t>{-4, 3});
  CHECK_THROWS_WITH_AS(quant_range(kInt32),
                       doctest::Contains("quant_range: expected uint8 or int8, got int32"), Error);
  CHECK_THROWS_WITH_AS(quant_range(kUInt8, false, 9), doctest::Contains("expected 2 to 8 bits, got 9"),
                       Error);
  CHECK_THROWS_WITH_AS(quant_range(kUInt8, true, 2), doctest::Contains("fewer than 2 bits"), Error);
}

// Python: o = MinMaxObserver(dtype=..., qscheme=..., reduce_range=...);
//         o.min_val = torch.tensor(lo); o.max_val = torch.tensor(hi); o.calculate_qparams()
TEST_CASE("choose_qparams: per-tensor affine and symmetric match torch's MinMaxObserver") {
  SUBCASE("u8 affine") {
    check_against(kUInt8, false, false,
                  {{0.0156862754f, 83},
                   {0.0117647061f, 0},
                   {0.0196078438f, 255},
                   {1.1920929e-07f, 0},
                   {3.92157245f, 0},
                   {0.0290196091f, 127},
                   {0.00101960776f, 245}});
  }
  SUBCASE("u8 affine, reduce_range") {
    check_against(kUInt8, false, true,
                  {{0.0314960629f, 41},
                   {0.0236220472f, 0},
                   {0.0393700786f, 127},
                   {1.1920929e-07f, 0},
                   {7.87402344f, 0},
                   {0.0582677163f, 64},
                   {0.00204724399f, 122}});
  }
  SUBCASE("u8 symmetric") {
    check_against(kUInt8, true, false,
                  {{0.0211764704f, 128},
                   {0.0235294122f, 128},
                   {0.0392156877f, 128},
                   {1.1920929e-07f, 128},
                   {7.84313726f, 128},
                   {0.0290196091f, 128},
                   {0.00196078443f, 128}});
  }
  SUBCASE("s8 affine") {
    check_against(kInt8, false, false,
                  {{0.0156862754f, -45},
                   {0.0117647061f, -128},
                   {0.0196078438f, 127},
                   {1.1920929e-07f, -128},
                   {3.92157245f, -128},
                   {0.0290196091f, -1},
                   {0.00101960776f, 117}});
  }
  SUBCASE("s8 affine, reduce_range") {
    check_against(kInt8, false, true,
                  {{0.0314960629f, -23},
                   {0.0236220472f, -64},
                   {0.0393700786f, 63},
                   {1.1920929e-07f, -64},
                   {7.87402344f, -64},
                   {0.0582677163f, 0},
                   {0.00204724399f, 58}});
  }
  SUBCASE("s8 symmetric") {
    check_against(kInt8, true, false,
                  {{0.0211764704f, 0},
                   {0.0235294122f, 0},
                   {0.0392156877f, 0},
                   {1.1920929e-07f, 0},
                   {7.84313726f, 0},
                   {0.0290196091f, 0},
                   {0.00196078443f, 0}});
  }
  SUBCASE("s8 symmetric, reduce_range") {
    check_against(kInt8, true, true,
                  {{0.0425196849f, 0},
                   {0.0472440943f, 0},
                   {0.0787401572f, 0},
                   {1.1920929e-07f, 0},
                   {15.7480316f, 0},
                   {0.0582677163f, 0},
                   {0.00393700786f, 0}});
  }
}

TEST_CASE("choose_qparams: u8 symmetric with a reduced range puts zero in its middle") {
  // torch keeps zero_point 128 here although quant_max is 127 (every positive value would clamp).
  const QParams qp = choose_qparams(-1.0f, 2.0f, kUInt8, true, true);
  CHECK(qp.zero_point_at(0) == 64);
  CHECK(qp.scale_at(0) == doctest::Approx(2.0 / 63.5).epsilon(1e-6));
  CHECK(qp.quant_min == 0);
  CHECK(qp.quant_max == 127);
  // -1.5 / scale = -47.625 -> 16, 1.5 -> 112; 2 / scale = 63.5 -> 128, clamped to 127.
  CHECK(ints(quantize(tensor<float>({-1.5f, 0.0f, 1.5f, 2.0f}), qp)) ==
        std::vector<int64_t>{16, 64, 112, 127});
}

TEST_CASE("choose_qparams: an explicit 4-bit range") {
  // scale = (2 - (-1)) / 15 = 0.2; zero_point = 0 - round(-1 / 0.2) = 5.
  const QParams qp = choose_qparams(-1.0f, 2.0f, kUInt8, false, 0, 15);
  CHECK(qp.scale_at(0) == doctest::Approx(0.2).epsilon(1e-6));
  CHECK(qp.zero_point_at(0) == 5);
  CHECK(qp.quant_max == 15);
  CHECK(ints(quantize(tensor<float>({-5.0f, 0.3f, 5.0f}), qp)) == std::vector<int64_t>{0, 7, 15});
}

// Python: w = pat([4, 6], 1.0); w[2] = w[2].abs(); w[3] *= 0.001
//         o = PerChannelMinMaxObserver(ch_axis=0, dtype=..., qscheme=...); o(w); o.calculate_qparams()
TEST_CASE("choose_qparams_per_channel: matches torch's PerChannelMinMaxObserver") {
  const Tensor mins = tensor<float>(
      {-0.3942626416683197f, -0.49931401014328003f, 0.05748362839221954f, -0.00027667079120874405f});
  const Tensor maxs =
      tensor<float>({0.4996158182621002f, 0.4948262572288513f, 0.48619022965431213f, 0.0004801343602593988f});
  SUBCASE("s8 per_channel_symmetric (weights)") {
    const QParams qp = choose_qparams_per_channel(mins, maxs, 0, kInt8, true);
    CHECK(qp.axis == 0);
    CHECK(qp.per_channel());
    CHECK(qp.num_channels() == 4);
    check_close(qp.scale, {0.00391855557, 0.00391618814, 0.00381325674, 3.76575963e-06}, {1e-6, 0});
    CHECK(ints(qp.zero_point) == std::vector<int64_t>{0, 0, 0, 0});
  }
  SUBCASE("u8 per_channel_affine") {
    const QParams qp = choose_qparams_per_channel(mins, maxs, 0, kUInt8, false);
    check_close(qp.scale, {0.00350540574, 0.00389858917, 0.00190662837, 2.96786357e-06}, {1e-6, 0});
    CHECK(ints(qp.zero_point) == std::vector<int64_t>{112, 128, 0, 93});
  }
}

TEST_CASE("choose_qparams: errors name the bad range") {
  CHECK_THROWS_WITH_AS(choose_qparams(2.0f, 1.0f, kUInt8, false),
                       doctest::Contains("choose_qparams: expected min <= max, got min=2 max=1"), Error);
  CHECK_THROWS_WITH_AS(choose_qparams(std::nanf(""), 1.0f, kUInt8, false),
                       doctest::Contains("choose_qparams: expected a finite range, got min=nan max=1"),
                       Error);
  CHECK_THROWS_WITH_AS(choose_qparams(0.0f, INFINITY, kInt8, true), doctest::Contains("max=inf"), Error);
  CHECK_THROWS_WITH_AS(choose_qparams(0.0f, 1.0f, kInt32, false),
                       doctest::Contains("choose_qparams: expected dtype uint8 or int8, got int32"), Error);
  CHECK_THROWS_WITH_AS(
      choose_qparams(0.0f, 1.0f, kInt8, false, 0, 255),
      doctest::Contains("expected quant_min < quant_max in [-128, 127] for int8, got [0, 255]"), Error);
  CHECK_THROWS_WITH_AS(
      choose_qparams_per_channel(tensor<float>({0.0f, 1.0f}), tensor<float>({1.0f, 0.5f}), 0, kInt8, true),
      doctest::Contains("choose_qparams_per_channel: expected min <= max, got min=1 max=0.5 at channel 1"),
      Error);
  CHECK_THROWS_WITH_AS(
      choose_qparams_per_channel(tensor<float>({0.0f, 1.0f}), tensor<float>({1.0f}), 0, kInt8, true),
      doctest::Contains("expected mins and maxs of one shape [C]"), Error);
  CHECK_THROWS_WITH_AS(
      choose_qparams_per_channel(tensor<float>({0.0f}), tensor<float>({1.0f}), -1, kInt8, true),
      doctest::Contains("expected a channel axis >= 0, got -1"), Error);
}

// Python: x = torch.tensor([-2.25 + 0.25 * i for i in range(19)] + [1000.0, -1000.0, 63.75, 64.25, -65.25])
//         torch.quantize_per_tensor(x, 0.5, 3, torch.quint8).int_repr()
//         torch.quantize_per_tensor(x, 0.5, -3, torch.qint8).int_repr()
TEST_CASE("quantize: ties round half to even, out-of-range values clamp (torch.quantize_per_tensor)") {
  std::vector<float> v;
  for (int i = 0; i < 19; ++i) v.push_back(-2.25f + 0.25f * static_cast<float>(i));
  for (float extra : {1000.0f, -1000.0f, 63.75f, 64.25f, -65.25f}) v.push_back(extra);
  const Tensor x = tensor<float>(v);
  QParams u8;
  u8.scale = full({1}, 0.5, kFloat32);
  u8.zero_point = full({1}, 3, kInt32);
  const Tensor qu = quantize(x, u8);
  CHECK(qu.dtype() == kUInt8);
  CHECK(ints(qu) ==
        std::vector<int64_t>{0, 0, 0, 0, 1, 1, 1, 2, 3, 3, 3, 4, 5, 5, 5, 6, 7, 7, 7, 255, 0, 131, 131, 0});
  QParams s8 = u8;
  s8.dtype = kInt8;
  s8.quant_min = -128;
  s8.quant_max = 127;
  s8.zero_point = full({1}, -3, kInt32);
  const Tensor qs = quantize(x, s8);
  CHECK(qs.dtype() == kInt8);
  CHECK(ints(qs) == std::vector<int64_t>{-7, -7, -7, -6, -5, -5, -5, -4,  -3,   -3,  -3,  -2,
                                         -1, -1, -1, 0,  1,  1,  1,  127, -128, 125, 125, -128});
  // NaN has no integer; it goes to quant_min (what torch's kernels produce in practice).
  CHECK(ints(quantize(tensor<float>({std::nanf("")}), u8)) == std::vector<int64_t>{0});
}

// Python: x = pat([5, 7], 0.3, 2.0).t(); q = torch.quantize_per_tensor(x, 0.0156862754, 83, torch.quint8)
//         q.int_repr().flatten(); q.dequantize().flatten()
TEST_CASE("quantize / dequantize: a non-contiguous input against torch") {
  const Tensor x = pat({5, 7}, 0.3, 2.0).t();
  REQUIRE_FALSE(x.is_contiguous());
  const QParams qp = choose_qparams(-1.3f, 2.7f, kUInt8, false);  // scale 0.0156862754, zero point 83
  const Tensor q = quantize(x, qp);
  CHECK(q.sizes() == IntArrayRef{7, 5});
  CHECK(ints(q) == std::vector<int64_t>{121, 0,   153, 149, 0,  184, 0,   80,  200, 0,   210, 23,
                                        7,   208, 52,  191, 98, 0,   172, 128, 133, 168, 0,   103,
                                        188, 57,  207, 3,   27, 210, 0,   202, 75,  0,   187});
  const Tensor dq = dequantize(q, qp);
  CHECK(dq.dtype() == kFloat32);
  CHECK(dq.sizes() == IntArrayRef{7, 5});
  check_close(dq,
              {0.596078455,   -1.30196083, 1.09803927,  1.03529418,  -1.30196083,  1.58431387,  -1.30196083,
               -0.0470588282, 1.83529425,  -1.30196083, 1.99215698,  -0.941176534, -1.19215691, 1.96078444,
               -0.48627454,   1.69411778,  0.235294133, -1.30196083, 1.39607847,   0.70588237,  0.784313798,
               1.33333337,    -1.30196083, 0.313725501, 1.64705896,  -0.407843173, 1.94509816,  -1.25490201,
               -0.878431439,  1.99215698,  -1.30196083, 1.86666679,  -0.125490203, -1.30196083, 1.63137269});
  // Other floating dtypes are converted first.
  CHECK(ints(quantize(x.to(kFloat64), qp)) == ints(q));
}

// Python: x = pat([2, 3, 4], 2.0, 3.0); s = torch.tensor([0.0232494138, 0.0226619039, 0.0234829802]).double()
//         torch.quantize_per_channel(x, s, torch.zeros(3, dtype=torch.long), 1, torch.qint8).int_repr()
//         w = pat([4, 6], 1.0); w[2] = w[2].abs(); w[3] *= 0.001
//         s = torch.tensor([0.00350540574, 0.00389858917, 0.00190662837, 2.96786357e-06]).double()
//         q = torch.quantize_per_channel(w, s, torch.tensor([112, 128, 0, 93]), 0, torch.quint8)
TEST_CASE("quantize / dequantize per channel against torch.quantize_per_channel") {
  SUBCASE("s8 symmetric along axis 1 of [2, 3, 4]") {
    QParams qp;
    qp.scale = tensor<float>({0.0232494138f, 0.0226619039f, 0.0234829802f});
    qp.zero_point = zeros({3}, kInt32);
    qp.axis = 1;
    qp.dtype = kInt8;
    qp.quant_min = -128;
    qp.quant_max = 127;
    const Tensor q = quantize(pat({2, 3, 4}, 2.0, 3.0), qp);
    CHECK(ints(q) == std::vector<int64_t>{117, 65,  -10,  -82,  -128, -125, -77, -2,  72,  119, 124, 84,
                                          13,  -62, -116, -127, -96,  -26,  53,  113, 127, 100, 36,  -40});
  }
  SUBCASE("u8 affine along axis 0 of [4, 6]") {
    Tensor w = pat({4, 6}, 1.0);
    w.select(0, 2).copy_(w.select(0, 2).abs());
    w.select(0, 3).mul_(0.001);
    QParams qp;
    qp.scale = tensor<float>({0.00350540574f, 0.00389858917f, 0.00190662837f, 2.96786357e-06f});
    qp.zero_point = tensor<int32_t>({112, 128, 0, 93});
    qp.axis = 0;
    const Tensor q = quantize(w, qp);
    CHECK(ints(q) == std::vector<int64_t>{232, 255, 226, 156, 70,  0,   0, 19, 78,  154, 221, 255,
                                          234, 125, 30,  174, 255, 244, 0, 97, 193, 253, 255, 199});
    check_close(
        dequantize(q, qp),
        {0.420648694,     0.501273036,    0.399616241,    0.154237852,    -0.147227034,   -0.392605454,
         -0.499019414,    -0.424946219,   -0.194929466,   0.101363316,    0.362568796,    0.495120823,
         0.446151048,     0.238328546,    0.0571988523,   0.331753343,    0.48619023,     0.465217322,
         -0.000276011298, 1.18714543e-05, 0.000296786369, 0.000474858156, 0.000480793911, 0.000314593548});
  }
}

TEST_CASE("quantize_dequantize: the round trip is within scale / 2 inside the range and clamps outside") {
  const std::vector<double> v = random_values(4096, 7, 2.0);
  const Tensor x = make(v, {64, 64}, kFloat32);
  for (const bool symmetric : {false, true}) {
    for (const DType dtype : {kUInt8, kInt8}) {
      CAPTURE(symmetric);
      CAPTURE(dtype);
      const float lo = -3.0f, hi = 4.5f;  // the data (sigma 2) has values on both sides outside
      const QParams qp = choose_qparams(lo, hi, dtype, symmetric);
      const Tensor rt = quantize_dequantize(x, qp);
      // The fused round trip is exactly dequantize(quantize(x)).
      CHECK(values(rt) == values(dequantize(quantize(x, qp), qp)));
      const double scale = qp.scale_at(0), zp = qp.zero_point_at(0);
      const double rep_lo = scale * (static_cast<double>(qp.quant_min) - zp);
      const double rep_hi = scale * (static_cast<double>(qp.quant_max) - zp);
      const std::vector<double> r = values(rt), xf = values(x);
      int64_t inside = 0, bad = 0;
      for (size_t i = 0; i < r.size(); ++i) {
        if (xf[i] >= rep_lo && xf[i] <= rep_hi) {
          ++inside;
          bad += std::abs(xf[i] - r[i]) > scale / 2 * (1 + 1e-5);
        } else {
          // Outside the representable range: the nearest end of it.
          bad += std::abs(r[i] - (xf[i] < rep_lo ? rep_lo : rep_hi)) > 1e-5;
        }
      }
      CHECK(inside > 3000);
      CHECK(inside < 4096);
      CHECK(bad == 0);
    }
  }
  // Per channel (along axis 1): the bound uses each channel's scale. Symmetric s8 maps the
  // channel's max to 127.5 and clamps it to 127: an error of scale / 2 plus float rounding.
  const Tensor mins = x.amin({0}), maxs = x.amax({0});
  const QParams qp = choose_qparams_per_channel(mins, maxs, 1, kInt8, true);
  const Tensor err = (quantize_dequantize(x, qp) - x).abs();
  const Tensor bound = qp.scale.reshape({1, 64}) * 0.5 * (1 + 1e-4);
  CHECK(err.le(bound).logical_not().to(kInt64).sum().item<int64_t>() == 0);
  // f64 in, f64 out.
  CHECK(quantize_dequantize(x.to(kFloat64), qp).dtype() == kFloat64);
}

// Large enough to be split over threads: every element against the formula written out
// (x * (1 / scale) rounded half to even, as the tests against torch above pin down).
TEST_CASE("quantize / dequantize: large tensors, per tensor and per channel, match the formula") {
  const int64_t rows = 96, cols = 3000;
  const Tensor x = make(random_values(rows * cols, 11, 1.5), {rows, cols}, kFloat32);
  const std::vector<float> xv = x.to_vector<float>();
  for (const int64_t axis : {int64_t{-1}, int64_t{0}, int64_t{1}}) {
    CAPTURE(axis);
    QParams qp =
        axis < 0 ? choose_qparams(-2.5f, 3.0f, kInt8, false)
                 : choose_qparams_per_channel(x.amin({1 - axis}), x.amax({1 - axis}), axis, kUInt8, false);
    const std::vector<float> scale = qp.scale.to_vector<float>();
    const std::vector<int32_t> zp = qp.zero_point.to_vector<int32_t>();
    const std::vector<int64_t> q = ints(quantize(x, qp));
    const std::vector<float> dq = dequantize(quantize(x, qp), qp).to_vector<float>();
    int64_t bad_q = 0, bad_dq = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const size_t i = static_cast<size_t>(r * cols + c),
                     ch = axis < 0 ? 0 : static_cast<size_t>(axis == 0 ? r : c);
        const double inv = 1.0f / scale[ch];
        const double rounded = std::nearbyint(static_cast<float>(xv[i] * inv)) + zp[ch];
        const auto expected = static_cast<int64_t>(std::clamp<double>(rounded, qp.quant_min, qp.quant_max));
        bad_q += q[i] != expected;
        bad_dq += dq[i] != scale[ch] * static_cast<float>(expected - zp[ch]);
      }
    }
    CHECK(bad_q == 0);
    CHECK(bad_dq == 0);
  }
  // A non-contiguous integer input to dequantize.
  const QParams qp = choose_qparams(-2.5f, 3.0f, kInt8, false);
  const Tensor q = quantize(x, qp);
  CHECK(values(dequantize(q.t(), qp)) == values(dequantize(q, qp).t()));
}

TEST_CASE("QParams: to_string and accessors") {
  const QParams qp = choose_qparams(-1.3f, 2.7f, kUInt8, false);
  CHECK(qp.to_string() == "per-tensor u8 [0, 255] scale=0.0156863 zero_point=83");
  const QParams pc =
      choose_qparams_per_channel(tensor<float>({-1.0f, -2.0f, -3.0f, -4.0f, -5.0f}),
                                 tensor<float>({1.0f, 2.0f, 3.0f, 4.0f, 5.0f}), 0, kInt8, true);
  CHECK(pc.to_string() ==
        "per-channel(axis=0) s8 [-128, 127] 5 channels scale=[0.00784314, 0.0156863, 0.0235294, 0.0313726, "
        "...] "
        "zero_point=[0, 0, 0, 0, ...]");
  CHECK_THROWS_WITH_AS(pc.scale_at(5), doctest::Contains("QParams::scale_at: channel 5 out of range [0, 5)"),
                       Error);
  CHECK_THROWS_WITH_AS(pc.zero_point_at(-1), doctest::Contains("channel -1 out of range"), Error);
}

TEST_CASE("quantize / dequantize: errors") {
  const QParams qp = choose_qparams(-1.0f, 1.0f, kUInt8, false);
  CHECK_THROWS_WITH_AS(
      quantize(ones({3}, kInt64), qp),
      doctest::Contains("quantize: expected a floating-point tensor, got int64 of shape [3]"), Error);
  CHECK_THROWS_WITH_AS(
      dequantize(ones({3}, kInt8), qp),
      doctest::Contains("dequantize: expected a uint8 tensor (the qparams' dtype), got int8"), Error);
  const QParams pc =
      choose_qparams_per_channel(tensor<float>({-1.0f, -2.0f}), tensor<float>({1.0f, 2.0f}), 1, kInt8, true);
  CHECK_THROWS_WITH_AS(
      quantize(ones({2, 3}), pc),
      doctest::Contains("quantize: the qparams have 2 channels but the tensor has 3 along axis 1"), Error);
  CHECK_THROWS_WITH_AS(quantize(ones({2}), pc),
                       doctest::Contains("per channel along axis 1 but the tensor has 1 dims"), Error);
  CHECK_THROWS_WITH_AS(quantize_dequantize(ones({4, 3}), pc),
                       doctest::Contains("quantize_dequantize: the qparams have 2"), Error);
  QParams bad = qp;
  bad.scale = full({1}, 0.0, kFloat32);
  CHECK_THROWS_WITH_AS(quantize(ones({3}), bad),
                       doctest::Contains("quantize: expected finite scales > 0, got 0 at channel 0"), Error);
  bad = qp;
  bad.zero_point = full({1}, 0.0, kFloat32);
  CHECK_THROWS_WITH_AS(quantize(ones({3}), bad), doctest::Contains("expected an int32 zero point"), Error);
  bad = qp;
  bad.dtype = kInt32;
  CHECK_THROWS_WITH_AS(dequantize(ones({3}, kInt32), bad),
                       doctest::Contains("dequantize: expected qparams for uint8 or int8, got int32"), Error);
  bad = qp;
  bad.quant_max = 300;
  CHECK_THROWS_WITH_AS(quantize(ones({3}), bad), doctest::Contains("got [0, 300]"), Error);
  bad = qp;
  bad.scale = full({2}, 0.5, kFloat32);
  bad.zero_point = zeros({2}, kInt32);
  CHECK_THROWS_WITH_AS(quantize(ones({3}), bad),
                       doctest::Contains("per-tensor qparams (axis -1) need one scale, got 2"), Error);
}
