/*
 * The textbook ring collectives (distributed/ring.h) against two independent references: the
 * backend's native collective on the same inputs, and the reduction computed locally (every rank
 * rebuilds every rank's input from its seed). Also the ring's traffic: a ring all-reduce of S
 * bytes sends exactly 2 S minus two of the rank's chunks, 2 (N-1)/N * S when N divides S.
 *
 * Every TEST_CASE runs on every rank and calls the same collectives in the same order.
 * Sums of f32/f64 are compared with assert_close tolerances (the ring adds in another order than
 * MPI does); integers, Max and Min exactly.
 */
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "distributed/ring.h"
#include "ops/ops.h"
#include "tests/distributed/mpi_test_util.h"
#include "tests/test_util.h"

namespace loom::distributed {
namespace {

using test::world;

// Restores the group's algorithm at the end of a test, whatever the test set it to.
class AlgorithmGuard {
 public:
  explicit AlgorithmGuard(ProcessGroup& group) : group_(group), saved_(group.algorithm()) {}
  ~AlgorithmGuard() { group_.set_algorithm(saved_); }

 private:
  ProcessGroup& group_;
  Algorithm saved_;
};

// Rank `rank`'s input in test case `salt`: a function of (salt, rank) only, so that every rank
// can rebuild every peer's input for the local reference.
Tensor rank_input(int rank, IntArrayRef sizes, DType dtype, uint64_t salt) {
  Generator generator(salt * 1000 + static_cast<uint64_t>(rank) + 1);
  if (is_floating(dtype)) return randn(sizes, dtype, &generator);
  return randint(-1000, 1000, sizes, dtype, &generator);
}

// The reduction of `inputs`, in rank order, in one process.
Tensor reduce_locally(const std::vector<Tensor>& inputs, ReduceOp op) {
  Tensor result = inputs[0].clone();
  for (size_t i = 1; i < inputs.size(); ++i) {
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg: result = add(result, inputs[i]); break;
      case ReduceOp::Max: result = maximum(result, inputs[i]); break;
      case ReduceOp::Min: result = minimum(result, inputs[i]); break;
    }
  }
  if (op == ReduceOp::Avg) result = div(result, static_cast<int64_t>(inputs.size()));
  return result;
}

// Sums and averages of floats may differ by reassociation; Max, Min and integers are exact.
void check_matches(const Tensor& actual, const Tensor& expected, ReduceOp op, const std::string& what) {
  INFO(what);
  // CHECK, not REQUIRE, here and below: a test case left early on one rank would leave the
  // others waiting in its next collective.
  CHECK(actual.sizes() == expected.sizes());
  CHECK(actual.dtype() == expected.dtype());
  if (actual.sizes() != expected.sizes() || actual.dtype() != expected.dtype()) return;
  bool exact = op == ReduceOp::Max || op == ReduceOp::Min || !actual.is_floating_point();
  test::Tol tol = exact ? test::Tol{0, 0} : test::tol_for(actual.dtype());
  std::string bad = test::mismatch(actual.to_vector<double>(), expected.to_vector<double>(), tol);
  CHECK_MESSAGE(bad.empty(), what, ": ", bad);
}

int64_t shape_numel(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

const std::vector<DType> kDtypes = {kFloat32, kFloat64, kInt64};
const std::vector<ReduceOp> kOps = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min};

// Runs ring and native all-reduce on the same input and checks both against the local reduction.
void check_all_reduce(ProcessGroup& group, std::vector<int64_t> sizes, DType dtype, ReduceOp op, uint64_t salt) {
  const std::string what = std::string("all_reduce ") + reduce_op_name(op) + " " + std::string(dtype_name(dtype)) +
                           " numel " + std::to_string(shape_numel(sizes)) + " on " + group.describe();
  std::vector<Tensor> inputs;
  for (int r = 0; r < group.size(); ++r) inputs.push_back(rank_input(r, sizes, dtype, salt));
  Tensor expected = reduce_locally(inputs, op);

  AlgorithmGuard guard(group);
  Tensor ring = inputs[group.rank()].clone();
  group.set_algorithm(Algorithm::Ring);
  group.all_reduce(ring, op);
  Tensor native = inputs[group.rank()].clone();
  group.set_algorithm(Algorithm::Native);
  group.all_reduce(native, op);

  check_matches(ring, native, op, what + ": ring vs native");
  check_matches(ring, expected, op, what + ": ring vs local reference");
}

}  // namespace

