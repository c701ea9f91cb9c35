/*
 * The engine: graph shapes (diamond, a tensor used twice), accumulation across backward
 * calls, retain_graph, no_grad, detach, hooks and their order, in-place on saved tensors,
 * autograd::grad. Expected values are worked out by hand in each case.
 */
#include "tests/autograd/autograd_test_util.h"

using namespace loom;
using namespace loom::test;

TEST_CASE("backward of a simple expression accumulates d/dx into the leaf") {
  Tensor x = make({1, 2, 3}, {3}).requires_grad_();
  Tensor y = (x * x * 3.0 + x).sum();  // dy/dx = 6x + 1
  CHECK(y.requires_grad());
  CHECK_FALSE(y.is_leaf());
  CHECK(x.is_leaf());
  y.backward();
  check_close(x.grad(), {7, 13, 19});
}

TEST_CASE("a diamond graph sums both paths into the shared node") {
  Tensor x = make({0.5, -1.0}, {2}).requires_grad_();
  Tensor a = x.exp();
  Tensor b = a * 2.0;  // path 1
  Tensor c = a.sin();  // path 2
  (b + c).sum().backward();
  std::vector<double> expected;
  for (double v : {0.5, -1.0}) expected.push_back(std::exp(v) * (2 + std::cos(std::exp(v))));
  check_close(x.grad(), expected);
}

TEST_CASE("a tensor used twice in one op gets both gradients") {
  Tensor x = make({2, -3}, {2}).requires_grad_();
  (x * x).sum().backward();
  check_close(x.grad(), {4, -6});
}

TEST_CASE("gradients accumulate across two backward calls until zeroed") {
  Tensor x = make({1, 2}, {2}).requires_grad_();
  (x * 2.0).sum().backward();
  (x * 3.0).sum().backward();
  check_close(x.grad(), {5, 5});
  x.mutable_grad().zero_();
  (x * 4.0).sum().backward();
  check_close(x.grad(), {4, 4});
}

TEST_CASE("a second backward through a freed graph throws, retain_graph allows it") {
  Tensor x = make({1, 2}, {2}).requires_grad_();
  Tensor y = (x * x).sum();
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  check_close(x.grad(), {4, 8});
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("backward through the graph a second time"), Error);
}

TEST_CASE("non-scalar outputs need an explicit gradient") {
  Tensor x = make({1, 2}, {2}).requires_grad_();
  Tensor y = x * 3.0;
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("one-element outputs"), Error);
  y.backward(make({1, -1}, {2}));
  check_close(x.grad(), {3, -3});
}

TEST_CASE("no_grad and inference mode record nothing; set_grad_enabled toggles") {
  Tensor x = make({1}, {1}).requires_grad_();
  {
    NoGradGuard guard;
    Tensor y = x * 2.0;
    CHECK_FALSE(y.requires_grad());
  }
  {
    InferenceMode guard;
    CHECK_FALSE((x * 2.0).requires_grad());
  }
  set_grad_enabled(false);
  CHECK_FALSE((x * 2.0).requires_grad());
  set_grad_enabled(true);
  CHECK((x * 2.0).requires_grad());
  CHECK_FALSE(no_grad([&] { return x * 2.0; }).requires_grad());
  CHECK_THROWS_WITH_AS((x * 2.0).detach().sum().backward(), doctest::Contains("does not require grad"), Error);
}

TEST_CASE("detach cuts the graph but shares the data") {
  Tensor x = make({1, 2}, {2}).requires_grad_();
  Tensor y = x * 2.0;
  Tensor d = y.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.shares_storage(y));
  (y * d).sum().backward();  // d is a constant: d/dx = 2 * d = 4x
  check_close(x.grad(), {4, 8});
}

TEST_CASE("requires_grad_ is refused on integer tensors") {
  Tensor i = zeros({2}, kInt64);
  CHECK_THROWS_WITH_AS(i.requires_grad_(), doctest::Contains("floating-point"), Error);
}

