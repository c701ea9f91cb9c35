/*
 * The split backward of zero-bubble pipelines (autograd/split_backward.h): the first pass
 * returns the input's gradient and leaves every parameter's grad() untouched, deferring one
 * entry per node that owes a parameter's gradient; the second pass fills the grad()s with what
 * one unsplit backward gives, once per leaf even when a weight is used twice.
 */
#include "autograd/split_backward.h"
#include "tests/autograd/autograd_test_util.h"

using namespace loom;
using namespace loom::test;

TEST_CASE("split backward: B gives the input's gradient, W the parameters', both as one backward") {
  Tensor x = leaf({5, 4}, 1), w1 = leaf({8, 4}, 2), b1 = leaf({8}, 3), w2 = leaf({3, 8}, 4),
         b2 = leaf({3}, 5);
  Tensor g = make(random_values(15, 6, 1.0, 0.0), {5, 3});
  Tensor out = linear(relu(linear(x, w1, b1)), w2, b2);
  const std::vector<Tensor> expected = autograd::grad({out}, {x, w1, b1, w2, b2}, {g}, /*retain_graph=*/true);

  autograd::DeferredWeightGrads deferred;
  const Tensor dx = autograd::grad_deferring_weights({out}, {x}, {g}, deferred)[0];
  check_close(dx, values(expected[0]));
  for (const Tensor& p : {w1, b1, w2, b2}) CHECK_FALSE(p.grad().defined());
  CHECK_FALSE(x.grad().defined());
  // The two linear nodes owe their weight and bias; relu owes nothing.
  REQUIRE(deferred.entries.size() == 2);
  for (const auto& entry : deferred.entries) CHECK(entry.owed == std::vector<bool>{false, true, true});

  autograd::run_deferred_weight_grads(deferred);
  CHECK(deferred.entries.empty());
  check_close(w1.grad(), values(expected[1]));
  check_close(b1.grad(), values(expected[2]));
  check_close(w2.grad(), values(expected[3]));
  check_close(b2.grad(), values(expected[4]));
  CHECK_FALSE(x.grad().defined());  // B's gradient was returned, not accumulated
}

TEST_CASE(
    "split backward: a weight used by two nodes gets both gradients, and a scalar loss needs no gradient") {
  Tensor x = leaf({2, 3}, 7), w = leaf({3, 3}, 8);
  Tensor loss = (linear(linear(x, w), w) * 0.5).sum();
  const std::vector<Tensor> expected = autograd::grad({loss}, {x, w}, {}, /*retain_graph=*/true);
  autograd::DeferredWeightGrads deferred;
  check_close(autograd::grad_deferring_weights({loss}, {x}, {}, deferred)[0], values(expected[0]));
  CHECK(deferred.entries.size() == 2);
  CHECK_FALSE(w.grad().defined());
  autograd::run_deferred_weight_grads(deferred);
  check_close(w.grad(), values(expected[1]));
}

TEST_CASE("split backward: errors name the input") {
  Tensor x = leaf({2}, 9), unused = leaf({2}, 10), constant = make({1, 2}, {2});
  Tensor y = (x * 2.0).sum();
  autograd::DeferredWeightGrads deferred;
  CHECK_THROWS_WITH_AS(autograd::grad_deferring_weights({y}, {unused}, {}, deferred),
                       doctest::Contains("input 0 (shape [2]) was not used to compute the outputs"), Error);
  CHECK_THROWS_WITH_AS(autograd::grad_deferring_weights({y}, {constant}, {}, deferred),
                       doctest::Contains("input 0 (shape [2]) does not require grad"), Error);
  CHECK_THROWS_WITH_AS(autograd::grad_deferring_weights({y}, {}, {}, deferred),
                       doctest::Contains("no inputs"), Error);
}