TEST_CASE("ring all_reduce equals the native all_reduce and the local reduction") {
  ProcessGroup& group = *world();
  // 5 and 1000 + 3 are not divisible by 2 or 4 (chunks of unequal size); 1 leaves chunks empty;
  // [7, 3] and [2, 0, 3] are not 1-D (the ring flattens them).
  const std::vector<std::vector<int64_t>> shapes = {{0}, {1}, {5}, {1000}, {1003}, {1 << 20}, {7, 3}, {2, 0, 3}};
  uint64_t salt = 1;
  for (DType dtype : kDtypes)
    for (ReduceOp op : kOps) {
      if (op == ReduceOp::Avg && !is_floating(dtype)) continue;  // Avg needs a floating dtype
      for (const auto& shape : shapes) check_all_reduce(group, shape, dtype, op, salt++);
    }
}

TEST_CASE("ring all_gather equals the native all_gather and the concatenation") {
  ProcessGroup& group = *world();
  AlgorithmGuard guard(group);
  const int n = group.size();
  // input [rows, *] -> output [n * rows, *]
  const std::vector<std::vector<int64_t>> shapes = {{0}, {1}, {5}, {1000, 3}, {1 << 18}, {2, 3, 5}, {0, 4}};
  uint64_t salt = 100;
  for (DType dtype : kDtypes)
    for (const auto& shape : shapes) {
      INFO("all_gather ", dtype_name(dtype), " input ", IntArrayRef(shape), " on ", group.describe());
      std::vector<Tensor> inputs;
      for (int r = 0; r < n; ++r) inputs.push_back(rank_input(r, shape, dtype, salt));
      ++salt;
      Tensor expected = cat(inputs, 0);

      std::vector<int64_t> out_shape = shape;
      out_shape[0] *= n;
      Tensor ring = full(out_shape, -7, dtype), native = full(out_shape, -7, dtype);
      group.set_algorithm(Algorithm::Ring);
      group.all_gather(inputs[group.rank()], ring);
      group.set_algorithm(Algorithm::Native);
      group.all_gather(inputs[group.rank()], native);
      CHECK(equal(ring, native));
      CHECK(equal(ring, expected));
    }
}

TEST_CASE("ring reduce_scatter equals the native reduce_scatter and the local reduction") {
  ProcessGroup& group = *world();
  AlgorithmGuard guard(group);
  const int n = group.size();
  // output [rows, *], input [n * rows, *]
  const std::vector<std::vector<int64_t>> shapes = {{0}, {1}, {5}, {1000, 3}, {1 << 18}, {3, 0}};
  uint64_t salt = 200;
  for (DType dtype : kDtypes)
    for (ReduceOp op : kOps) {
      if (op == ReduceOp::Avg && !is_floating(dtype)) continue;
      for (const auto& shape : shapes) {
        std::vector<int64_t> in_shape = shape;
        in_shape[0] *= n;
        const std::string what = std::string("reduce_scatter ") + reduce_op_name(op) + " " + std::string(dtype_name(dtype)) +
                                 " input " + std::to_string(shape_numel(in_shape)) + " elements on " + group.describe();
        std::vector<Tensor> inputs;
        for (int r = 0; r < n; ++r) inputs.push_back(rank_input(r, in_shape, dtype, salt));
        ++salt;
        const int64_t rows = shape[0];
        Tensor expected = reduce_locally(inputs, op).narrow(0, group.rank() * rows, rows).contiguous();

        Tensor input = inputs[group.rank()];
        Tensor input_before = input.clone();
        Tensor ring = full(shape, -7, dtype), native = full(shape, -7, dtype);
        group.set_algorithm(Algorithm::Ring);
        group.reduce_scatter(input, ring, op);
        group.set_algorithm(Algorithm::Native);
        group.reduce_scatter(input, native, op);
        check_matches(ring, native, op, what + ": ring vs native");
        check_matches(ring, expected, op, what + ": ring vs local reference");
        CHECK_MESSAGE(equal(input, input_before), what, ": the ring changed its input");
      }
    }
}