TEST_CASE("in-place modification of a saved tensor throws at backward") {
  Tensor x = make({1, 2}, {2}).requires_grad_();
  Tensor a = x * 1.0;
  Tensor y = a * a;  // saves a
  a.add_(1.0);
  CHECK_THROWS_WITH_AS(y.sum().backward(), doctest::Contains("modified by an inplace operation"), Error);
}

TEST_CASE("in-place on a leaf that requires grad is refused, allowed under no_grad") {
  Tensor w = make({1, 2}, {2}).requires_grad_();
  CHECK_THROWS_WITH_AS(w.add_(1.0), doctest::Contains("leaf tensor that requires grad"), Error);
  check_close(w, {1, 2});  // nothing was written
  {
    NoGradGuard guard;
    w.add_(1.0);
  }
  check_close(w, {2, 3});
}

TEST_CASE("in-place ops in the graph are differentiated") {
  Tensor x = make({1, 2}, {2}).requires_grad_();
  Tensor a = x * 2.0;
  a.mul_(3.0);   // a = 6x
  a.exp_();      // a = exp(6x)
  a.sum().backward();
  check_close(x.grad(), {6 * std::exp(6.0), 6 * std::exp(12.0)});
}

TEST_CASE("tensor hooks read and replace gradients, in registration order") {
  Tensor x = make({1, 2}, {2}).requires_grad_();
  Tensor y = x * 2.0;
  std::vector<std::string> order;
  y.register_hook([&](const Tensor& g) {
    order.push_back("first");
    check_close(g, {1, 1});
    return g * 10.0;
  });
  y.register_hook([&](const Tensor& g) {
    order.push_back("second");
    check_close(g, {10, 10});
    return Tensor();  // read only
  });
  x.register_hook([&](const Tensor& g) {
    order.push_back("leaf");
    check_close(g, {20, 20});
    return Tensor();
  });
  y.sum().backward();
  CHECK(order == std::vector<std::string>{"first", "second", "leaf"});
  check_close(x.grad(), {20, 20});
}

TEST_CASE("removed hooks do not run") {
  Tensor x = make({1}, {1}).requires_grad_();
  int calls = 0;
  uint64_t h = x.register_hook([&](const Tensor&) {
    ++calls;
    return Tensor();
  });
  x.remove_hook(h);
  (x * 2.0).sum().backward();
  CHECK(calls == 0);
}

TEST_CASE("post-accumulate hooks fire once per leaf, when its gradient is final, in backward order") {
  // y = w3 * tanh(w2 * tanh(w1 * x)): backward reaches w3 first, then w2, then w1.
  Tensor x = make({0.3, -0.2}, {2});
  Tensor w1 = make({0.5, 1.5}, {2}).requires_grad_();
  Tensor w2 = make({-1.0, 0.7}, {2}).requires_grad_();
  Tensor w3 = make({2.0, 0.1}, {2}).requires_grad_();
  std::vector<std::string> order;
  std::vector<Tensor> grads_seen;
  for (auto [w, name] : {std::pair{w1, "w1"}, std::pair{w2, "w2"}, std::pair{w3, "w3"}}) {
    w.register_post_accumulate_grad_hook([&order, &grads_seen, name = std::string(name)](const Tensor& p) {
      order.push_back(name);
      grads_seen.push_back(p.grad().clone());
    });
  }
  // w2 is used twice: its hook must wait for both contributions.
  Tensor h1 = (w1 * x).tanh();
  Tensor h2 = (w2 * h1).tanh() + w2 * 0.5;
  (w3 * h2).sum().backward();
  CHECK(order == std::vector<std::string>{"w3", "w2", "w1"});
  CHECK(allclose(grads_seen[1], w2.grad()));  // final when the hook ran
}

TEST_CASE("retain_grad keeps a non-leaf's gradient") {
  Tensor x = make({1, 2}, {2}).requires_grad_();
  Tensor y = x * 3.0;
  y.retain_grad();
  (y * y).sum().backward();
  check_close(y.grad(), {6, 12});
  check_close(x.grad(), {18, 36});
}

