/*
 * Tests of nn::init and the layers: every layer's forward against PyTorch 1.13 for the same
 * weights and inputs, gradients of the parameters through the modules against float64 finite
 * differences, initialisation statistics against their formulas, BatchNorm's running
 * statistics, train/eval behaviour, the causality of attention, and the errors on bad input.
 *
 * Weights and inputs are deterministic patterns both sides compute (pat() below), so the
 * PyTorch side is short. Its shared helpers (the Python in the comments uses them):
 *
 *   import math, torch; from torch import nn
 *   def pat(shape, seed, scale=0.5):
 *       n = math.prod(shape)
 *       return torch.tensor([math.sin(seed + 0.61 * i) * scale for i in range(n)],
 *                           dtype=torch.float64).reshape(shape).float()
 *   def fill(model, seed0):  # floating state_dict entries in order, entry k from pat(.., seed0 + k)
 *       with torch.no_grad():
 *           for k, (name, t) in enumerate(model.state_dict().items()):
 *               if t.is_floating_point(): t.copy_(pat(t.shape, seed0 + k))
 */
#include <cmath>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "core/grad_mode.h"
#include "nn/layers/layers.h"
#include "tests/autograd/autograd_test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

// The Python fill(): the module's floating state-dict entries, in order, from pat(seed0 + k).
void fill(nn::Module& module, double seed0) {
  NoGradGuard no_grad;
  int k = 0;
  for (const auto& [name, tensor] : module.state_dict()) {
    if (tensor.is_floating_point()) {
      Tensor target = tensor;
      target.copy_(pat(tensor.sizes(), seed0 + k));
    }
    ++k;
  }
}

// Matmul-based layers accumulate in a different order than PyTorch's kernels: a few float32
// ulps of the largest partial sums, above assert_close's rtol for results near zero.
constexpr Tol kAccumulationTol{1.3e-6, 1e-5};

// The sample mean and standard deviation of a tensor's values.
std::pair<double, double> mean_std(const Tensor& t) {
  const std::vector<double> v = values(t);
  double mean = 0, sq = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  for (double x : v) sq += (x - mean) * (x - mean);
  return {mean, std::sqrt(sq / static_cast<double>(v.size() - 1))};
}

double abs_max(const Tensor& t) {
  double m = 0;
  for (double x : values(t)) m = std::max(m, std::abs(x));
  return m;
}

// gradcheck of module(x) with respect to x and every parameter, all in float64.
void check_module_gradients(nn::Module& module, const Tensor& x) {
  module.to(kFloat64);
  std::vector<Tensor> inputs{x};
  for (const Tensor& p : module.parameters()) inputs.push_back(p);
  auto fn = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{module(in[0])}; };
  LOOM_CHECK_GRADCHECK(fn, inputs);
}

}  // namespace

// ---- init ------------------------------------------------------------------------------------

TEST_CASE("init/calculate_gain and fans follow torch") {
  // torch.nn.init.calculate_gain: 'linear' 1, 'conv2d' 1, 'sigmoid' 1, 'tanh' 5/3, 'relu'
  // sqrt(2), 'leaky_relu' sqrt(2 / (1 + 0.01^2)) = 1.4141428569978354, ('leaky_relu', 0.2)
  // 1.3867504905630728, 'selu' 0.75
  CHECK(nn::init::calculate_gain(nn::init::kLinear) == 1.0);
  CHECK(nn::init::calculate_gain("conv2d") == 1.0);
  CHECK(nn::init::calculate_gain("sigmoid") == 1.0);
  CHECK(nn::init::calculate_gain("tanh") == doctest::Approx(5.0 / 3.0).epsilon(1e-15));
  CHECK(nn::init::calculate_gain(nn::init::kReLU) == doctest::Approx(std::sqrt(2.0)).epsilon(1e-15));
  CHECK(nn::init::calculate_gain("leaky_relu") == doctest::Approx(1.4141428569978354).epsilon(1e-15));
  CHECK(nn::init::calculate_gain("leaky_relu", 0.2) == doctest::Approx(1.3867504905630728).epsilon(1e-15));
  CHECK(nn::init::calculate_gain("selu") == 0.75);
  CHECK_THROWS_WITH_AS(nn::init::calculate_gain("swish"),
                       doctest::Contains("unsupported nonlinearity 'swish'"), Error);
  CHECK_THROWS_WITH_AS(nn::init::FanMode("fan_avg"), doctest::Contains("'fan_avg'"), Error);

  // Conv weight [out, in, kh, kw]: fan_in = in * kh * kw, fan_out = out * kh * kw.
  CHECK(nn::init::fan_in_and_fan_out(empty({64, 32, 3, 5})) == std::pair<int64_t, int64_t>{32 * 15, 64 * 15});
  CHECK(nn::init::fan_in_and_fan_out(empty({10, 784})) == std::pair<int64_t, int64_t>{784, 10});
  CHECK_THROWS_WITH_AS(nn::init::fan_in_and_fan_out(empty({5})), doctest::Contains("fewer than 2 dimensions"),
                       Error);
  CHECK_THROWS_WITH_AS(nn::init::kaiming_uniform_(empty({5})), doctest::Contains("got shape [5]"), Error);
  CHECK_THROWS_WITH_AS(nn::init::normal_(empty({5}, kInt64)), doctest::Contains("floating-point"), Error);
}

