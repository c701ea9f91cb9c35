/*
 * Tests of the composite activations (ops/activation_ops.h): values and gradients against
 * PyTorch 1.13 in float64 on points that include every kink and both tails, float32 values,
 * NaN propagation, gradcheck to second order away from the kinks, prelu's per-channel slope,
 * and the errors.
 */
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "ops/ops.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

// The points: both tails (where an unclamped exponential would overflow to inf), the kinks at
// 0, -3, 3 and 6, and a pair either side of 0 closer than float32's exp(x) - 1 resolves.
const std::vector<double> kPoints{-100.0, -25.0, -3.0, -1.5, -1e-7, 0.0,  1e-7,
                                  0.5,    1.0,   3.0,  6.0,  25.0,  100.0};

struct ActivationCase {
  std::string name;
  std::function<Tensor(const Tensor&)> fn;
  std::vector<double> value, grad;  // PyTorch 1.13, float64: f(x) and d sum(f(x)) / dx
  std::vector<double> value_f32;    // PyTorch 1.13, float32: f(x)
};

// x = torch.tensor(points, dtype=torch.float64, requires_grad=True); y = f(x); y.sum().backward()
// with f the torch.nn.functional of the same name (logsigmoid for log_sigmoid).
const std::vector<ActivationCase>& activation_cases() {
  static const std::vector<ActivationCase> cases{
      {"leaky_relu(x, 0.2)",
       [](const Tensor& x) { return leaky_relu(x, 0.2); },
       {-20.0, -5.0, -0.6000000000000001, -0.30000000000000004, -2e-08, 0.0, 1e-07, 0.5, 1.0, 3.0, 6.0, 25.0,
        100.0},
       {0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0},
       {-20.0, -5.0, -0.6000000238418579, -0.30000001192092896, -1.999999987845058e-08, 0.0,
        1.0000000116860974e-07, 0.5, 1.0, 3.0, 6.0, 25.0, 100.0}},
      {"elu(x, 1.5)",
       [](const Tensor& x) { return elu(x, 1.5); },
       {-1.5, -1.4999999999791682, -1.4253193974482041, -1.1653047597773554, -1.499999924270412e-07, 0.0,
        1e-07, 0.5, 1.0, 3.0, 6.0, 25.0, 100.0},
       {5.580113964031254e-44, 2.083191579744603e-11, 0.07468060255179591, 0.33469524022264474,
        1.4999998500000076, 1.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0},
       {-1.5, -1.5, -1.4253194332122803, -1.1653047800064087, -1.7881393432617188e-07, 0.0,
        1.0000000116860974e-07, 0.5, 1.0, 3.0, 6.0, 25.0, 100.0}},
      {"selu(x)",
       [](const Tensor& x) { return selu(x); },
       {-1.7580993408473766, -1.7580993408229604, -1.6705687287671118, -1.3658143533672527,
        -1.7580992520872843e-07, 0.0, 1.0507009873554804e-07, 0.5253504936777402, 1.0507009873554805,
        3.1521029620664414, 6.304205924132883, 26.26752468388701, 105.07009873554804},
       {6.540263121344393e-44, 2.4416384954718613e-11, 0.08753061208026487, 0.392284987480124,
        1.7580991650374513, 1.7580993408473766, 1.0507009873554805, 1.0507009873554805, 1.0507009873554805,
        1.0507009873554805, 1.0507009873554805, 1.0507009873554805, 1.0507009873554805},
       {-1.7580993175506592, -1.7580993175506592, -1.6705687046051025, -1.3658143281936646,
        -2.0958177060492744e-07, 0.0, 1.0507010017590801e-07, 0.5253505110740662, 1.0507010221481323,
        3.1521029472351074, 6.304205894470215, 26.26752471923828, 105.07009887695312}},
      {"celu(x, 0.5)",
       [](const Tensor& x) { return celu(x, 0.5); },
       {-0.5, -0.5, -0.4987606239116668, -0.475106465816068, -9.999999001086834e-08, 0.0, 1e-07, 0.5, 1.0,
        3.0, 6.0, 25.0, 100.0},
       {1.3838965267367376e-87, 1.9287498479639178e-22, 0.0024787521766663585, 0.049787068367863944,
        0.99999980000002, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0},
       {-0.5, -0.5, -0.4987606108188629, -0.47510647773742676, -8.940696716308594e-08, 0.0,
        1.0000000116860974e-07, 0.5, 1.0, 3.0, 6.0, 25.0, 100.0}},
      {"softplus(x, 2.0, 10.0)",
       [](const Tensor& x) { return softplus(x, 2.0, 10.0); },
       {6.919482633683688e-88, 9.643749239819589e-23, 0.0012378425688652247, 0.02429367578687103,
        0.34657354027997517, 0.34657359027997264, 0.34657364027997517, 0.6566308437591114, 1.0634640055214863,
        3.001237842568865, 6.0, 25.0, 100.0},
       {1.3838965267367376e-87, 1.9287498479639178e-22, 0.0024726231566347748, 0.04742587317756679,
        0.49999995, 0.5, 0.50000005, 0.7310585786300049, 0.8807970779778824, 0.9975273768433652, 1.0, 1.0,
        1.0},
       {0.0, 9.643749466768692e-23, 0.0012378426035866141, 0.024293676018714905, 0.34657353162765503,
        0.3465735912322998, 0.3465736508369446, 0.65663081407547, 1.0634640455245972, 3.0012378692626953, 6.0,
        25.0, 100.0}},
      {"hardtanh(x, -1.5, 3.0)",
       [](const Tensor& x) { return hardtanh(x, -1.5, 3.0); },
       {-1.5, -1.5, -1.5, -1.5, -1e-07, 0.0, 1e-07, 0.5, 1.0, 3.0, 3.0, 3.0, 3.0},
       {0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0},
       {-1.5, -1.5, -1.5, -1.5, -1.0000000116860974e-07, 0.0, 1.0000000116860974e-07, 0.5, 1.0, 3.0, 3.0, 3.0,
        3.0}},
      {"relu6(x)",
       [](const Tensor& x) { return relu6(x); },
       {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1e-07, 0.5, 1.0, 3.0, 6.0, 6.0, 6.0},
       {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0},
       {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0000000116860974e-07, 0.5, 1.0, 3.0, 6.0, 6.0, 6.0}},
      {"hardsigmoid(x)",
       [](const Tensor& x) { return hardsigmoid(x); },
       {0.0, 0.0, 0.0, 0.25, 0.49999998333333334, 0.5, 0.5000000166666666, 0.5833333333333334,
        0.6666666666666666, 1.0, 1.0, 1.0, 1.0},
       {0.0, 0.0, 0.0, 0.1666666716337204, 0.1666666716337204, 0.1666666716337204, 0.1666666716337204,
        0.1666666716337204, 0.1666666716337204, 0.0, 0.0, 0.0, 0.0},
       {0.0, 0.0, 0.0, 0.25, 0.5, 0.5, 0.5, 0.5833333134651184, 0.6666666865348816, 1.0, 1.0, 1.0, 1.0}},
      {"hardswish(x)",
       [](const Tensor& x) { return hardswish(x); },
       {-0.0, -0.0, -0.0, -0.375, -4.9999998333333336e-08, 0.0, 5.000000166666666e-08, 0.2916666666666667,
        0.6666666666666666, 3.0, 6.0, 25.0, 100.0},
       {0.0, 0.0, -0.5, 0.0, 0.4999999666666667, 0.5, 0.5000000333333333, 0.6666666666666666,
        0.8333333333333333, 1.5, 1.0, 1.0, 1.0},
       {-0.0, -0.0, -0.0, -0.375, -5.000000058430487e-08, 0.0, 5.000000058430487e-08, 0.2916666567325592,
        0.6666666865348816, 3.0, 6.0, 25.0, 100.0}},
      {"mish(x)",
       [](const Tensor& x) { return mish(x); },
       {-3.7200759760208363e-42, -3.471985966216896e-10, -0.1456474612756246, -0.2980997421668068,
        -5.999999679999998e-08, 0.0, 6.000000319999998e-08, 0.37524521130489513, 0.8650983882673103,
        2.9865350049679575, 5.999926634065252, 25.0, 100.0},
       {-3.682875216260627e-42, -3.33310652754411e-10, -0.09339311453232084, -0.06409781589225866,
        0.5999999359999996, 0.6, 0.6000000639999995, 0.8864243753577273, 1.0490362200997922,
        1.0211069109294435, 1.00013414050621, 1.0, 1.0},
       {-3.783505853677006e-42, -3.471986032010932e-10, -0.14564746618270874, -0.2980997562408447,
        -6.000000496442226e-08, 0.0, 6.000000496442226e-08, 0.37524524331092834, 0.8650983572006226,
        2.98653507232666, 5.999926567077637, 25.0, 100.0}},
      {"log_sigmoid(x)",
       [](const Tensor& x) { return log_sigmoid(x); },
       {-100.0, -25.000000000013888, -3.048587351573742, -1.7014132779827524, -0.6931472305599465,
        -0.6931471805599453, -0.6931471305599466, -0.4740769841801067, -0.31326168751822286,
        -0.04858735157374206, -0.0024756851377304495, -1.3887943864867583e-11, -3.720075976020836e-44},
       {1.0, 0.9999999999861121, 0.9525741268224333, 0.8175744761936437, 0.5000000250000001, 0.5, 0.499999975,
        0.37754066879814546, 0.2689414213699951, 0.04742587317756679, 0.0024726231566347748,
        1.3887943864771146e-11, 3.720075976020836e-44},
       {-100.0, -25.0, -3.0485873222351074, -1.7014132738113403, -0.6931472420692444, -0.6931471824645996,
        -0.6931471228599548, -0.4740769863128662, -0.3132616877555847, -0.04858735203742981,
        -0.0024756852071732283, -1.3887943746404563e-11, -3.923635700109488e-44}},
      {"softsign(x)",
       [](const Tensor& x) { return softsign(x); },
       {-0.9900990099009901, -0.9615384615384616, -0.75, -0.6, -9.999999000000099e-08, 0.0,
        9.999999000000099e-08, 0.3333333333333333, 0.5, 0.75, 0.8571428571428571, 0.9615384615384616,
        0.9900990099009901},
       {9.80296049406925e-05, 0.001479289940828403, 0.0625, 0.16000000000000003, 0.99999980000003, 1.0,
        0.99999980000003, 0.4444444444444444, 0.25, 0.0625, 0.020408163265306117, 0.001479289940828403,
        9.80296049406925e-05},
       {-0.9900990128517151, -0.9615384340286255, -0.75, -0.6000000238418579, -9.999998695775503e-08, 0.0,
        9.999998695775503e-08, 0.3333333432674408, 0.5, 0.75, 0.8571428656578064, 0.9615384340286255,
        0.9900990128517151}},
  };
  return cases;
}

}  // namespace

