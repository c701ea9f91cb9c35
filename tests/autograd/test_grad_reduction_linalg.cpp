/*
 * Gradients of the reductions and matrix products at the points gradcheck cannot judge (ties,
 * zeros, the kink of a norm at 0) and against values worked out by hand. Finite-difference
 * agreement everywhere else is in the gradcheck table (cases/reduction.cpp, cases/linalg.cpp).
 */
#include <cmath>

#include "tests/autograd/autograd_test_util.h"

using namespace loom;
using namespace loom::test;

namespace {
Tensor grad_of(const Tensor& y, const Tensor& x) {
  return autograd::grad({y}, {x})[0];
}

bool any_nan(const Tensor& t) {
  for (double v : values(t))
    if (std::isnan(v)) return true;
  return false;
}
}  // namespace

// ---- norm and std at their kink -------------------------------------------------------------------

TEST_CASE("norm p=2 has gradient 0 at x = 0 (not NaN), x / |x| elsewhere") {
  Tensor x = make({0, 0, 3, 4}, {2, 2}).requires_grad_();
  Tensor n = x.norm(2.0, {1});
  check_close(n, {0, 5});
  check_close(grad_of(n.sum(), x), {0, 0, 0.6, 0.8});

  Tensor z = zeros({3}, kFloat64).requires_grad_();
  check_close(grad_of(z.norm(), z), {0, 0, 0});
  check_close(grad_of(z.norm(3.0), z), {0, 0, 0});  // general p: s^(1/p) at s = 0
  check_close(grad_of(z.norm(1.0), z), {0, 0, 0});
  check_close(grad_of(z.norm(INFINITY), z), {0, 0, 0});  // sign(0) = 0 times the tie's share, as PyTorch
  Tensor t = make({-2, 2, 1}, {3}).requires_grad_();
  check_close(grad_of(t.norm(INFINITY), t), {-0.5, 0.5, 0});  // |x| ties share the gradient
}

TEST_CASE("norm's second derivative at x = 0 is finite") {
  Tensor x = make({0, 0, 1, 2}, {2, 2}).requires_grad_();
  Tensor g = autograd::grad({x.norm(2.0, {1}).sum()}, {x}, {}, {}, /*create_graph=*/true)[0];
  Tensor gg = grad_of((g * g).sum() + g.sum(), x);
  CHECK_FALSE(any_nan(gg));
  check_close(gg.narrow(0, 0, 1), {0, 0});
}

TEST_CASE("std of a constant slice has gradient 0, var's is 2 (x - mean) / (n - correction)") {
  Tensor x = make({2, 2, 2, 1, 2, 3, 6}, {7}).requires_grad_();
  Tensor c = x.narrow(0, 0, 3), v = x.narrow(0, 3, 4);
  Tensor loss = c.std() + v.var();  // v: mean 3, var (1 correction) = 14 / 3
  check_close(v.var(), {14.0 / 3});
  check_close(grad_of(loss, x), {0, 0, 0, -4.0 / 3, -2.0 / 3, 0, 2});
  Tensor y = make({1, 3}, {2}).requires_grad_();
  check_close(grad_of(y.var({}, 0), y), {-1, 1});  // correction 0: 2 (x - mean) / n
}

TEST_CASE("norm and std give the same values whether or not the input requires grad") {
  Tensor plain = make(random_values(12, 7), {3, 4});
  Tensor tracked = plain.clone().requires_grad_();
  for (double p : {2.0, 3.0, 1.0}) check_close(tracked.norm(p, {1}), values(plain.norm(p, {1})));
  check_close(tracked.std({0}), values(plain.std({0})));
  check_close(tracked.logsumexp({1}), values(plain.logsumexp({1})));
}

// ---- prod with zeros ------------------------------------------------------------------------------

TEST_CASE("prod's gradient is the product of the other elements, also with zeros") {
  Tensor x = make({2, 3, 4, 2, 0, 3, 0, 5, 0}, {3, 3}).requires_grad_();
  Tensor y = x.prod({1});
  check_close(y, {24, 0, 0});
  // row 0 no zero: y / x; row 1 one zero: 6 at the zero, 0 elsewhere; row 2 two zeros: all 0
  check_close(grad_of(y.sum(), x), {12, 8, 6, 0, 6, 0, 0, 0, 0});
  Tensor all = make({1.5, 0, -2}, {3}).requires_grad_();
  check_close(grad_of(all.prod(), all), {0, -3, 0});
}

TEST_CASE("prod's second derivative with one zero") {
  // y = a b c with b = 0: d2y/da dc = b = 0, d2y/da db = c, d2y/db dc = a
  Tensor x = make({2, 0, 5}, {3}).requires_grad_();
  Tensor g = autograd::grad({x.prod()}, {x}, {}, {}, /*create_graph=*/true)[0];
  check_close(g, {0, 10, 0});
  check_close(grad_of(g.sum(), x), {5, 7, 2});  // row sums of the Hessian [[0,5,0],[5,0,2],[0,2,0]]
}

// ---- ties ---------------------------------------------------------------------------------------