TEST_CASE("init/kaiming and xavier: bounds and standard deviations of their formulas") {
  manual_seed(1);
  // kaiming_uniform_(a=0, fan_in, leaky_relu): U(-b, b), b = sqrt(2) * sqrt(3 / fan_in).
  Tensor w = empty({256, 128});
  nn::init::kaiming_uniform_(w);
  const double bound = std::sqrt(2.0) * std::sqrt(3.0 / 128);
  CHECK(abs_max(w) <= bound);
  CHECK(abs_max(w) > 0.99 * bound);  // 32768 draws reach within 1% of the bound
  // std of U(-b, b) is b / sqrt(3); the sample std of 32768 draws is within 0.5% with
  // overwhelming probability, 2% leaves no room for flakiness.
  CHECK(mean_std(w).second == doctest::Approx(bound / std::sqrt(3.0)).epsilon(0.02));
  CHECK(std::abs(mean_std(w).first) < 0.01 * bound);

  // kaiming_normal_(fan_out, relu) on a conv weight: std = sqrt(2) / sqrt(out * kh * kw).
  Tensor conv = empty({64, 32, 3, 3});
  nn::init::kaiming_normal_(conv, 0.0, "fan_out", "relu");
  CHECK(mean_std(conv).second == doctest::Approx(std::sqrt(2.0) / std::sqrt(64.0 * 9)).epsilon(0.02));

  // xavier_uniform_(gain=2): b = 2 sqrt(6 / (fan_in + fan_out)).
  Tensor x = empty({300, 100});
  nn::init::xavier_uniform_(x, 2.0);
  const double xb = 2.0 * std::sqrt(6.0 / 400);
  CHECK(abs_max(x) <= xb);
  CHECK(abs_max(x) > 0.99 * xb);
  // xavier_normal_: std = sqrt(2 / (fan_in + fan_out)).
  nn::init::xavier_normal_(x);
  CHECK(mean_std(x).second == doctest::Approx(std::sqrt(2.0 / 400)).epsilon(0.02));

  // An empty tensor is left alone (torch only warns).
  Tensor none = empty({0, 3});
  CHECK_NOTHROW(nn::init::kaiming_uniform_(none));
}

TEST_CASE("init/trunc_normal_ stays in [a, b] with the truncated normal's mean and std") {
  // Moments of N(mu, sigma^2) truncated to [a, b], by hand: with alpha = (a - mu) / sigma,
  // beta = (b - mu) / sigma, Z = Phi(beta) - Phi(alpha):
  //   mean = mu + sigma (phi(alpha) - phi(beta)) / Z
  //   var  = sigma^2 (1 + (alpha phi(alpha) - beta phi(beta)) / Z - ((phi(alpha) - phi(beta)) / Z)^2)
  auto phi = [](double x) { return std::exp(-x * x / 2) / std::sqrt(2 * std::numbers::pi); };
  auto cdf = [](double x) { return (1 + std::erf(x / std::numbers::sqrt2)) / 2; };
  const double mu = 1.0, sigma = 2.0, a = 0.0, b = 3.0;
  const double alpha = (a - mu) / sigma, beta = (b - mu) / sigma, z = cdf(beta) - cdf(alpha);
  const double d = (phi(alpha) - phi(beta)) / z;
  const double mean = mu + sigma * d;
  const double std = sigma * std::sqrt(1 + (alpha * phi(alpha) - beta * phi(beta)) / z - d * d);

  Generator gen(7);
  Tensor t = empty({200, 200});
  nn::init::trunc_normal_(t, mu, sigma, a, b, &gen);
  const std::vector<double> v = values(t);
  CHECK(*std::min_element(v.begin(), v.end()) >= a);
  CHECK(*std::max_element(v.begin(), v.end()) <= b);
  // 40000 draws: the sample mean is within 0.005 sigma of the true one (1 standard error is
  // about 0.004); 2% of the std (here ~0.017) leaves no room for flakiness.
  CHECK(mean_std(t).first == doctest::Approx(mean).epsilon(0.02));
  CHECK(mean_std(t).second == doctest::Approx(std).epsilon(0.02));
  // The default: N(0, 1) truncated to [-2, 2] has std 0.87962566103423978 (by the formula).
  nn::init::trunc_normal_(t, 0.0, 1.0, -2.0, 2.0, &gen);
  CHECK(mean_std(t).second == doctest::Approx(0.87962566103423978).epsilon(0.02));
  CHECK(abs_max(t) <= 2.0);
  CHECK_THROWS_WITH_AS(nn::init::trunc_normal_(t, 0, 1, 2, 2), doctest::Contains("a < b"), Error);
}

TEST_CASE("init/fills run without autograd and a seed reproduces them") {
  Tensor w = empty({3, 4}).requires_grad_();
  nn::init::constant_(w, 0.25);
  CHECK(values(w) == std::vector<double>(12, 0.25));
  CHECK(w.is_leaf());  // no history recorded on the parameter
  nn::init::ones_(w);
  CHECK(values(w) == std::vector<double>(12, 1.0));
  nn::init::zeros_(w);
  CHECK(values(w) == std::vector<double>(12, 0.0));

  manual_seed(42);
  nn::Linear a(5, 4);
  manual_seed(42);
  nn::Linear b(5, 4);
  CHECK(equal(a.weight, b.weight));
  CHECK(equal(a.bias, b.bias));
  Generator g1(3), g2(3);
  Tensor u1 = empty({10}), u2 = empty({10});
  nn::init::uniform_(u1, -1, 1, &g1);
  nn::init::uniform_(u2, -1, 1, &g2);
  CHECK(equal(u1, u2));
}