TEST_CASE("activations match PyTorch in float64, values and gradients, on the kinks and in both tails") {
  for (const ActivationCase& c : activation_cases()) {
    INFO(c.name);
    Tensor x = make(kPoints, {static_cast<int64_t>(kPoints.size())}).requires_grad_();
    Tensor y = c.fn(x);
    CHECK(y.dtype() == kFloat64);
    check_close(y, c.value);
    y.sum().backward();
    // Finite everywhere: an unselected branch that overflowed would have made a NaN here.
    check_close(x.grad(), c.grad);
  }
}

TEST_CASE("activations match PyTorch in float32 and keep the dtype of 16-bit inputs") {
  for (const ActivationCase& c : activation_cases()) {
    INFO(c.name);
    Tensor y = c.fn(make(kPoints, kFloat32));
    CHECK(y.dtype() == kFloat32);
    check_close(y, c.value_f32);
    for (DType dt : {kBFloat16, kFloat16}) {
      Tensor small = c.fn(make({-2.0, -0.5, 0.0, 0.5, 2.0}, dt));
      CHECK(small.dtype() == dt);
    }
  }
}

TEST_CASE("activations propagate NaN, as PyTorch") {
  for (const ActivationCase& c : activation_cases()) {
    INFO(c.name);
    CHECK(std::isnan(values(c.fn(make({kNaN}, kFloat32)))[0]));
  }
  CHECK(std::isnan(values(prelu(make({kNaN}, kFloat32), make({0.25}, kFloat32)))[0]));
}