TEST_CASE("amax/amin and max()/min() split the gradient evenly among ties") {
  Tensor x = make({1, 3, 3, 2, 2, 0}, {2, 3}).requires_grad_();
  check_close(grad_of(x.amax({1}).sum(), x), {0, 0.5, 0.5, 0.5, 0.5, 0});
  check_close(grad_of(x.amin({0}).sum(), x), {1, 0, 0, 0, 1, 1});
  Tensor y = make({5, 1, 5, 5}, {2, 2}).requires_grad_();
  check_close(grad_of(y.max(), y), {1.0 / 3, 0, 1.0 / 3, 1.0 / 3});
  check_close(grad_of(y.min(), y), {0, 1, 0, 0});
}

TEST_CASE("max/min along a dim give the whole gradient to the returned index") {
  Tensor x = make({3, 0, 3, 0, 0, -1}, {2, 3}).requires_grad_();
  auto [values_max, indices_max] = x.max(1);
  CHECK(values_max.requires_grad());
  CHECK_FALSE(indices_max.requires_grad());
  check_close(indices_max, {0, 0});
  check_close(grad_of(values_max.sum(), x), {1, 0, 0, 1, 0, 0});
  auto [values_min, indices_min] = x.min(0, /*keepdim=*/true);
  CHECK(values_min.sizes() == IntArrayRef{1, 3});
  Tensor weights = make({1, 2, 3}, {1, 3});
  check_close(grad_of((values_min * weights).sum(), x), {0, 2, 0, 1, 0, 3});
}

TEST_CASE("argmax/argmin of a tensor that requires grad record nothing") {
  Tensor x = make({1, 4, 2}, {3}).requires_grad_();
  Tensor i = x.argmax();
  CHECK(i.dtype() == kInt64);
  CHECK_FALSE(i.requires_grad());
  CHECK_FALSE(x.argmin(0).requires_grad());
}