TEST_CASE("layers/Linear and Conv2d default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in))") {
  manual_seed(3);
  nn::Linear linear(400, 300);
  const double bound = 1.0 / std::sqrt(400.0);
  CHECK(abs_max(linear.weight) <= bound);
  CHECK(abs_max(linear.weight) > 0.99 * bound);
  CHECK(mean_std(linear.weight).second == doctest::Approx(bound / std::sqrt(3.0)).epsilon(0.02));
  CHECK(abs_max(linear.bias) <= bound);
  CHECK(abs_max(linear.bias) > 0.9 * bound);  // 300 draws

  nn::Conv2d conv(16, 64, 3);  // fan_in = 16 * 9
  const double conv_bound = 1.0 / 12.0;
  CHECK(abs_max(conv.weight) <= conv_bound);
  CHECK(abs_max(conv.weight) > 0.99 * conv_bound);
  CHECK(abs_max(conv.bias) <= conv_bound);

  nn::Embedding emb(200, 100);  // N(0, 1)
  CHECK(mean_std(emb.weight).second == doctest::Approx(1.0).epsilon(0.02));
  nn::LayerNorm ln(6);
  CHECK(values(ln.weight) == std::vector<double>(6, 1.0));
  CHECK(values(ln.bias) == std::vector<double>(6, 0.0));
}

// ---- forward against torch ---------------------------------------------------------------------

TEST_CASE("layers/Linear matches torch, with and without bias") {
  // m = nn.Linear(4, 3); fill(m, 1.0); m(pat((2, 4), 10.0, 1.0))
  nn::Linear linear(4, 3);
  fill(linear, 1.0);
  check_close(linear(pat({2, 4}, 10.0, 1.0)),
              {-0.7284185886383057, 1.470468282699585, -0.7152449488639832, 1.139672040939331,
               -0.7754138112068176, 0.8475418090820312},
              kAccumulationTol);
  // m = nn.Linear(4, 3, bias=False); fill(m, 1.0); m(pat((2, 1, 4), 11.0, 1.0))
  nn::Linear no_bias(4, 3, false);
  CHECK_FALSE(no_bias.bias.defined());
  CHECK(no_bias.named_parameters().size() == 1);
  fill(no_bias, 1.0);
  Tensor y = no_bias(pat({2, 1, 4}, 11.0, 1.0));
  CHECK(y.sizes() == IntArrayRef{2, 1, 3});
  check_close(y,
              {-0.9242367148399353, 0.5281051993370056, 0.11748707294464111, 1.2303657531738281,
               -1.1180015802383423, 0.47752755880355835},
              kAccumulationTol);
  nn::Identity identity;
  Tensor x = pat({3}, 1.0);
  CHECK(identity(x).is_same(x));
}

TEST_CASE("layers/Conv2d padding_mode reflect, replicate and circular match torch") {
  // m = nn.Conv2d(1, 2, 3, stride=(1, 2), padding=(1, 2), padding_mode=mode); weight zero but
  // weight[0,0,0,0] = weight[1,0,1,2] = 1; bias 0.5; m(arange(12.).view(1, 1, 3, 4))
  const std::vector<std::pair<std::string, std::vector<double>>> cases = {
      {"reflect", {6.5, 4.5, 6.5, 2.5, 0.5, 2.5, 6.5, 4.5, 6.5, 0.5, 2.5, 2.5, 4.5, 6.5, 6.5, 8.5, 10.5, 10.5}},
      {"replicate", {0.5, 0.5, 2.5, 0.5, 0.5, 2.5, 4.5, 4.5, 6.5, 0.5, 2.5, 3.5, 4.5, 6.5, 7.5, 8.5, 10.5, 11.5}},
      {"circular", {10.5, 8.5, 10.5, 2.5, 0.5, 2.5, 6.5, 4.5, 6.5, 0.5, 2.5, 0.5, 4.5, 6.5, 4.5, 8.5, 10.5, 8.5}}};
  for (const auto& [mode, expected] : cases) {
    CAPTURE(mode);
    nn::Conv2d conv(1, 2, 3, {.stride = {1, 2}, .padding = {1, 2}, .padding_mode = mode});
    Tensor w = zeros({2, 1, 3, 3});
    w.data_ptr<float>()[0] = 1;      // [0, 0, 0, 0]
    w.data_ptr<float>()[9 + 5] = 1;  // [1, 0, 1, 2]
    conv.weight.detach().copy_(w);
    conv.bias.detach().fill_(0.5);
    CHECK(conv.extra_repr() == "1, 2, kernel_size=(3, 3), stride=(1, 2), padding=(1, 2), padding_mode=" + mode);
    Tensor y = conv(arange(12, kFloat32).view({1, 1, 3, 4}));
    CHECK(y.sizes() == IntArrayRef{1, 2, 3, 3});
    CHECK(y.to_vector<double>() == expected);
  }
  CHECK_THROWS_WITH_AS(nn::Conv2d(1, 1, 3, {.padding_mode = "same"}),
                       doctest::Contains("Conv2d: padding_mode must be 'zeros', 'reflect', 'replicate' or "
                                         "'circular', got 'same'"),
                       Error);
  // A reflect pad as large as the input is refused by pad, naming it.
  nn::Conv2d too_wide(1, 1, 3, {.padding = 3, .padding_mode = "reflect"});
  CHECK_THROWS_WITH_AS(too_wide(zeros({1, 1, 3, 3})), doctest::Contains("reflect padding (3, 3)"), Error);
}

