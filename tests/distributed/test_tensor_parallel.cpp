/*
 * Tensor parallelism over the whole world (t = 2 or 4 ranks): the communication operators' forward
 * and backward, and a column-then-row MLP against the same MLP in one process (every rank builds
 * the reference locally from the same seed): same output, same input gradient, and each rank's
 * weight gradients equal to its slice of the reference's, up to float reassociation.
 */
#include <doctest/doctest.h>

#include "autograd/autograd.h"
#include "core/random.h"
#include "distributed/tensor_parallel/layers.h"
#include "distributed/tensor_parallel/regions.h"
#include "nn/layers/linear.h"
#include "ops/ops.h"
#include "tests/distributed/mpi_test_util.h"
#include "tests/test_util.h"

namespace loom::distributed {
namespace {

using test::world;

double max_diff(const Tensor& a, const Tensor& b) { return (a - b).abs().max().item<double>(); }

TEST_CASE("tensor-parallel regions: each forward and its conjugate backward") {
  const int t = world()->size(), r = world()->rank();
  Tensor x = full({2, 3}, static_cast<double>(r + 1)).requires_grad_(true);
  // g: forward sums over the ranks; backward passes the gradient through.
  Tensor summed = reduce_from_tensor_parallel_region(x, world());
  CHECK(summed.select(0, 0).select(0, 0).item<double>() == t * (t + 1) / 2);
  summed.sum().backward();
  CHECK(max_diff(x.grad(), ones({2, 3})) == 0.0);
  // f: forward passes through; backward sums the ranks' gradients.
  Tensor y = full({4}, 1.0).requires_grad_(true);
  Tensor copied = copy_to_tensor_parallel_region(y, world());
  (copied * static_cast<double>(r + 1)).sum().backward();
  CHECK(max_diff(y.grad(), full({4}, t * (t + 1) / 2.0)) == 0.0);
  // gather: rank r's [2, 2] block lands at columns [2r, 2r + 2); backward keeps my columns.
  Tensor part = (arange(4).reshape({2, 2}).to(kFloat32) + 10.0 * r).requires_grad_(true);
  Tensor all = gather_from_tensor_parallel_region(part, world());
  REQUIRE(all.sizes() == IntArrayRef{2, 2 * t});
  for (int q = 0; q < t; ++q)
    CHECK(max_diff(all.slice(1, 2 * q, 2 * q + 2), arange(4).reshape({2, 2}).to(kFloat32) + 10.0 * q) == 0.0);
  (all * arange(2 * t).to(kFloat32)).sum().backward();
  CHECK(max_diff(part.grad(), arange(2 * r, 2 * r + 2).to(kFloat32).expand({2, 2})) == 0.0);
  // scatter: the inverse.
  Tensor whole = arange(2 * t).to(kFloat32).reshape({1, 2 * t}).requires_grad_(true);
  Tensor mine = scatter_to_tensor_parallel_region(whole, world());
  CHECK(max_diff(mine, arange(2 * r, 2 * r + 2).to(kFloat32).reshape({1, 2})) == 0.0);
  CHECK(test::error_of([&] { scatter_to_tensor_parallel_region(ones({1, 2 * t + 1}), world()); })
            .find("not divisible") != std::string::npos);
}

TEST_CASE("tensor-parallel MLP (column then row) equals the single-process MLP, forward and backward") {
  const int t = world()->size(), r = world()->rank();
  const int64_t in = 6, hidden = 8, out = 5;
  manual_seed(11);
  nn::Linear ref1(in, hidden), ref2(hidden, out);
  manual_seed(11);
  ColumnParallelLinear col(in, hidden, world());
  RowParallelLinear row(hidden, out, world());
  const int64_t h = hidden / t;
  CHECK(max_diff(col.weight, ref1.weight.slice(0, r * h, (r + 1) * h)) == 0.0);
  CHECK(max_diff(row.weight, ref2.weight.slice(1, r * h, (r + 1) * h)) == 0.0);

  Generator g(5);
  Tensor x_ref = randn({4, in}, kFloat32, &g).requires_grad_(true);
  Tensor x = x_ref.detach().clone().requires_grad_(true);
  Tensor target = randn({4, out}, kFloat32, &g);
  Tensor y_ref = ref2(ref1(x_ref).relu());
  Tensor y = row(col(x).relu());
  CHECK(max_diff(y, y_ref) < 1e-5);
  ((y_ref - target) * (y_ref - target)).sum().backward();
  ((y - target) * (y - target)).sum().backward();
  CHECK(max_diff(x.grad(), x_ref.grad()) < 1e-5);
  CHECK(max_diff(col.weight.grad(), ref1.weight.grad().slice(0, r * h, (r + 1) * h)) < 1e-5);
  CHECK(max_diff(col.bias.grad(), ref1.bias.grad().slice(0, r * h, (r + 1) * h)) < 1e-5);
  CHECK(max_diff(row.weight.grad(), ref2.weight.grad().slice(1, r * h, (r + 1) * h)) < 1e-5);
  CHECK(max_diff(row.bias.grad(), ref2.bias.grad()) < 1e-5);

  // gather_output and a row layer that splits its own input give the same function.
  manual_seed(11);
  ColumnParallelLinear gathered(in, hidden, world(), true, /*gather_output=*/true);
  NoGradGuard no_grad;
  CHECK(max_diff(gathered(x), ref1(x)) < 1e-5);
  manual_seed(12);
  nn::Linear ref3(hidden, out);
  manual_seed(12);
  RowParallelLinear splitting(hidden, out, world(), true, /*input_is_parallel=*/false);
  Tensor full_input = randn({3, hidden}, kFloat32, &g);
  CHECK(max_diff(splitting(full_input), ref3(full_input)) < 1e-5);
  CHECK(test::error_of([&] { ColumnParallelLinear(4, 4 * t + 1, world()); }).find("not divisible") !=
        std::string::npos);
}

}  // namespace
}  // namespace loom::distributed