TEST_CASE("activations pass gradcheck and gradgradcheck in float64 away from their kinks") {
  // Points off every kink (0, +-3, 6) by more than gradcheck's step, on both sides of each.
  Tensor x = make({-4.2, -2.7, -1.1, -0.3, 0.2, 0.9, 2.6, 3.4, 5.1, 7.3}, {2, 5}).requires_grad_();
  for (const ActivationCase& c : activation_cases()) {
    INFO(c.name);
    auto fn = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{c.fn(in[0])}; };
    auto first = autograd::gradcheck(fn, {x});
    CHECK_MESSAGE(first.ok, first.message);
    auto second = autograd::gradgradcheck(fn, {x});
    CHECK_MESSAGE(second.ok, second.message);
  }
}

TEST_CASE("prelu: one slope per channel along dim 1, or one shared, with gradients for both") {
  // x = torch.tensor([[-2.0,1.0,0.0],[0.5,-0.25,-4.0]], dtype=torch.float64).reshape(2,3,1)
  // w = torch.tensor([0.1,0.2,0.3]); y = F.prelu(x, w); (y * arange(6).reshape(2,3,1)).sum().backward()
  Tensor x = make({-2.0, 1.0, 0.0, 0.5, -0.25, -4.0}, {2, 3, 1}).requires_grad_();
  Tensor w = make({0.1, 0.2, 0.3}, {3}).requires_grad_();
  Tensor y = prelu(x, w);
  check_close(y, {-0.2, 1.0, 0.0, 0.5, -0.05, -1.2});
  (y * arange(6).to(kFloat64).reshape({2, 3, 1})).sum().backward();
  check_close(x.grad(), {0.0, 1.0, 0.6, 3.0, 0.8, 1.5});  // the slope at 0, as torch
  check_close(w.grad(), {0.0, -1.0, -20.0});

  Tensor shared = make({0.5}, {1});
  check_close(prelu(make({-2.0, 3.0, -1.0, 0.0}, {2, 2}), shared), {-1.0, 3.0, -0.5, 0.0});
  check_close(prelu(make({-4.0, 1.0}, {2}), shared), {-2.0, 1.0});  // 1-D: no channel dim

  auto fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{prelu(in[0], in[1])}; };
  Tensor gx = make({-1.3, 0.7, -0.4, 2.1, -2.2, 0.3}, {2, 3}).requires_grad_();
  Tensor gw = make({0.2, -0.1, 0.4}, {3}).requires_grad_();
  auto r = autograd::gradgradcheck(fn, {gx, gw});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("activations refuse bad inputs and parameters, naming the op") {
  Tensor ints = arange(4);
  CHECK_THROWS_WITH_AS(leaky_relu(ints), doctest::Contains("leaky_relu"), Error);
  CHECK_THROWS_WITH_AS(mish(ints), doctest::Contains("mish"), Error);
  CHECK_THROWS_WITH_AS(softplus(Tensor()), doctest::Contains("softplus"), Error);
  CHECK_THROWS_WITH_AS(celu(make({1.0}, kFloat32), 0.0), doctest::Contains("celu: alpha must not be 0"),
                       Error);
  CHECK_THROWS_WITH_AS(softplus(make({1.0}, kFloat32), 0.0),
                       doctest::Contains("softplus: beta must not be 0"), Error);
  CHECK_THROWS_WITH_AS(hardtanh(make({1.0}, kFloat32), 2.0, 1.0),
                       doctest::Contains("hardtanh: min_val (2) must not be greater than max_val (1)"),
                       Error);
  Tensor x = zeros({2, 3, 4});
  CHECK_THROWS_WITH_AS(prelu(x, zeros({4})),
                       doctest::Contains("one per channel (3 for input [2, 3, 4]), got weight [4]"), Error);
  CHECK_THROWS_WITH_AS(prelu(x, zeros({3, 1})), doctest::Contains("got weight [3, 1]"), Error);
  CHECK_THROWS_WITH_AS(prelu(x, zeros({3}, kFloat64)),
                       doctest::Contains("prelu: expected a weight of the input's dtype"), Error);
}