TEST_CASE("layers/Conv2d matches torch: stride and padding; groups, dilation and no bias") {
  // m = nn.Conv2d(2, 3, 3, stride=2, padding=1); fill(m, 1.0); m(pat((1, 2, 5, 5), 12.0, 1.0))
  nn::Conv2d conv(2, 3, 3, {.stride = 2, .padding = 1});
  fill(conv, 1.0);
  Tensor x = pat({1, 2, 5, 5}, 12.0, 1.0);
  const std::vector<double> expected = {
      1.0894601345062256,   0.359650194644928,   0.08999428153038025, 0.9596827030181885,
      0.2199074625968933,   -0.2646660804748535, 0.6888081431388855,  0.17068630456924438,
      -0.43567386269569397, 0.3763865530490875,  0.7830784916877747,  1.1648149490356445,
      0.6379029154777527,   0.5110546946525574,  0.728379487991333,   1.009978175163269,
      0.4844973683357239,   0.2863624095916748,  -0.6778040528297424, 0.039338529109954834,
      0.2971044182777405,   -0.5561720132827759, 0.18755407631397247, 0.6653584837913513,
      -0.2968865633010864,  0.2376023232936859,  0.850134015083313};
  Tensor y = conv(x);
  CHECK(y.sizes() == IntArrayRef{1, 3, 3, 3});
  check_close(y, expected, kAccumulationTol);
  // Unbatched [C, H, W] gives the same values without the batch dim.
  Tensor unbatched = conv(x.squeeze(0));
  CHECK(unbatched.sizes() == IntArrayRef{3, 3, 3});
  check_close(unbatched, expected, kAccumulationTol);

  // m = nn.Conv2d(2, 4, (2, 3), padding=(1, 0), dilation=2, groups=2, bias=False); fill(m, 1.0)
  // m(pat((1, 2, 4, 6), 13.0, 1.0))
  nn::Conv2d grouped(2, 4, {2, 3}, {.padding = {1, 0}, .dilation = 2, .groups = 2, .bias = false});
  CHECK(grouped.weight.sizes() == IntArrayRef{4, 1, 2, 3});
  fill(grouped, 1.0);
  check_close(grouped(pat({1, 2, 4, 6}, 13.0, 1.0)),
              {-0.10135895758867264, -0.40046191215515137, 1.1426939964294434,   1.1585344076156616,
               -1.18450927734375,    -0.8392903208732605,  0.35952094197273254,  -0.10273273289203644,
               -0.26156795024871826, 0.14422890543937683,  -0.7675298452377319,  -1.1459404230117798,
               1.1137170791625977,   1.1439180374145508,   -0.5453768968582153,  -0.17617563903331757,
               -0.73528653383255,    -0.7343618273735046,  0.9419710636138916,   0.35063740611076355,
               -0.4536772668361664,  0.26159995794296265,  -0.39512866735458374, -0.5837504267692566,
               0.6027758121490479,   0.7643583416938782,   -1.2157713174819946,  -0.8986946940422058,
               0.9714305400848389,   0.3661707043647766,   0.009341094642877579, 0.3158964514732361},
              kAccumulationTol);
}

TEST_CASE("layers/pooling matches torch") {
  Tensor x = pat({1, 1, 5, 5}, 14.0, 1.0);
  // nn.MaxPool2d(3, 2, 1)(x)
  check_close(nn::MaxPool2d(3, 2, 1)(x), {0.9906073808670044, 0.8902816772460938, 0.5975515842437744,
                                          0.9583445191383362, 0.9583445191383362, 0.5975515842437744,
                                          0.9943382143974304, 0.9943382143974304, 0.44149014353752136});
  // nn.AvgPool2d(3, 2, 1)(x)
  check_close(nn::AvgPool2d(3, 2, 1)(x),
              {-0.0023625758476555347, -0.02311570756137371, -0.018014337867498398, -0.21016423404216766,
               -0.1808423399925232, 0.05074843019247055, -0.0029528471641242504, 0.018541885539889336,
               0.019297854974865913});
  // nn.AvgPool2d(3, 2, 1, count_include_pad=False)(x)
  check_close(nn::AvgPool2d(3, 2, 1, false, false)(x),
              {-0.005315795540809631, -0.03467356041073799, -0.04053226113319397, -0.3152463436126709,
               -0.1808423399925232, 0.07612264901399612, -0.006643906235694885, 0.027812829241156578,
               0.04342017322778702});
  // nn.AdaptiveAvgPool2d((2, 3))(pat((1, 2, 5, 7), 15.0, 1.0)), and unbatched
  const std::vector<double> adaptive = {0.03616217523813248,   0.03279979154467583,   -0.013619158416986465,
                                        -0.006121078971773386, -0.04128613695502281,  -0.02225453406572342,
                                        -0.016005178913474083, -0.042139023542404175, -0.01295661274343729,
                                        -0.02005014754831791,  0.027949361130595207,  0.03925948217511177};
  nn::AdaptiveAvgPool2d pool({2, 3});
  check_close(pool(pat({1, 2, 5, 7}, 15.0, 1.0)), adaptive);
  Tensor unbatched = pool(pat({2, 5, 7}, 15.0, 1.0));
  CHECK(unbatched.sizes() == IntArrayRef{2, 2, 3});
  check_close(unbatched, adaptive);
}

TEST_CASE("layers/MaxPool2d with ceil_mode keeps the last partial window inside the input") {
  // With ceil_mode a 5x5 input gives 3x3 outputs of 2x2 windows: the last row and column of
  // windows hang over the edge, and only their inside part counts (torch).
  Tensor x = pat({1, 1, 5, 5}, 14.0, 1.0);
  // nn.MaxPool2d(2, ceil_mode=True)(x)
  check_close(
      nn::MaxPool2d(2, {}, 0, 1, true)(x),
      {0.9906073808670044, 0.46882784366607666, 0.5975515842437744, 0.9583445191383362, 0.6218858361244202,
       0.44149014353752136, 0.9943382143974304, 0.7541336417198181, -0.35757145285606384});
}