TEST_CASE("mean and logsumexp gradients") {
  Tensor x = make({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  check_close(grad_of(x.mean({0}).sum(), x), {0.5, 0.5, 0.5, 0.5, 0.5, 0.5});
  // d/dx logsumexp = softmax, also for a row holding -inf
  Tensor y = make({0, std::log(3.0), -kInf, 1}, {2, 2}).requires_grad_();
  check_close(grad_of(y.logsumexp({1}).sum(), y), {0.25, 0.75, 0, 1});
}

// ---- matrix products ----------------------------------------------------------------------------

TEST_CASE("matmul gradients by hand: g b^T and a^T g") {
  Tensor a = make({1, 2, 3, 4}, {2, 2}).requires_grad_();
  Tensor b = make({5, 6}, {2, 1}).requires_grad_();
  auto g = autograd::grad({matmul(a, b).sum()}, {a, b});
  check_close(g[0], {5, 6, 5, 6});
  check_close(g[1], {4, 6});

  Tensor u = make({1, 2, 3}, {3}).requires_grad_(), v = make({4, 5, 6}, {3}).requires_grad_();
  auto dot = autograd::grad({matmul(u, v) * 2.0}, {u, v});
  check_close(dot[0], {8, 10, 12});
  check_close(dot[1], {2, 4, 6});
}

TEST_CASE("batched broadcast matmul gives each operand a gradient of its own shape") {
  Tensor a = leaf({2, 1, 3, 4}, 11), b = leaf({3, 4, 5}, 12);
  auto g = autograd::grad({matmul(a, b).sum()}, {a, b});
  CHECK(g[0].sizes() == a.sizes());
  CHECK(g[1].sizes() == b.sizes());
  // sum over everything: grad_a[i, 0, m, k] = sum over the broadcast batch j and n of b[j, k, n]
  Tensor expected_a = b.detach().sum({0, 2}).view({1, 1, 1, 4}).expand({2, 1, 3, 4}) * 1.0;
  check_close(g[0], values(expected_a));
}

TEST_CASE("linear gradients: g W, g^T x, and the bias summed over every leading dim") {
  Tensor x = make({1, 2, 3, 4, 5, 6}, {1, 2, 3}).requires_grad_();
  Tensor w = make({1, 0, -1, 2, 1, 0}, {2, 3}).requires_grad_();
  Tensor bias = make({0.5, -0.5}, {2}).requires_grad_();
  Tensor y = linear(x, w, bias);
  check_close(y, {-1.5, 3.5, -1.5, 12.5});
  auto g = autograd::grad({y.sum()}, {x, w, bias});
  check_close(g[0], {3, 1, -1, 3, 1, -1});
  check_close(g[1], {5, 7, 9, 5, 7, 9});
  check_close(g[2], {2, 2});
  Tensor no_bias = linear(x, w);
  check_close(autograd::grad({no_bias.sum()}, {w})[0], {5, 7, 9, 5, 7, 9});
}

TEST_CASE("linear_activation_linear: one node whose gradients equal the unfused layers' in float32") {
  Tensor r = make(random_values(2 * 3 * 5, 51), {2, 3, 5}).to(kFloat32);
  for (Activation act : {Activation::Relu, Activation::Gelu, Activation::GeluTanh}) {
    CAPTURE(static_cast<int>(act));
    std::vector<Tensor> fused, unfused;
    const std::vector<std::vector<int64_t>> shapes{{2, 3, 4}, {8, 4}, {8}, {5, 8}, {5}};  // x, w1, b1, w2, b2
    for (size_t i = 0; i < shapes.size(); ++i) {
      Tensor t = make(random_values(shape_numel(shapes[i]), 52 + i), shapes[i]).to(kFloat32);
      fused.push_back(t.clone().requires_grad_());
      unfused.push_back(t.clone().requires_grad_());
    }
    Tensor y = linear_activation_linear(fused[0], fused[1], fused[2], fused[3], fused[4], act);
    CHECK(autograd::graph_to_string({y}).find("LinearActivationLinearBackward") != std::string::npos);
    Tensor y_ref = linear(linear_activation(unfused[0], unfused[1], unfused[2], act), unfused[3], unfused[4]);
    CHECK(equal(y, y_ref));
    auto g = autograd::grad({(y * r).sum()}, fused);
    auto g_ref = autograd::grad({(y_ref * r).sum()}, unfused);
    for (size_t i = 0; i < g.size(); ++i) {
      CAPTURE(i);
      check_close(g[i], values(g_ref[i]), Tol{1e-6, 1e-6});
    }
    // Only what is asked for: the second layer alone never reaches the hidden layer's gradient.
    Tensor y2 = linear_activation_linear(fused[0], fused[1], fused[2], fused[3], fused[4], act);
    auto g_second = autograd::grad({(y2 * r).sum()}, {fused[3]});
    check_close(g_second[0], values(g_ref[3]), Tol{1e-6, 1e-6});
  }
  // The hidden layer and the pre-activation are saved for backward only: no history, so no
  // gradient can flow into them (and the engine makes no zeros for them).
  Tensor x = leaf({3, 4}, 60), w1 = leaf({8, 4}, 61), w2 = leaf({2, 8}, 62);
  auto [out, hidden, pre] =
      linear_activation_linear_forward(x, w1, Tensor(), w2, Tensor(), Activation::GeluTanh);
  CHECK(out.requires_grad());
  CHECK_FALSE(hidden.requires_grad());
  CHECK_FALSE(pre.requires_grad());
  auto [h, h_pre] = linear_activation_forward(x, w1, Tensor(), Activation::Gelu);
  CHECK(h.requires_grad());
  CHECK_FALSE(h_pre.requires_grad());
  // Its backward op is not differentiable itself; the formula differentiates the unfused ops instead.
  Tensor g2 = leaf({3, 5}, 57), w_out = leaf({5, 8}, 58), pre_act = leaf({3, 8}, 59);
  CHECK_THROWS_WITH_AS(
      linear_input_grad_activation(g2, w_out, pre_act, pre_act.relu(), Activation::Gelu, true),
      doctest::Contains("linear_input_grad_activation: not differentiable"), Error);
}

TEST_CASE("mm and bmm record one matmul node each") {
  Tensor a = leaf({2, 3}, 21), b = leaf({3, 2}, 22);
  CHECK(autograd::graph_to_string({mm(a, b)}).find("MatmulBackward") != std::string::npos);
  Tensor c = leaf({2, 2, 3}, 23), d = leaf({2, 3, 2}, 24);
  auto g = autograd::grad({bmm(c, d).sum()}, {c, d});
  check_close(g[0], values(d.detach().sum({2}).view({2, 1, 3}).expand({2, 2, 3}) * 1.0));
}

TEST_CASE("float32 matmul gradients match float64") {
  Tensor a64 = leaf({2, 3, 5}, 31), b64 = leaf({5, 4}, 32), r = make(random_values(24, 33), {2, 3, 4});
  Tensor a32 = a64.detach().to(kFloat32).requires_grad_(), b32 = b64.detach().to(kFloat32).requires_grad_();
  auto g64 = autograd::grad({(matmul(a64, b64) * r).sum()}, {a64, b64});
  auto g32 = autograd::grad({(matmul(a32, b32) * r.to(kFloat32)).sum()}, {a32, b32});
  CHECK(g32[0].dtype() == kFloat32);
  check_close(g32[0], values(g64[0]), Tol{1e-5, 1e-5});
  check_close(g32[1], values(g64[1]), Tol{1e-5, 1e-5});
}

TEST_CASE("recording keeps the ops' own errors") {
  Tensor a = leaf({2, 3}, 41), b = leaf({4, 2}, 42);
  CHECK_THROWS_WITH_AS(matmul(a, b), doctest::Contains("matmul: inner dimensions differ"), Error);
  CHECK_THROWS_WITH_AS(mm(a, b), doctest::Contains("mm: inner dimensions differ"), Error);
  CHECK_THROWS_WITH_AS(linear(a, b), doctest::Contains("does not match weight shape"), Error);
  CHECK_THROWS_WITH_AS(a.amax({5}), doctest::Contains("amax"), Error);
  CHECK_THROWS_WITH_AS(a.max(2), doctest::Contains("max"), Error);
  CHECK_THROWS_WITH_AS(leaf({0, 2}, 43).amax({0}), doctest::Contains("expected a non-empty reduction"), Error);
}