TEST_CASE("a ring all_reduce sends 2 (N-1)/N * S bytes per rank") {
  ProcessGroup& group = *world();
  AlgorithmGuard guard(group);
  group.set_algorithm(Algorithm::Ring);
  const int n = group.size(), r = group.rank();

  // Divisible: 1024 N f32 elements, S = 4 KiB * N: each rank sends 2 (N-1) of the N chunks of
  // S / N bytes, in 2 (N-1) messages.
  {
    const int64_t numel = 1024 * n, bytes = numel * 4;
    Tensor t = randn({numel});
    group.reset_stats();
    group.all_reduce(t);
    CommStats stats = group.stats();
    CHECK(stats.bytes_sent == static_cast<uint64_t>(2 * (n - 1) * bytes / n));
    CHECK(stats.messages_sent == static_cast<uint64_t>(2 * (n - 1)));
  }
  // Not divisible: 1003 f64 elements. With the split of ring.cpp (chunk i has q + 1 elements for
  // i < M mod N, q = M / N, else q), the reduce-scatter sends every chunk but (r + 1) mod N and
  // the all-gather every chunk but (r + 2) mod N.
  {
    const int64_t numel = 1003, q = numel / n, m = numel % n;
    auto chunk = [&](int i) { return q + (i < m ? 1 : 0); };
    const int64_t expected_elements = 2 * numel - chunk((r + 1) % n) - chunk((r + 2) % n);
    Tensor t = randn({numel}, kFloat64);
    group.reset_stats();
    group.all_reduce(t, ReduceOp::Max);
    CHECK(group.stats().bytes_sent == static_cast<uint64_t>(expected_elements * 8));
    // The total over the ranks is exactly 2 (N-1)/N of N tensors: 2 (N-1) * S bytes.
    Tensor total = full({1}, static_cast<int64_t>(group.stats().bytes_sent), kInt64);
    group.set_algorithm(Algorithm::Native);
    group.all_reduce(total);
    CHECK(total.item<int64_t>() == 2 * (n - 1) * numel * 8);
  }
  // all_gather and reduce_scatter are one phase each: (N-1) blocks of `rows` rows per rank.
  {
    const int64_t rows = 6, cols = 5, block_bytes = rows * cols * 4;
    Tensor big = randn({n * rows, cols}), small = empty({rows, cols});
    group.set_algorithm(Algorithm::Ring);
    group.reset_stats();
    group.all_gather(small.fill_(1.0), big);
    CHECK(group.stats().bytes_sent == static_cast<uint64_t>((n - 1) * block_bytes));
    group.reset_stats();
    group.reduce_scatter(big, small);
    CHECK(group.stats().bytes_sent == static_cast<uint64_t>((n - 1) * block_bytes));
  }
  group.reset_stats();
}

TEST_CASE("ring collectives on a one-member group and on a reversed ring") {
  ProcessGroup& group = *world();
  const int n = group.size();
  // A group of rank 0 alone: the ring has no neighbours and sends nothing; the results are the
  // inputs (Avg divides by 1). new_group is collective; only rank 0 gets a group.
  std::shared_ptr<ProcessGroup> alone = group.new_group({0});
  CHECK((alone != nullptr) == (group.rank() == 0));
  if (alone) {
    alone->set_algorithm(Algorithm::Ring);
    Tensor x = randn({3, 4}), y = x.clone();
    alone->all_reduce(y, ReduceOp::Avg);
    CHECK(equal(y, x));
    Tensor gathered = empty({3, 4});
    alone->all_gather(x, gathered);
    CHECK(equal(gathered, x));
    Tensor scattered = empty({3, 4});
    alone->reduce_scatter(x, scattered, ReduceOp::Max);
    CHECK(equal(scattered, x));
    CHECK(alone->stats().bytes_sent == 0);
  }

  // The ring follows the group's own ranks: in the group of the world ranks in reverse order,
  // world rank w is group rank n - 1 - w, and its right neighbour is world rank w - 1.
  std::vector<int> reversed;
  for (int w = n - 1; w >= 0; --w) reversed.push_back(w);
  std::shared_ptr<ProcessGroup> backwards = group.new_group(reversed);
  CHECK(backwards != nullptr);
  if (!backwards) return;
  CHECK(backwards->rank() == n - 1 - group.rank());
  check_all_reduce(*backwards, {1001}, kFloat32, ReduceOp::Sum, 300);
  check_all_reduce(*backwards, {1001}, kInt64, ReduceOp::Min, 301);
}

TEST_CASE("ring collectives reject bad inputs on every rank before sending anything") {
  ProcessGroup& group = *world();
  AlgorithmGuard guard(group);
  group.set_algorithm(Algorithm::Ring);
  const int n = group.size();
  // Each check fails locally and identically on every rank, so no rank is left inside a ring.
  Tensor strided = randn({4, 6}).t();
  CHECK_THROWS_WITH_AS(group.all_reduce(strided), doctest::Contains("contiguous"), Error);
  CHECK_THROWS_WITH_AS(group.all_reduce(randint(0, 5, {8}), ReduceOp::Avg), doctest::Contains("floating"), Error);
  CHECK_THROWS_WITH_AS(group.all_gather(randn({2, 3}), empty({2 * n + 1, 3})), doctest::Contains("ring_all_gather"),
                       Error);
  CHECK_THROWS_WITH_AS(group.all_gather(randn({2, 3}), empty({2 * n, 3}, kFloat64)), doctest::Contains("dtype"),
                       Error);
  CHECK_THROWS_WITH_AS(group.reduce_scatter(randn({2 * n, 3}), empty({2, 4})), doctest::Contains("ring_reduce_scatter"),
                       Error);
  // The ring still works after the errors.
  check_all_reduce(group, {9}, kFloat32, ReduceOp::Sum, 400);
}

}  // namespace loom::distributed
