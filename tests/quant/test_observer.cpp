/*
 * Tests of the observers: min/max and moving-average observers (per tensor and per channel)
 * against torch.ao.quantization (PyTorch 1.13), the histogram's exact merge when a later batch
 * is wider (hand-computed counts), percentiles against numpy, the entropy (KL) threshold against
 * a Python transcription of pytorch-quantization's _compute_amax_entropy and on distributions
 * whose answer is known in outline, the speed of a calibration batch, and the errors.
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
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "quant/observer.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::quant;
using namespace loom::test;

namespace {

Tensor floats(const std::vector<double>& v) {
  return make(v, kFloat32);
}

// 0, 1, ..., n - 1 (+ offset) as float32.
Tensor integers(int64_t n, double offset = 0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<double>(i) + offset;
  return floats(v);
}

ObserverOptions s8_symmetric(int64_t axis = -1) {
  ObserverOptions o;
  o.dtype = kInt8;
  o.symmetric = true;
  o.axis = axis;
  return o;
}

// The three batches of the torch comparison.
std::vector<Tensor> three_batches() {
  return {pat({8, 16}, 0.0, 1.0), pat({8, 16}, 1.0, 3.0) + 0.5, pat({8, 16}, 2.0, 0.2)};
}

// pytorch-quantization's test-style histograms (see the entropy test for the Python).
std::vector<double> gauss_histogram() {
  std::vector<double> h(2048);
  for (size_t j = 0; j < h.size(); ++j)
    h[j] = std::floor(1e5 * std::exp(-0.5 * std::pow(static_cast<double>(j) / 300.0, 2)) + 0.5);
  h[2047] += 3;
  return h;
}
std::vector<double> laplace_histogram() {
  std::vector<double> h(2048);
  for (size_t j = 0; j < h.size(); ++j)
    h[j] = std::floor(1e5 * std::exp(-static_cast<double>(j) / 150.0) + 0.5);
  h[2047] += 1;
  return h;
}

}  // namespace

// Python: o = MinMaxObserver(dtype=..., qscheme=...) (or MovingAverageMinMaxObserver);
//         for b in [pat([8, 16], 0.0, 1.0), pat([8, 16], 1.0, 3.0) + 0.5, pat([8, 16], 2.0, 0.2)]: o(b)
//         o.min_val, o.max_val, o.calculate_qparams()
TEST_CASE("MinMaxObserver and MovingAverageMinMaxObserver match torch over three batches") {
  SUBCASE("minmax") {
    MinMaxObserver u8;
    MinMaxObserver s8(s8_symmetric());
    CHECK(u8.name() == "minmax");
    for (const Tensor& b : three_batches()) {
      u8.observe(b);
      s8.observe(b);
    }
    CHECK(u8.range().first == doctest::Approx(-2.49990273).epsilon(1e-7));
    CHECK(u8.range().second == doctest::Approx(3.49920011).epsilon(1e-7));
    CHECK(u8.qparams().scale_at(0) == doctest::Approx(0.0235258918).epsilon(1e-6));
    CHECK(u8.qparams().zero_point_at(0) == 106);
    CHECK(s8.qparams().scale_at(0) == doctest::Approx(0.0274447072).epsilon(1e-6));
    CHECK(s8.qparams().zero_point_at(0) == 0);
    CHECK(s8.qparams().dtype == kInt8);
  }
  SUBCASE("moving_average (averaging constant 0.01)") {
    MovingAverageMinMaxObserver u8;
    MovingAverageMinMaxObserver s8(s8_symmetric());
    CHECK(u8.name() == "moving_average");
    for (const Tensor& b : three_batches()) {
      u8.observe(b);
      s8.observe(b);
    }
    CHECK(u8.range().first == doctest::Approx(-1.00672936).epsilon(1e-6));
    CHECK(u8.range().second == doctest::Approx(1.01664972).epsilon(1e-6));
    CHECK(u8.qparams().scale_at(0) == doctest::Approx(0.00793481991).epsilon(1e-6));
    CHECK(u8.qparams().zero_point_at(0) == 127);
    CHECK(s8.qparams().scale_at(0) == doctest::Approx(0.00797372311).epsilon(1e-6));
  }
}

TEST_CASE("MovingAverageMinMaxObserver follows min += c (batch_min - min) by hand") {
  MovingAverageMinMaxObserver obs({}, 0.5);
  obs.observe(floats({-1, 0.5, 1}));  // the first batch sets the range
  CHECK(obs.range() == std::pair<float, float>{-1.0f, 1.0f});
  obs.observe(floats({5, -3}));  // -1 + 0.5 (-3 + 1) = -2;  1 + 0.5 (5 - 1) = 3
  CHECK(obs.range() == std::pair<float, float>{-2.0f, 3.0f});
  obs.observe(floats({0, 2, 1}));  // -2 + 0.5 (0 + 2) = -1;  3 + 0.5 (2 - 3) = 2.5
  CHECK(obs.range() == std::pair<float, float>{-1.0f, 2.5f});
  obs.reset();
  CHECK_FALSE(obs.observed());
  obs.observe(floats({7, 9}));
  CHECK(obs.range() == std::pair<float, float>{7.0f, 9.0f});
  CHECK_THROWS_WITH_AS(MovingAverageMinMaxObserver({}, 0.0),
                       doctest::Contains("expected 0 < averaging_constant <= 1, got 0"), Error);
}

// Python: o = PerChannelMinMaxObserver(ch_axis=1, dtype=torch.qint8, qscheme=torch.per_channel_symmetric)
//         (or MovingAveragePerChannelMinMaxObserver); o(pat([2, 3, 4], 0.0, 1.0)); o(pat([2, 3, 4], 1.0, 2.0)
//         - 0.3)
TEST_CASE("per-channel min/max observers match torch's PerChannel observers along axis 1") {
  const Tensor x1 = pat({2, 3, 4}, 0.0, 1.0), x2 = pat({2, 3, 4}, 1.0, 2.0) - 0.3;
  SUBCASE("minmax") {
    MinMaxObserver obs(s8_symmetric(1));
    obs.observe(x1);
    obs.observe(x2);
    const auto [mins, maxs] = obs.channel_ranges();
    check_close(mins, {-1.62660336, -2.29725599, -1.08470047});
    check_close(maxs, {1.6984632, 0.645434976, 1.67930508});
    const QParams qp = obs.qparams();
    CHECK(qp.axis == 1);
    check_close(qp.scale, {0.0133212795, 0.0180176944, 0.01317102}, {1e-6, 0});
    CHECK(qp.zero_point.to_vector<int64_t>() == std::vector<int64_t>{0, 0, 0});
    CHECK_THROWS_WITH_AS(obs.range(),
                         doctest::Contains("range() is per tensor, but this observer is per channel"), Error);
    // Another layout of the same channels: the axis is found in any position.
    MinMaxObserver moved(s8_symmetric(0));
    moved.observe(x1.permute({1, 0, 2}));
    moved.observe(x2.permute({1, 0, 2}));
    CHECK(values(moved.qparams().scale) == values(qp.scale));
  }
  SUBCASE("moving_average") {
    MovingAverageMinMaxObserver obs(s8_symmetric(1));
    obs.observe(x1);
    obs.observe(x2);
    const auto [mins, maxs] = obs.channel_ranges();
    check_close(mins, {-0.0162660331, -1.01285243, -0.986973286});
    check_close(maxs, {1.00412548, 0.636453152, 1.00111353});
    check_close(obs.qparams().scale, {0.00787549373, 0.00794394035, 0.00785187073}, {1e-6, 0});
  }
}

TEST_CASE("Histogram: a wider later batch merges the old counts exactly") {
  SUBCASE("wider above") {
    Histogram h(8);
    const Tensor a = integers(9);  // 0..8: width 1, the 8 on the top edge counts in the last bin
    h.add(a.data_ptr<float>(), 9, 0, 8);
    CHECK(h.counts() == std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 2});
    CHECK(h.width() == 1.0);
    const Tensor b = floats({20});  // needs 20 old bins: width x4, old bin i -> i / 4
    h.add(b.data_ptr<float>(), 1, 20, 20);
    CHECK(h.lo() == 0.0);
    CHECK(h.width() == 4.0);
    CHECK(h.counts() == std::vector<int64_t>{4, 5, 0, 0, 0, 1, 0, 0});
    CHECK(h.total() == 10);
  }
  SUBCASE("wider below") {
    Histogram h(8);
    const Tensor a = integers(9);
    h.add(a.data_ptr<float>(), 9, 0, 8);
    const Tensor b = floats({-3});  // 3 old bins below: 11 > 8 bins, width x2, old bin i -> (3 + i) / 2
    h.add(b.data_ptr<float>(), 1, -3, -3);
    CHECK(h.lo() == -3.0);
    CHECK(h.width() == 2.0);
    CHECK(h.counts() == std::vector<int64_t>{1, 1, 2, 2, 2, 2, 0, 0});
  }
  SUBCASE("absolute values, from a batch of zeros") {
    Histogram h(8, true);
    const Tensor zero = zeros({5});
    h.add(zero.data_ptr<float>(), 5, 0, 0);
    CHECK(h.counts()[0] == 5);
    const Tensor b = floats({-7.5, 0.5, 3});
    h.add(b.data_ptr<float>(), 3, -7.5, 3);
    CHECK(h.lo() == 0.0);
    CHECK(h.width() * 8 >= 7.5);
    CHECK(h.width() * 8 < 15);
    CHECK(h.counts()[0] == 6);  // the zeros and 0.5
    CHECK(h.counts()[7] == 1);  // |-7.5|
    CHECK(h.total() == 8);
  }
}

TEST_CASE("PercentileObserver: percentiles of known data") {
  SUBCASE("hand-computed on 8 bins") {
    PercentileObserver obs({}, 90, 8);
    obs.observe(integers(9));  // counts 1 1 1 1 1 1 1 2; 90% of 9 = 8.1 values: bin 7, (8.1 - 7) / 2 of it
    CHECK(obs.range().first == 0.0f);
    CHECK(obs.range().second == doctest::Approx(7.55));
    PercentileObserver signed_obs({}, 90, 8);
    signed_obs.observe(integers(9, -4));  // the same shifted by -4; 0.9 values into bin 0 at the low end
    CHECK(signed_obs.range().first == doctest::Approx(-3.1));
    CHECK(signed_obs.range().second == doctest::Approx(3.55));
    PercentileObserver all({}, 100, 8);
    all.observe(integers(9, -4));
    CHECK(all.range() == std::pair<float, float>{-4.0f, 4.0f});  // clamped to the observed extrema
  }
  // numpy: np.percentile(np.arange(10000), 99.9) = 9989.001;
  //        np.percentile(np.arange(-5000, 5000), [0.1, 99.9]) = [-4990.001, 4989.001]
  SUBCASE("0..9999 and -5000..4999 at 99.9, 2048 bins (within one bin)") {
    PercentileObserver obs({}, 99.9);
    CHECK(obs.name() == "percentile");
    obs.observe(integers(10000).reshape({100, 100}));
    const double width = obs.histogram().width();
    CHECK(width == doctest::Approx(9999.0 / 2048));
    CHECK(obs.range().first == 0.0f);  // data >= 0: the low end is 0
    CHECK(std::abs(obs.range().second - 9989.001) <= width);
    PercentileObserver signed_obs({}, 99.9);
    signed_obs.observe(integers(10000, -5000));
    CHECK(std::abs(signed_obs.range().first - -4990.001) <= width);
    CHECK(std::abs(signed_obs.range().second - 4989.001) <= width);
    const QParams qp = signed_obs.qparams();
    const QParams expected =
        choose_qparams(signed_obs.range().first, signed_obs.range().second, kUInt8, false);
    CHECK(qp.scale_at(0) == expected.scale_at(0));
    CHECK(qp.zero_point_at(0) == expected.zero_point_at(0));
  }
  // numpy: a = np.concatenate([np.arange(1000), np.arange(10000)]); np.percentile(a, 99) = 9889.01,
  //        np.percentile(a, 90) = 8899.1
  SUBCASE("a wider later batch") {
    PercentileObserver p99({}, 99), p90({}, 90);
    for (PercentileObserver* obs : {&p99, &p90}) {
      obs->observe(integers(1000));
      obs->observe(integers(10000));
      CHECK(obs->histogram().total() == 11000);
    }
    // The second batch widened the grid by 16x (the first spanned 0..999): two bins of slack.
    const double width = p99.histogram().width();
    CHECK(width == doctest::Approx(999.0 / 2048 * 16));
    CHECK(std::abs(p99.range().second - 9889.01) <= 2 * width);
    CHECK(std::abs(p90.range().second - 8899.1) <= 2 * width);
  }
}

// Python (pytorch-quantization's _compute_amax_entropy with scipy.stats.entropy written out):
//   def entropy(p, q):
//       p = p / p.sum(); q = q / q.sum(); m = p > 0
//       return np.inf if np.any(q[m] == 0) else float(np.sum(p[m] * np.log(p[m] / q[m])))
//   def compute_amax_entropy(calib_hist, calib_bin_edges, nbins, stride=1, start_bin=128):
//       bins = calib_hist[:].copy(); bins[0] = bins[1]
//       divergences = []; starting = start_bin; stop = len(bins)
//       new_density_counts = np.zeros(nbins, dtype=np.float64)
//       for i in range(starting, stop + 1, stride):
//           new_density_counts.fill(0)
//           space = np.linspace(0, i, num=nbins + 1)
//           digitized_space = np.digitize(range(i), space) - 1
//           digitized_space[bins[:i] == 0] = -1
//           for idx, digitized in enumerate(digitized_space):
//               if digitized != -1: new_density_counts[digitized] += bins[idx]
//           counter = Counter(digitized_space)
//           for key, val in counter.items():
//               if key != -1: new_density_counts[key] = new_density_counts[key] / val
//           new_density = np.zeros(i, dtype=np.float64)
//           for idx, digitized in enumerate(digitized_space):
//               if digitized != -1: new_density[idx] = new_density_counts[digitized]
//           reference_density = np.array(bins[:len(digitized_space)], dtype=np.float64)
//           reference_density[-1] += np.sum(bins[i:])
//           divergences.append(entropy(reference_density, new_density))
//       divergences = np.array(divergences)
//       last_argmin = len(divergences) - 1 - np.argmin(divergences[::-1])
//       return calib_bin_edges[last_argmin * stride + starting]
//   n = 2048; edges = np.arange(n + 1, dtype=np.float64)
//   gauss = np.array([math.floor(1e5 * math.exp(-0.5 * (j / 300.0) ** 2) + 0.5) for j in range(n)]);
//   gauss[-1] += 3 laplace = np.array([math.floor(1e5 * math.exp(-j / 150.0) + 0.5) for j in range(n)]);
//   laplace[-1] += 1 uniform = np.full(n, 50.0) compute_amax_entropy(h, edges, levels, start_bin=levels) for
//   levels in (128, 256)
TEST_CASE("entropy_threshold_bin matches pytorch-quantization's KL search") {
  CHECK(entropy_threshold_bin(gauss_histogram(), 128) == 1415);
  CHECK(entropy_threshold_bin(gauss_histogram(), 256) == 1483);
  CHECK(entropy_threshold_bin(laplace_histogram(), 128) == 1664);
  CHECK(entropy_threshold_bin(laplace_histogram(), 256) == 1824);
  CHECK(entropy_threshold_bin(std::vector<double>(2048, 50.0), 128) == 2048);
  CHECK(entropy_threshold_bin(std::vector<double>(2048, 50.0), 256) == 2048);
  // Data in fewer bins than levels: nothing is clipped (the last non-empty bin's edge).
  std::vector<double> narrow(2048, 0.0);
  for (int j = 0; j < 100; ++j) narrow[j] = 10;
  CHECK(entropy_threshold_bin(narrow, 128) == 100);
  CHECK(entropy_threshold_bin(std::vector<double>(16, 0.0), 128) == 0);
  CHECK_THROWS_WITH_AS(entropy_threshold_bin({1.0, -1.0, 2.0}, 128),
                       doctest::Contains("expected finite counts >= 0, got -1 in bin 1"), Error);
  CHECK_THROWS_WITH_AS(entropy_threshold_bin({1.0, 2.0}, 1),
                       doctest::Contains("expected at least 2 levels, got 1"), Error);
}

TEST_CASE("EntropyObserver: clips outliers of a Gaussian, keeps uniform data whole") {
  SUBCASE("N(0, 1) with outliers at 20 sigma") {
    std::vector<double> v = random_values(128 * 512, 3);
    v[10] = 20;
    v[20] = -20;
    v[30] = 19.5;
    EntropyObserver obs;
    CHECK(obs.name() == "entropy");
    obs.observe(make(v, {128, 512}, kFloat32));
    CHECK(obs.levels() == 128);  // signed data: 128 levels on each side of zero
    const auto [lo, hi] = obs.range();
    MESSAGE("entropy threshold of N(0, 1) with outliers at 20: ", hi);
    CHECK(lo == -hi);
    CHECK(hi > 3.0f);
    CHECK(hi < 8.0f);
    const QParams qp = obs.qparams();
    const QParams expected = choose_qparams(lo, hi, kUInt8, false);
    CHECK(qp.scale_at(0) == expected.scale_at(0));
    CHECK(qp.zero_point_at(0) == expected.zero_point_at(0));
    CHECK(std::abs(qp.zero_point_at(0) - 127.5) == 0.5);  // the middle of [0, 255] for [-t, t]
    // Min/max would spend the range on the outliers.
    MinMaxObserver minmax;
    minmax.observe(make(v, {128, 512}, kFloat32));
    CHECK(minmax.qparams().scale_at(0) > 2.5f * qp.scale_at(0));
  }
  SUBCASE("uniform data: the threshold is (almost) the max") {
    EntropyObserver obs(s8_symmetric());
    obs.observe(rand({256, 256}) * 2.0 - 1.0);
    const auto [lo, hi] = obs.range();
    CHECK(hi > 0.95f);
    CHECK(hi <= 1.0f);
    CHECK(lo == -hi);
  }
  SUBCASE("data >= 0 quantized u8 affine: 256 levels, range [0, t]") {
    std::vector<double> v = random_values(65536, 5);
    for (double& x : v) x = std::abs(x);
    v[0] = 30;
    EntropyObserver obs;
    obs.observe(make(v, kFloat32));
    CHECK(obs.levels() == 256);
    const auto [lo, hi] = obs.range();
    CHECK(lo == 0.0f);
    CHECK(hi > 3.0f);
    CHECK(hi < 10.0f);
    CHECK(obs.qparams().zero_point_at(0) == 0);
  }
  SUBCASE("a wider later batch") {
    EntropyObserver obs;
    obs.observe(make(random_values(20000, 8), kFloat32));
    const double first_width = obs.histogram().width();
    obs.observe(make(random_values(20000, 9, 4.0), kFloat32));  // sigma 4: the grid widens
    CHECK(obs.histogram().total() == 40000);
    CHECK(obs.histogram().width() > first_width);
    const float t = obs.range().second;
    CHECK(t > 4.0f);
    CHECK(t <= obs.histogram().width() * 2048);
  }
}

TEST_CASE("observers accept any floating dtype and ignore empty tensors") {
  for (const std::string method : {"minmax", "moving_average", "percentile", "entropy"}) {
    CAPTURE(method);
    auto obs = make_observer(method);
    CHECK(obs->name() == method);
    obs->observe(zeros({0, 4}));
    CHECK_FALSE(obs->observed());
    obs->observe(pat({4, 8}, 0.5, 2.0).to(kFloat64));
    obs->observe(pat({4, 8}, 0.5, 2.0).to(kBFloat16));
    CHECK(obs->observed());
    const auto [lo, hi] = obs->range();
    CHECK(lo < 0.0f);
    CHECK(hi > 0.0f);
    CHECK(hi <= 2.0f);
    obs->reset();
    CHECK_FALSE(obs->observed());
    CHECK_THROWS_WITH_AS(obs->qparams(), doctest::Contains("has observed no data"), Error);
  }
}

TEST_CASE("observers: errors") {
  CHECK_THROWS_WITH_AS(
      make_observer("kl"),
      doctest::Contains("make_observer: unknown method 'kl'; expected one of minmax, moving_average, "
                        "percentile, entropy"),
      Error);
  for (const std::string method : {"minmax", "moving_average", "percentile", "entropy"}) {
    CAPTURE(method);
    auto obs = make_observer(method);
    CHECK_THROWS_WITH_AS(obs->qparams(), doctest::Contains("qparams: the observer has observed no data"),
                         Error);
    CHECK_THROWS_WITH_AS(obs->range(), doctest::Contains("range: the observer has observed no data"), Error);
    CHECK_THROWS_WITH_AS(
        obs->observe(ones({3}, kInt64)),
        doctest::Contains("Observer::observe: expected a floating-point tensor, got int64 of shape [3]"),
        Error);
    CHECK_THROWS_WITH_AS(obs->observe(floats({1, std::nan(""), 2})),
                         doctest::Contains("::observe: the tensor (shape [3]) has NaN or infinite values"),
                         Error);
    CHECK_THROWS_WITH_AS(obs->observe(floats({1, -INFINITY})),
                         doctest::Contains("has NaN or infinite values"), Error);
  }
  CHECK_THROWS_WITH_AS(
      make_observer("percentile", s8_symmetric(0)),
      doctest::Contains("PercentileObserver: per-channel observation (axis 0) is not supported"), Error);
  CHECK_THROWS_WITH_AS(
      make_observer("entropy", s8_symmetric(1)),
      doctest::Contains("EntropyObserver: per-channel observation (axis 1) is not supported"), Error);
  ObserverOptions wrong_dtype;
  wrong_dtype.dtype = kInt32;
  CHECK_THROWS_WITH_AS(MinMaxObserver{wrong_dtype},
                       doctest::Contains("Observer: expected dtype uint8 or int8, got int32"), Error);
  ObserverOptions bits;
  bits.bits = 1;
  CHECK_THROWS_WITH_AS(make_observer("minmax", bits), doctest::Contains("expected 2 to 8 bits, got 1"),
                       Error);
  CHECK_THROWS_WITH_AS(PercentileObserver({}, 50.0),
                       doctest::Contains("expected a percentile in (50, 100], got 50"), Error);
  CHECK_THROWS_WITH_AS(PercentileObserver({}, 99.0, 1), doctest::Contains("expected at least 2 bins, got 1"),
                       Error);
  CHECK_THROWS_WITH_AS(EntropyObserver({}, 100), doctest::Contains("expected at least 256 bins"), Error);

  MinMaxObserver per_channel(s8_symmetric(1));
  per_channel.observe(ones({2, 3}));
  CHECK_THROWS_WITH_AS(
      per_channel.observe(ones({2, 4})),
      doctest::Contains("MinMaxObserver::observe: expected 3 channels along axis 1 (as in earlier "
                        "batches), got shape [2, 4]"),
      Error);
  CHECK_THROWS_WITH_AS(per_channel.observe(ones({6})),
                       doctest::Contains("per-channel axis 1 is out of range for shape [6]"), Error);
}

TEST_CASE("observers: fewer bits narrow the integer range") {
  ObserverOptions four_bits;
  four_bits.bits = 4;
  MinMaxObserver obs(four_bits);
  obs.observe(floats({-1, 2}));
  const QParams qp = obs.qparams();
  CHECK(qp.quant_min == 0);
  CHECK(qp.quant_max == 15);
  CHECK(qp.scale_at(0) == doctest::Approx(0.2).epsilon(1e-6));
  CHECK(qp.zero_point_at(0) == 5);
}

// A calibration batch of 128 x 512 floats: the histogram observers take one extrema pass and one
// binning pass (median of 21 runs; the bound is loose because the test machine is shared).
TEST_CASE("histogram observers: a 128 x 512 batch is fast") {
  const Tensor batch = randn({128, 512});
  for (const std::string method : {"minmax", "percentile", "entropy"}) {
    auto obs = make_observer(method);
    std::vector<double> ms;
    for (int run = 0; run < 21; ++run) {
      const auto t0 = std::chrono::steady_clock::now();
      obs->observe(batch);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    const auto t0 = std::chrono::steady_clock::now();
    const QParams qp = obs->qparams();
    const double choose_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    MESSAGE(method, ": observe(128 x 512) median ", ms[10], " ms; qparams() ", choose_ms, " ms");
    CHECK(ms[10] < 5.0);
    CHECK(choose_ms < 200.0);
  }
}
