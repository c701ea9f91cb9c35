/*
 * distributed/gradient_sync.h: the gradient steps of a split model. Each is checked against what
 * one process computes from the whole gradients: the mean over the data group, the global norm
 * of gradients split over ranks (a replicated one counted once), and the tied copies' sum.
 */
#include <doctest/doctest.h>

#include <cmath>

#include "core/grad_mode.h"
#include "distributed/gradient_sync.h"
#include "ops/ops.h"
#include "tests/distributed/mpi_test_util.h"

namespace loom::distributed {
namespace {

using test::world;

// A parameter whose gradient is `grad`.
Tensor with_grad(const Tensor& grad) {
  Tensor p = zeros(grad.sizes()).requires_grad_(true);
  p.mutable_grad() = grad.clone();
  return p;
}

double max_diff(const Tensor& a, const Tensor& b) { return (a - b).abs().max().item<double>(); }

TEST_CASE("average_gradients: the mean over the group; a parameter without a gradient keeps none") {
  const int r = world()->rank(), n = world()->size();
  Tensor a = with_grad(full({2, 3}, static_cast<double>(r + 1))), b = zeros({4}).requires_grad_(true);
  Tensor c = with_grad(arange(5, TensorOptions(kFloat32)).mul(static_cast<double>(r)));
  average_gradients({a, b, c}, *world());
  CHECK(max_diff(a.grad(), full({2, 3}, (n + 1) / 2.0)) == 0);
  CHECK_FALSE(b.grad().defined());
  CHECK(max_diff(c.grad(), arange(5, TensorOptions(kFloat32)).mul((n - 1) / 2.0)) < 1e-6);
}

TEST_CASE("clip_grad_norm_across: the norm of the whole model, a replicated gradient counted once") {
  const int r = world()->rank(), n = world()->size();
  // Rank r holds a shard with gradient (r + 1) in its 4 entries, and a replicated bias with
  // gradient 1 in its 2 entries (counted on rank 0 only).
  Tensor shard = with_grad(full({4}, static_cast<double>(r + 1))), bias = with_grad(full({2}, 1.0));
  double squares = 2;
  for (int k = 0; k < n; ++k) squares += 4.0 * (k + 1) * (k + 1);
  const double expected = std::sqrt(squares);
  std::vector<Tensor> counted{shard};
  if (r == 0) counted.push_back(bias);
  SUBCASE("below the limit: nothing changes") {
    CHECK(clip_grad_norm_across({shard, bias}, counted, expected + 1, {world().get()}) ==
          doctest::Approx(expected));
    CHECK(max_diff(shard.grad(), full({4}, static_cast<double>(r + 1))) == 0);
  }
  SUBCASE("above it: every gradient scaled to the limit") {
    CHECK(clip_grad_norm_across({shard, bias}, counted, 1.0, {world().get()}) == doctest::Approx(expected));
    const double coef = 1.0 / (expected + 1e-6);
    CHECK(shard.grad().select(0, 0).item<double>() == doctest::Approx((r + 1) * coef));
    CHECK(bias.grad().select(0, 0).item<double>() == doctest::Approx(coef));
    // The clipped pieces' norm over the group is the limit.
    std::vector<Tensor> again{shard};
    if (r == 0) again.push_back(bias);
    CHECK(clip_grad_norm_across({shard, bias}, again, 10.0, {world().get()}) == doctest::Approx(1.0).epsilon(1e-5));
  }
}

TEST_CASE("sum_tied_gradient: the first and last stages' copies both get the sum") {
  const int r = world()->rank(), n = world()->size();
  const bool holds = r == 0 || r == n - 1;
  Tensor w = with_grad(full({3}, static_cast<double>(r + 1)));
  sum_tied_gradient(w, holds, *world());
  if (holds) CHECK(max_diff(w.grad(), full({3}, static_cast<double>(1 + n))) == 0);
  // A copy whose stage had no gradient yet gets the other's.
  Tensor fresh = zeros({3}).requires_grad_(true);
  if (r == 0) fresh.mutable_grad() = full({3}, 5.0);
  sum_tied_gradient(fresh, holds, *world());
  if (holds) CHECK(max_diff(fresh.grad(), full({3}, 5.0)) == 0);
}

}  // namespace
}  // namespace loom::distributed