TEST_CASE("layers/BatchNorm2d: two training steps and eval match torch") {
  // m = nn.BatchNorm2d(3); fill(m, 20.0); m.running_var.abs_().add_(0.5)
  // m(pat((2, 3, 2, 2), 21.0, 1.0)); y2 = m(pat((2, 3, 2, 2), 22.0, 2.0))
  nn::BatchNorm2d bn(3);
  fill(bn, 20.0);
  {
    NoGradGuard no_grad;
    bn.running_var.abs_().add_(0.5);
  }
  bn(pat({2, 3, 2, 2}, 21.0, 1.0));
  Tensor y2 = bn(pat({2, 3, 2, 2}, 22.0, 2.0));
  check_close(y2, {1.3101369142532349,  0.5436413884162903,   0.05790788307785988,   0.02814224362373352,
                   -0.82537841796875,   -0.31272390484809875, 0.22741751372814178,   0.6002146601676941,
                   0.42519786953926086, 0.27702614665031433,  -0.006886649411171675, -0.32413196563720703,
                   0.1610184758901596,  -0.01494650263339281, 0.29133522510528564,   0.9693867564201355,
                   0.07450529932975769, 0.5156572461128235,   0.6854957342147827,    0.5227593183517456,
                   0.08714641630649567, -0.23238536715507507, -0.5039114356040955,   -0.6294912099838257});
  // The running statistics after two steps (unbiased variance, momentum 0.1).
  check_close(bn.running_mean, {-0.16444100439548492, -0.15896561741828918, -0.33675751090049744});
  check_close(bn.running_var, {0.8386932611465454, 0.9810898900032043, 0.9431015849113464});
  CHECK(bn.num_batches_tracked.item<int64_t>() == 2);
  CHECK(bn.num_batches_tracked.dtype() == kInt64);

  // m.eval(); m(pat((1, 3, 2, 2), 23.0, 1.0)): the running statistics, which stay unchanged.
  bn.eval();
  Tensor mean_before = bn.running_mean.clone();
  check_close(bn(pat({1, 3, 2, 2}, 23.0, 1.0)),
              {0.07850345969200134, 0.0024293800815939903, 0.10593608021736145, 0.3516882658004761,
               0.41473525762557983, 0.6583881974220276, 0.7600721716880798, 0.6831092834472656,
               0.14527352154254913, -0.069379061460495, -0.2563330829143524, -0.34815356135368347});
  CHECK(equal(bn.running_mean, mean_before));
  CHECK(bn.num_batches_tracked.item<int64_t>() == 2);
}

TEST_CASE("layers/BatchNorm1d: [N, C] and [N, C, L], cumulative average without momentum") {
  // m = nn.BatchNorm1d(2, momentum=None, affine=False)
  // m(pat((4, 2), 24.0, 1.0)); y = m(pat((3, 2, 2), 25.0, 1.0))
  nn::BatchNorm1d bn(2, 1e-5, std::nullopt, false);
  CHECK(bn.named_parameters().empty());
  bn(pat({4, 2}, 24.0, 1.0));
  check_close(bn(pat({3, 2, 2}, 25.0, 1.0)),
              {-0.07499310374259949, 0.8564324975013733, 1.1550207138061523, 1.3132675886154175,
               1.2995630502700806, 0.4835318326950073, -0.7166876196861267, -1.403549313545227,
               -1.4398512840270996, -1.124682903289795, -0.6195376515388489, 0.2714862525463104});
  check_close(bn.running_mean, {0.048076510429382324, 0.1894075721502304});
  check_close(bn.running_var, {0.5689963102340698, 0.4809715151786804});

  // Without running statistics, eval mode normalises by the batch too (torch).
  nn::BatchNorm1d untracked(2, 1e-5, 0.1, true, false);
  CHECK(untracked.named_buffers().empty());
  Tensor x = pat({5, 2}, 26.0, 1.0);
  Tensor train_out = untracked(x);
  untracked.eval();
  CHECK(equal(untracked(x), train_out));
}

TEST_CASE("layers/a rejected BatchNorm batch leaves the statistics as they were") {
  nn::BatchNorm1d bn(3);
  CHECK_THROWS_WITH_AS(bn(pat({1, 3}, 1.0)), doctest::Contains("more than 1 value per channel"), Error);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 0);
  CHECK(values(bn.running_mean) == std::vector<double>(3, 0.0));
}

