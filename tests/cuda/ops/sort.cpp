/*
 * CUDA cumsum and sort against the CPU, forward and backward: every dtype, every dim, both
 * directions, non-contiguous inputs, NaN and ties (whose order must match exactly: both backends
 * sort stably), and shapes that reach every kernel shape of ops/cuda/sort.cu: cumsum's
 * column-per-thread kernel and its block scan over rows of one and several tiles; sort in
 * shared memory and, for a line too long for it, in global scratch. The composites (argsort,
 * topk, kthvalue, median) run on both backends too.
 */
#include <cmath>
#include <vector>

#include "tests/cuda/ops/cuda_test_util.h"

namespace loom {
namespace {

using test::check_cuda_matches_cpu;
using test::pat;

LOOM_CUDA_COVERS(Op::cumsum, Op::sort);

const std::vector<DType> kAllDtypes = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt8,
                                       kUInt8,   kInt32,   kInt64,   kBool};

// Values of dtype dt with ties: pat truncated to quarters (floating) or to integers.
Tensor tied(IntArrayRef shape, DType dt, double seed) {
  if (dt == kBool) return gt(pat(shape, seed), 0.1);
  if (is_floating(dt)) return div((pat(shape, seed, 8.0) * 4.0).to(kInt32).to(dt), 4.0);
  return pat(shape, seed, 2.9).to(dt);
}

// Unnormalised weights of 3 rows over 8 categories, some of them zero.
Tensor make_weights() {
  return test::make({0.5, 0, 2, 1, 0, 3, 0.25, 1,  //
                     1,   1, 1, 1, 1, 1, 1,    1,  //
                     0,   0, 0, 9, 1, 2, 3,    0.1},
                    {3, 8}, kFloat32);
}

TEST_CASE("sort: sort matches the CPU for every dtype, dim and direction, ties included") {
  LOOM_REQUIRE_GPU();
  for (DType dt : kAllDtypes)
    for (int64_t dim : {0, 1, -1})
      for (bool descending : {false, true}) {
        CAPTURE(dt);
        CAPTURE(dim);
        CAPTURE(descending);
        check_cuda_matches_cpu(
            [&](const std::vector<Tensor>& in) {
              auto [v, i] = sort(in[0], dim, descending);
              return std::vector<Tensor>{v, i};
            },
            {tied({6, 5, 7}, dt, 0.3)});
      }
}

TEST_CASE("sort: sort of NaN, non-contiguous, long (global scratch), 0-dim and empty inputs") {
  LOOM_REQUIRE_GPU();
  Tensor with_nan = pat({4, 33}, 1.1);
  with_nan = where(gt(with_nan, 0.3), std::nan(""), with_nan);
  for (bool descending : {false, true})
    check_cuda_matches_cpu(
        [&](const std::vector<Tensor>& in) {
          auto [v, i] = in[0].sort(1, descending);
          return std::vector<Tensor>{v, i};
        },
        {with_nan});
  auto sorted_of = [](const Tensor& x, int64_t dim) {
    auto [v, i] = sort(x, dim);
    return std::vector<Tensor>{v, i};
  };
  check_cuda_matches_cpu([&](const std::vector<Tensor>& in) { return sorted_of(in[0].t(), 1); },
                         {pat({9, 4}, 2.0)});
  check_cuda_matches_cpu(
      [&](const std::vector<Tensor>& in) { return sorted_of(in[0].slice(1, 0, 20, 3), 1); },
      {tied({3, 20}, kBFloat16, 2.5)});
  // 5000 float32s: 8192 padded pairs, 96 KB, more than a block's shared memory: global scratch.
  check_cuda_matches_cpu([&](const std::vector<Tensor>& in) { return sorted_of(in[0], 0); },
                         {pat({5000}, 3.0)});
  check_cuda_matches_cpu([&](const std::vector<Tensor>& in) { return sorted_of(in[0], 0); },
                         {tied({3000, 2}, kFloat64, 3.5)});
  check_cuda_matches_cpu([&](const std::vector<Tensor>& in) { return sorted_of(in[0], 0); }, {pat({}, 4.0)});
  check_cuda_matches_cpu([&](const std::vector<Tensor>& in) { return sorted_of(in[0], 1); },
                         {pat({3, 0}, 4.0)});
}

TEST_CASE("sort: argsort, topk, kthvalue and median match the CPU") {
  LOOM_REQUIRE_GPU();
  const Tensor x = tied({5, 12}, kFloat32, 5.0);
  check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return test::one(argsort(in[0], 1, true)); },
                         {x});
  for (bool largest : {true, false})
    check_cuda_matches_cpu(
        [&](const std::vector<Tensor>& in) {
          auto [v, i] = topk(in[0], 3, 1, largest);
          return std::vector<Tensor>{v, i};
        },
        {x});
  check_cuda_matches_cpu(
      [](const std::vector<Tensor>& in) {
        auto [v, i] = kthvalue(in[0], 2, 0, true);
        return std::vector<Tensor>{v, i};
      },
      {x.to(kBFloat16)});
  Tensor with_nan = where(gt(pat({6, 7}, 6.0), 0.45), std::nan(""), pat({6, 7}, 6.5));
  check_cuda_matches_cpu(
      [](const std::vector<Tensor>& in) {
        auto [v, i] = median(in[0], 1);
        return std::vector<Tensor>{v, i, median(in[0].slice(0, 3, 6))};
      },
      {with_nan});
}

TEST_CASE("sort: cumsum matches the CPU along every dim, for every dtype, in one tile and several") {
  LOOM_REQUIRE_GPU();
  for (DType dt : kAllDtypes)
    for (int64_t dim : {0, 1, 2}) {
      CAPTURE(dt);
      CAPTURE(dim);
      // Integers: int64 sums on both; 16-bit floats: float32 sums added in another order.
      check_cuda_matches_cpu([&](const std::vector<Tensor>& in) { return test::one(cumsum(in[0], dim)); },
                             {tied({3, 4, 70}, dt, 7.0)});
    }
  // Rows of 1500: three tiles of 512, each adding the carry of the tiles before.
  for (DType dt : {kFloat32, kBFloat16, kInt32})
    check_cuda_matches_cpu(
        [&](const std::vector<Tensor>& in) { return test::one(in[0].cumsum(1, kFloat64)); },
        {tied({2, 1500}, dt, 8.0)});
  check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return test::one(cumsum(in[0], 1)); },
                         {pat({2, 1500}, 8.5)});
  check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return test::one(cumsum(in[0].t(), 0)); },
                         {pat({6, 9}, 9.0)});
  check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return test::one(cumsum(in[0], 0, kInt8)); },
                         {tied({300}, kInt32, 9.5) * 50});
  check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return test::one(cumsum(in[0], 0)); },
                         {pat({}, 10.0)});
}

TEST_CASE("sort: multinomial draws the same samples as the CPU from the same generator state") {
  LOOM_REQUIRE_GPU();
  const Tensor w = make_weights();
  for (bool replacement : {true, false}) {
    Generator cpu_gen(77), gpu_gen(77);
    const Tensor cpu = multinomial(w, 4, replacement, &cpu_gen);
    const Tensor gpu = multinomial(w.to(Device::cuda()), 4, replacement, &gpu_gen);
    CHECK(gpu.is_cuda());
    CHECK(gpu.to(kCPU).to_vector<int64_t>() == cpu.to_vector<int64_t>());
  }
}

}  // namespace
}  // namespace loom