TEST_CASE("autograd::grad returns gradients without touching .grad, and prunes the graph") {
  Tensor x = make({1, 2}, {2}).requires_grad_();
  Tensor w = make({3, 4}, {2}).requires_grad_();
  Tensor y = (x * w).sum();
  std::vector<Tensor> g = autograd::grad({y}, {x});
  check_close(g[0], {3, 4});
  CHECK_FALSE(x.grad().defined());
  CHECK_FALSE(w.grad().defined());
  Tensor unused = make({1}, {1}).requires_grad_();
  CHECK_THROWS_WITH_AS(autograd::grad({(x * 2.0).sum()}, {unused}), doctest::Contains("not used"), Error);
  CHECK_FALSE(autograd::grad({(x * 2.0).sum()}, {unused}, {}, {}, false, /*allow_unused=*/true)[0].defined());
}

TEST_CASE("grad of a non-leaf input captures the gradient flowing into it") {
  Tensor x = make({1, 2}, {2}).requires_grad_();
  Tensor a = x * 2.0;
  Tensor y = (a * a).sum();
  check_close(autograd::grad({y}, {a})[0], {4, 8});
}

TEST_CASE("create_graph gives second derivatives") {
  Tensor x = make({0.5, 2.0}, {2}).requires_grad_();
  Tensor y = (x * x * x).sum();  // dy/dx = 3x^2, d2y/dx2 = 6x
  Tensor g = autograd::grad({y}, {x}, {}, {}, /*create_graph=*/true)[0];
  check_close(g, {0.75, 12});
  CHECK(g.requires_grad());
  g.sum().backward();
  check_close(x.grad(), {3, 12});
}

TEST_CASE("broadcast gradients are summed back to each operand's shape") {
  Tensor a = make({1, 2, 3}, {3, 1}).requires_grad_();
  Tensor b = make({10, 20}, {2}).requires_grad_();
  (a * b).sum().backward();
  check_close(a.grad(), {30, 30, 30});
  check_close(b.grad(), {6, 6});
}

TEST_CASE("a long chain is freed without deep recursion") {
  Tensor x = make({1}, {1}).requires_grad_();
  Tensor y = x;
  for (int i = 0; i < 200000; ++i) y = y * 1.0;
  y = Tensor();  // the whole graph dies here, iteratively
  CHECK(x.is_leaf());
}

TEST_CASE("the graph is released when its last output dies") {
  Tensor x = make({1, 2}, {2}).requires_grad_();
  std::weak_ptr<autograd::Node> node;
  {
    Tensor y = (x * 2.0).exp();
    node = y.grad_fn();
    CHECK_FALSE(node.expired());
    CHECK(node.lock()->name() == "ExpBackward");
  }
  CHECK(node.expired());
}

TEST_CASE("backward frees the saved tensors unless retain_graph") {
  Tensor x = make({1, 2, 3, 4}, {4}).requires_grad_();
  Tensor y = (x * x).sum();
  CHECK(autograd::graph_stats({y}).saved_bytes > 0);
  y.backward(Tensor(), /*retain_graph=*/true);
  CHECK(autograd::graph_stats({y}).saved_bytes > 0);
  y.backward();
  CHECK(autograd::graph_stats({y}).saved_bytes == 0);
}

TEST_CASE("inference mode does not even track views") {
  Tensor x = ones({4});
  CHECK(x.slice(0, 0, 2).is_view());
  InferenceMode guard;
  CHECK_FALSE(x.slice(0, 0, 2).is_view());
}

TEST_CASE("a formula's gradient of the wrong shape is reported with the node's name") {
  // A hook may replace a gradient, but not with one of another shape.
  Tensor x = make({1, 2}, {2}).requires_grad_();
  Tensor y = x * 2.0;
  y.register_hook([](const Tensor&) { return ones({3}, kFloat64); });
  CHECK_THROWS_WITH_AS(y.sum().backward(), doctest::Contains("MulBackward returned a gradient of shape [3]"), Error);
}