TEST_CASE("layers/LayerNorm, Embedding and activations match torch") {
  // m = nn.LayerNorm([2, 3]); fill(m, 30.0); m(pat((2, 2, 3), 31.0, 2.0))
  nn::LayerNorm ln({2, 3});
  fill(ln, 30.0);
  check_close(ln(pat({2, 2, 3}, 31.0, 2.0)),
              {0.7172622084617615, 0.3146146237850189, 0.31095951795578003, 0.7086784839630127,
               0.8258318305015564, 0.24900509417057037, -0.771067202091217, 0.20968382060527802,
               0.47232112288475037, 0.28012511134147644, 0.4173780381679535, 0.9679409265518188});
  nn::LayerNorm no_bias(4, 1e-5, true, false);
  CHECK(no_bias.named_parameters().size() == 1);
  nn::LayerNorm no_affine(4, 1e-5, false);
  CHECK(no_affine.named_parameters().empty());

  // m = nn.Embedding(5, 3, padding_idx=1); fill(m, 40.0); idx = torch.tensor([[0, 1, 4], [1, 3, 0]])
  // y = m(idx); (y * pat((2, 3, 3), 41.0, 1.0)).sum().backward(); m.weight.grad
  nn::Embedding emb(5, 3, 1);
  fill(emb, 40.0);
  Tensor idx = tensor<int64_t>({0, 1, 4, 1, 3, 0}, {2, 3});
  Tensor y = emb(idx);
  check_close(y, {0.37255656719207764, 0.11433170735836029, -0.18513306975364685, -0.417819619178772,
                  -0.49979695677757263, -0.4014955759048462, -0.09742778539657593, -0.3607998490333557,
                  -0.4940299689769745, -0.417819619178772, -0.49979695677757263, -0.4014955759048462,
                  0.49900513887405396, 0.42706868052482605, 0.2010868638753891, 0.37255656719207764,
                  0.11433170735836029, -0.18513306975364685});
  (y * pat({2, 3, 3}, 41.0, 1.0)).sum().backward();
  // Row 1 (the padding index) gets no gradient; row 2 is never looked up.
  check_close(emb.weight.grad(),
              {-0.27384862303733826, -0.22102224826812744, -0.08847224712371826, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
               -0.9306225180625916, -0.9724411964416504, -0.6634964942932129, 0.6270051598548889,
               0.9601959586143494, 0.9470402598381042});
  nn::Embedding padded(4, 2, -1);  // negative: counted from the end
  CHECK(padded.padding_idx() == 3);
  CHECK(values(padded.weight.select(0, 3)) == std::vector<double>{0.0, 0.0});

  // x = pat((7,), 50.0, 3.0); nn.ReLU()(x), nn.GELU()(x), nn.GELU("tanh")(x), nn.SiLU()(x), ...
  Tensor x = pat({7}, 50.0, 3.0);
  check_close(nn::ReLU()(x), {0.0, 1.0132278203964233, 2.4481048583984375, 2.999940872192383,
                              2.469686269760132, 1.048606038093567, 0.0});
  check_close(nn::GELU()(x),
              {-0.16970758140087128, 0.8556955456733704, 2.4305262565612793, 2.9958903789520264,
               2.4529871940612793, 0.8942724466323853, -0.16997094452381134});
  check_close(nn::GELU("tanh")(x),
              {-0.16978752613067627, 0.8555380702018738, 2.430946111679077, 2.996302843093872,
               2.453416109085083, 0.8941029906272888, -0.1700400859117508});
  check_close(nn::SiLU()(x), {-0.24620187282562256, 0.7433559894561768, 2.253291368484497, 2.8576579093933105,
                              2.277024030685425, 0.7765002250671387, -0.2407277226448059});
  check_close(nn::Tanh()(x), {-0.656777024269104, 0.7670937776565552, 0.9851611852645874, 0.9950541853904724,
                              0.985783576965332, 0.7812638282775879, -0.6355726718902588});
  check_close(nn::Sigmoid()(x),
              {0.31278640031814575, 0.7336513996124268, 0.9204227924346924, 0.952571451663971,
               0.9219892024993896, 0.7405070662498474, 0.32066649198532104});

  nn::Flatten flatten;
  CHECK(flatten(empty({2, 3, 4, 5})).sizes() == IntArrayRef{2, 60});
  CHECK(nn::Flatten(0, 1)(empty({2, 3, 4})).sizes() == IntArrayRef{6, 4});
}

