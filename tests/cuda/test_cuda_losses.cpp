/*
 * The losses of nn/loss.h that are composites of elementwise ops (l1, smooth_l1, huber and
 * binary_cross_entropy on probabilities) on CUDA against the CPU, forward and backward, and
 * binary_cross_entropy's range check on a CUDA input. (The op table's tests, tests/cuda/ops,
 * link no nn.)
 */
#include <vector>

#include "nn/loss.h"
#include "tests/cuda/ops/cuda_test_util.h"

namespace loom {
namespace {

using test::check_cuda_matches_cpu;
using test::label;
using test::pat;

TEST_CASE("l1, smooth_l1, huber and binary_cross_entropy match the CPU, forward and backward") {
  LOOM_REQUIRE_GPU();
  namespace F = nn::functional;
  for (DType dt : {kFloat32, kFloat64}) {
    INFO(label("regression losses", dt));
    check_cuda_matches_cpu(
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{F::l1_loss(in[0], in[1]),
                                     F::smooth_l1_loss(in[0], in[1], Reduction::Sum, 0.5),
                                     F::huber_loss(in[0], in[1], Reduction::None, 0.7)};
        },
        {pat({3, 5}, 0.2, 2.0).to(dt), pat({3, 5}, 1.4, 2.0).to(dt)});
    INFO(label("binary_cross_entropy", dt));
    // Probabilities with both poles, a weight broadcast along the rows.
    Tensor p = (pat({3, 5}, 0.6, 0.5) + 0.5).to(dt);
    p.select(0, 0).select(0, 0).fill_(0.0);
    p.select(0, 1).select(0, 2).fill_(1.0);
    check_cuda_matches_cpu(
        [](const std::vector<Tensor>& in) { return F::binary_cross_entropy(in[0], in[1], in[2]); },
        {p, (pat({3, 5}, 2.1, 0.5) + 0.5).to(dt), (pat({5}, 0.8, 0.5) + 1.0).to(dt)});
  }
}

TEST_CASE("binary_cross_entropy on CUDA refuses probabilities outside [0, 1] as on the CPU") {
  LOOM_REQUIRE_GPU();
  Tensor p = test::make({0.2, 1.5}, kFloat32).to(Device::cuda());
  CHECK_THROWS_WITH_AS(nn::functional::binary_cross_entropy(p, zeros({2}).to(Device::cuda())),
                       doctest::Contains("got values in [0.2, 1.5]"), Error);
}

}  // namespace
}  // namespace loom