TEST_CASE("layers/CausalSelfAttention and TransformerBlock match torch") {
  // The anchor's attention as a module (qkv, proj, non-persistent causal buffer):
  //   class Attn(nn.Module):
  //       def __init__(s, d, h, ctx):
  //           super().__init__(); s.h = h
  //           s.qkv, s.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
  //           s.register_buffer("causal", torch.ones(ctx, ctx, dtype=torch.bool).tril(), persistent=False)
  //       def forward(s, x):
  //           B, T, C = x.shape
  //           q, k, v = s.qkv(x).view(B, T, 3, s.h, C // s.h).permute(2, 0, 3, 1, 4)
  //           att = (q @ k.transpose(-2, -1)) * (C // s.h) ** -0.5
  //           att = att.masked_fill(~s.causal[:T, :T], float("-inf")).softmax(-1)
  //           return s.proj((att @ v).transpose(1, 2).reshape(B, T, C))
  //   m = Attn(8, 2, 6); fill(m, 60.0); m(pat((2, 5, 8), 61.0, 1.0))
  nn::CausalSelfAttention attn(8, 2, 6);
  fill(attn, 60.0);
  Tensor y = attn(pat({2, 5, 8}, 61.0, 1.0));
  CHECK(y.sizes() == IntArrayRef{2, 5, 8});
  check_close(y, {-1.2381125688552856,  -0.49780401587486267,  1.5302724838256836,    1.65034818649292,
                  -0.38551539182662964, -1.447015643119812,    -0.14721542596817017,  0.9840893745422363,
                  -1.2124420404434204,  -0.4816262423992157,   1.5099997520446777,    1.627406120300293,
                  -0.3728976249694824,  -1.4198639392852783,   -0.1507740020751953,   0.9557503461837769,
                  -0.6730756163597107,  -0.061334043741226196, 1.110865831375122,     1.0739411115646362,
                  -0.15842974185943604, -0.7948405146598816,   -0.15669989585876465,  0.32874947786331177,
                  -0.13688573241233826, -0.4772363603115082,   0.43590831756591797,   1.2646406888961792,
                  0.580155611038208,    -0.7391075491905212,   -0.8766896724700928,   0.032788753509521484,
                  -0.45362237095832825, -0.7046586275100708,   0.6767643690109253,    1.5724258422851562,
                  0.44199338555336,     -1.0929909944534302,   -0.8566024303436279,   0.39337438344955444,
                  -1.0596978664398193,  -0.17601779103279114,  1.4592231512069702,    1.3048560619354248,
                  -0.4297412037849426,  -1.1162797212600708,   0.007362008094787598,  0.7049288749694824,
                  -1.0193235874176025,  -0.17467865347862244,  1.4192957878112793,    1.290195107460022,
                  -0.39470553398132324, -1.0899288654327393,   -0.018881797790527344, 0.6698217391967773,
                  -0.5292197465896606,  -0.1251719892024994,   0.9457101821899414,    1.082674264907837,
                  0.009639739990234375, -0.7474963068962097,   -0.3089727461338043,   0.2305988073348999,
                  -0.20933577418327332, -0.7158588171005249,   0.4287406802177429,    1.5008718967437744,
                  0.6661425828933716,   -0.9466487169265747,   -1.031923770904541,    0.18853527307510376,
                  -1.0715678930282593,  -0.6355676651000977,   1.3177621364593506,    1.7172067165374756,
                  -0.15069758892059326, -1.4355261325836182,   -0.37819990515708923,  0.8955308198928833},
              kAccumulationTol);

  //   class Block(nn.Module):  # children ln1, attn (the Attn above), ln2, mlp
  //       def __init__(s, d, h, ctx):
  //           super().__init__()
  //           s.ln1, s.attn, s.ln2 = nn.LayerNorm(d), Attn(d, h, ctx), nn.LayerNorm(d)
  //           s.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
  //       def forward(s, x):
  //           x = x + s.attn(s.ln1(x))
  //           return x + s.mlp(s.ln2(x))
  //   m = Block(8, 2, 6); fill(m, 70.0); m(pat((1, 4, 8), 71.0, 1.0))
  nn::TransformerBlock block(8, 2, 6);
  fill(block, 70.0);
  check_close(block(pat({1, 4, 8}, 71.0, 1.0)),
              {0.8621074557304382,  -0.3502618968486786,  -0.3369196057319641,  -0.49947988986968994,
               -1.5650966167449951, -1.9663276672363281,  -0.40039724111557007, 1.6875019073486328,
               0.31386807560920715, -0.05507093667984009, 0.6878693103790283,   0.7760210037231445,
               -0.5267647504806519, -1.4372732639312744,  -0.506916344165802,   0.9044971466064453,
               -0.9808391332626343, -1.2294080257415771,  0.03528463840484619,  0.8156216144561768,
               0.1917494535446167,  -0.23273813724517822, 0.7713289856910706,   1.7371870279312134,
               -0.9171944856643677, -1.9195032119750977,  -1.169070839881897,   -0.4528709650039673,
               -0.668189525604248,  -0.3851999044418335,  1.361032485961914,    2.8592331409454346},
              kAccumulationTol);
  // list(m.state_dict().keys())
  CHECK(block.state_dict().keys() ==
        std::vector<std::string>{"ln1.weight", "ln1.bias", "attn.qkv.weight", "attn.qkv.bias",
                                 "attn.proj.weight", "attn.proj.bias", "ln2.weight", "ln2.bias",
                                 "mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "mlp.2.bias"});
  // The mask is a buffer (moved by to()), not in the state dict.
  CHECK(block.named_buffers().size() == 1);
  CHECK(block.named_buffers()[0].first == "attn.causal");
}

TEST_CASE("layers/attention is causal: a later token does not change earlier outputs") {
  manual_seed(5);
  nn::CausalSelfAttention attn(16, 4, 8);
  Tensor x = randn({2, 6, 16});
  Tensor y = attn(x);
  Tensor changed = x.clone();
  {
    NoGradGuard no_grad;
    changed.select(1, 3).fill_(7.0);  // token 3 of every sequence
  }
  Tensor y2 = attn(changed);
  // Outputs 0..2 are bit-identical; 3..5 see the change.
  CHECK(equal(y.slice(1, 0, 3), y2.slice(1, 0, 3)));
  for (int64_t t = 3; t < 6; ++t) CHECK_FALSE(allclose(y.select(1, t), y2.select(1, t)));
  // Shorter sequences than max_context use the top-left corner of the mask: the prefix of a
  // sequence gives the prefix of the outputs.
  CHECK(allclose(attn(x.slice(1, 0, 4)), y.slice(1, 0, 4), 1e-5, 1e-6));
}

// ---- gradients ---------------------------------------------------------------------------------

TEST_CASE(
    "layers/parameter gradients through Linear, Conv2d, LayerNorm and BatchNorm match finite differences") {
  manual_seed(11);
  nn::Linear linear(3, 2);
  check_module_gradients(linear, leaf({2, 3}, 1));

  nn::Conv2d conv(2, 2, 3, {.stride = 2, .padding = 1});
  check_module_gradients(conv, leaf({1, 2, 4, 4}, 2));

  nn::LayerNorm ln({2, 3});
  fill(ln, 3.0);  // weight and bias away from 1 and 0, so their gradients are not special
  check_module_gradients(ln, leaf({2, 2, 3}, 3));

  nn::BatchNorm2d bn(2);
  fill(bn, 4.0);
  check_module_gradients(bn, leaf({3, 2, 2, 2}, 4));  // training mode: through the batch statistics
  bn.eval();
  check_module_gradients(bn, leaf({3, 2, 2, 2}, 5));
}

TEST_CASE("layers/parameter gradients through attention and the transformer block match finite differences") {
  manual_seed(12);
  nn::CausalSelfAttention attn(4, 2, 4);
  check_module_gradients(attn, leaf({2, 3, 4}, 6));
  nn::TransformerBlock block(4, 2, 3, 0.0, 2);
  check_module_gradients(block, leaf({1, 3, 4}, 7));
}

// ---- modes ---------------------------------------------------------------------------------

TEST_CASE("layers/Dropout drops with probability p in training and is the identity in eval") {
  Generator gen(9);
  nn::Dropout drop(0.3, &gen);
  Tensor x = ones({100000});
  const std::vector<double> v = values(drop(x));
  int64_t zeros = 0, scaled = 0;
  for (double e : v) {
    zeros += e == 0.0;
    scaled += e == static_cast<double>(static_cast<float>(1.0 / 0.7));  // the kept ones, scaled by 1/(1-p)
  }
  CHECK(zeros + scaled == static_cast<int64_t>(v.size()));
  // Binomial(1e5, 0.3): standard deviation 145 drops; 1500 is more than ten of them.
  CHECK(std::abs(zeros - 30000) < 1500);
  drop.eval();
  CHECK(drop(x).is_same(x));

  // The same generator state gives the same mask.
  Generator g1(4), g2(4);
  nn::Dropout a(0.5, &g1), b(0.5, &g2);
  CHECK(equal(a(x), b(x)));

  CHECK_THROWS_WITH_AS(nn::Dropout(1.5), doctest::Contains("between 0 and 1, but got 1.5"), Error);
  CHECK_THROWS_WITH_AS(nn::Dropout(-0.1), doctest::Contains("between 0 and 1"), Error);
  CHECK(values(nn::Dropout(1.0)(x.slice(0, 0, 5))) == std::vector<double>(5, 0.0));
}

TEST_CASE("layers/dropout in attention and the block is active in training only") {
  manual_seed(13);
  nn::TransformerBlock block(8, 2, 4, 0.5);
  Tensor x = randn({2, 4, 8});
  block.eval();
  Tensor a = block(x);
  CHECK(equal(a, block(x)));  // deterministic in eval
  block.train();
  CHECK_FALSE(allclose(block(x), a));
}

// ---- errors --------------------------------------------------------------------------------

TEST_CASE("layers/bad inputs and arguments throw, naming the layer and the shapes") {
  nn::Linear linear(4, 3);
  CHECK_THROWS_WITH_AS(linear(empty({2, 5})),
                       doctest::Contains("expected an input of shape [*, 4], got [2, 5]"), Error);
  CHECK_THROWS_WITH_AS(nn::Linear(-1, 3), doctest::Contains("non-negative"), Error);

  nn::Conv2d conv(3, 8, 3);
  CHECK_THROWS_WITH_AS(conv(empty({1, 4, 8, 8})), doctest::Contains("expected 3 input channels"), Error);
  CHECK_THROWS_WITH_AS(conv(empty({8, 8})), doctest::Contains("got shape [8, 8]"), Error);
  CHECK_THROWS_WITH_AS(conv(empty({1, 3, 2, 2})), doctest::Contains("conv2d"),
                       Error);  // smaller than the kernel
  CHECK_THROWS_WITH_AS(nn::Conv2d(3, 8, 3, {.groups = 2}),
                       doctest::Contains("in_channels=3 must be divisible"), Error);
  CHECK_THROWS_WITH_AS(nn::Conv2d(3, 8, 0), doctest::Contains("kernel_size >= 1"), Error);
  CHECK_THROWS_WITH_AS(nn::Conv2d(3, 8, 3, {.stride = {1, 0}}), doctest::Contains("stride >= 1, got (1, 0)"),
                       Error);

  CHECK_THROWS_WITH_AS(nn::MaxPool2d(2)(empty({4, 4})), doctest::Contains("MaxPool2d"), Error);
  CHECK_THROWS_WITH_AS(nn::MaxPool2d(2, 2, 2), doctest::Contains("at most half of the kernel size"), Error);
  CHECK_THROWS_WITH_AS(nn::AdaptiveAvgPool2d(0), doctest::Contains("output_size >= 1"), Error);

  nn::BatchNorm2d bn(3);
  CHECK_THROWS_WITH_AS(bn(empty({2, 3, 4})),
                       doctest::Contains("expected a 4-D [N, C, H, W] input, got shape [2, 3, 4]"), Error);
  CHECK_THROWS_WITH_AS(bn(empty({2, 4, 2, 2})), doctest::Contains("expected 3 channels"), Error);
  CHECK_THROWS_WITH_AS(nn::BatchNorm1d(3)(empty({2, 3, 4, 5})), doctest::Contains("BatchNorm1d"), Error);
  CHECK_THROWS_WITH_AS(nn::BatchNorm1d(3, 1e-5, 1.5), doctest::Contains("momentum in [0, 1]"), Error);

  CHECK_THROWS_WITH_AS(nn::LayerNorm(4)(empty({2, 5})), doctest::Contains("normalized_shape"), Error);
  CHECK_THROWS_WITH_AS(nn::LayerNorm(std::vector<int64_t>{}), doctest::Contains("at least 1 dim"), Error);

  nn::Embedding emb(5, 2);
  CHECK_THROWS_WITH_AS(emb(empty({3})), doctest::Contains("expected int64 or int32 indices, got float32"),
                       Error);
  CHECK_THROWS_WITH_AS(emb(tensor<int64_t>({0, 5})), doctest::Contains("embedding"), Error);
  CHECK_THROWS_WITH_AS(nn::Embedding(5, 2, 5), doctest::Contains("padding_idx must be within [-5, 5)"),
                       Error);

  CHECK_THROWS_WITH_AS(nn::GELU("fast"), doctest::Contains("'none' or 'tanh', got 'fast'"), Error);
  CHECK_THROWS_AS(nn::Flatten(2)(empty({2, 3})), Error);

  nn::CausalSelfAttention attn(8, 2, 4);
  CHECK_THROWS_WITH_AS(attn(empty({1, 5, 8})), doctest::Contains("T=5 exceeds max_context=4"), Error);
  CHECK_THROWS_WITH_AS(attn(empty({1, 3, 6})),
                       doctest::Contains("expected an input of shape [B, T, 8], got [1, 3, 6]"), Error);
  CHECK_THROWS_WITH_AS(attn(empty({3, 8})), doctest::Contains("got [3, 8]"), Error);
  CHECK_THROWS_WITH_AS(nn::CausalSelfAttention(8, 3, 4),
                       doctest::Contains("n_heads=3 does not divide d_model=8"), Error);
  CHECK_THROWS_WITH_AS(nn::TransformerBlock(8, 2, 4, 0.0, 0), doctest::Contains("mlp_ratio >= 1"), Error);
}
