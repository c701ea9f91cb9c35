/*
 * Input checks made on the GPU (core/cuda/device_checks.h): an eager op with a bad class or index
 * does not wait for its check; the host's next wait for the GPU reports it, once, naming the
 * check and the position; a wait for one stream reads that stream's checks only; blocking checks
 * throw at the op; a stream that runs more distinct checks than it keeps words for still reports
 * every failure; eager and replayed failures before one wait make one error that counts them.
 * The values come from the CPU's nll_loss (the bad samples are left out).
 */
#include <doctest/doctest.h>

#include "core/cuda.h"
#include "core/cuda_graph.h"
#include "core/random.h"
#include "ops/ops.h"
#include "tests/gpu_test.h"

#if LOOM_WITH_CUDA
#include "core/cuda/stream.h"
#endif

using namespace loom;

namespace {

constexpr const char* kReportedAtWait = "; the check ran on the GPU and is reported at this synchronisation";

// Blocking checks for one scope (the setting is process-wide).
struct BlockingChecks {
  BlockingChecks() { cuda::set_blocking_checks(true); }
  ~BlockingChecks() { cuda::set_blocking_checks(false); }
  BlockingChecks(const BlockingChecks&) = delete;
  BlockingChecks& operator=(const BlockingChecks&) = delete;
};

TensorOptions cuda_int64() {
  return TensorOptions(kInt64).device(Device::cuda());
}

}  // namespace

TEST_CASE("device checks: a bad target is reported at the next wait for the GPU, once, and left out") {
  LOOM_REQUIRE_GPU();
  manual_seed(1);
  const Tensor logp = log_softmax(randn({4, 3}), 1);
  const Tensor target = tensor<int64_t>({0, 5, 2, -1}, {4});  // 5 and -1 are not classes of 3
  Tensor out;
  CHECK_NOTHROW(
      out = nll_loss(logp.to(Device::cuda()), target.to(Device::cuda()), Tensor(), -100, Reduction::None));
  CHECK_THROWS_WITH_AS(
      (void)out.to(kCPU),
      doctest::Contains(
          (std::string("nll_loss: a target out of bounds for 3 classes (at batch index 1)") + kReportedAtWait)
              .c_str()),
      Error);
  // Reported once: the result reads now, with the bad samples' losses 0, as for ignored ones.
  const Tensor host = out.to(kCPU);
  const Tensor expected =
      nll_loss(logp, tensor<int64_t>({0, -100, 2, -100}, {4}), Tensor(), -100, Reduction::None);
  CHECK(equal(host, expected));
  CHECK_NOTHROW(cuda::synchronize());
}

TEST_CASE("device checks: a wait for one stream reads its own checks, cuda::synchronize() every stream's") {
  LOOM_REQUIRE_GPU();
#if LOOM_WITH_CUDA
  const Tensor x = zeros({5, 3}, Device::cuda());
  const Tensor bad = tensor<int64_t>({1, 7, 0}, {3}).to(Device::cuda());
  const Tensor other = ones({2}, Device::cuda());
  cuda::synchronize();  // x and bad are written before the side stream reads them
  cuda::OwnedCudaStream side;
  Tensor rows;
  {
    cuda::CudaStreamGuard on_side(side);
    rows = index_select(x, 0, bad);
  }
  CHECK(other.to(kCPU).sum().item<double>() == 2.0);  // a wait for the current stream only
  CHECK_THROWS_WITH_AS(
      cuda::synchronize(),
      doctest::Contains("index_select: an index out of range for dim 0 with size 5 (at index "
                        "position 1)"),
      Error);
  {
    cuda::CudaStreamGuard on_side(side);
    rows = gather(x, 1, tensor<int64_t>({0, -1, 2, 1, 0, 0}, {2, 3}).to(Device::cuda()));
    CHECK_THROWS_WITH_AS(
        (void)rows.to(kCPU),  // a wait for the side stream
        doctest::Contains("gather: an index out of range for dim 1 with size 3 (at index position 1)"),
        Error);
  }
  CHECK_NOTHROW(cuda::synchronize());
#endif
}

TEST_CASE("device checks: blocking checks throw at the op") {
  LOOM_REQUIRE_GPU();
  const Tensor grad = ones({1, 1, 2, 2}, Device::cuda());
  const Tensor bad =
      tensor<int64_t>({0, 3, 16, 15}, {1, 1, 2, 2}).to(Device::cuda());  // 16: not in a 4x4 plane
  const Pool2dParams p = make_pool2d_params({2, 2}, {2, 2}, {0, 0}, {1, 1}, false, true);
  {
    BlockingChecks blocking;
    CHECK(cuda::blocking_checks());
    CHECK_THROWS_WITH_AS(
        max_pool2d_backward(grad, bad, {1, 1, 4, 4}, p),
        doctest::Contains("max_pool2d_backward: an index out of range for an input plane of 4x4 "
                          "(at position 2); the check ran on the GPU (blocking checks: reported "
                          "at the op)"),
        Error);
    CHECK_NOTHROW(cuda::synchronize());
  }
  CHECK_FALSE(cuda::blocking_checks());
  Tensor gx;
  CHECK_NOTHROW(gx = max_pool2d_backward(grad, bad, {1, 1, 4, 4}, p));
  CHECK_THROWS_WITH_AS(cuda::synchronize(), doctest::Contains("(at position 2)"), Error);
}

TEST_CASE("device checks: more distinct checks on a stream than it keeps words for") {
  LOOM_REQUIRE_GPU();
  // Index tensors made on the device: a copy from the host would itself wait and report.
  const Tensor first = zeros({1}, cuda_int64());
  const Tensor beyond = full({1}, 1000, cuda_int64());  // no row of any tensor here
  // index_select over k rows for k = 1..n: n distinct checks, one of which fails.
  auto select_each = [&](int64_t n, int64_t bad_rows) {
    for (int64_t k = 1; k <= n; ++k)
      (void)index_select(zeros({k, 2}, Device::cuda()), 0, k == bad_rows ? beyond : first);
  };
  const auto failure = [](int64_t rows) {
    return detail::concat("index_select: an index out of range for dim 0 with size ", rows,
                          " (at index position 0)");
  };
  cuda::synchronize();
  // The failure among the first words comes out when the words run out, before the loop ends.
  CHECK_THROWS_WITH_AS(select_each(100, 4), doctest::Contains(failure(4).c_str()), Error);
  CHECK_NOTHROW(cuda::synchronize());
  // A failure among the words of the second round is read at the next wait.
  CHECK_NOTHROW(select_each(70, 68));
  CHECK_THROWS_WITH_AS(cuda::synchronize(), doctest::Contains(failure(68).c_str()), Error);
  CHECK_NOTHROW(cuda::synchronize());
}

TEST_CASE("device checks: an eager and a replayed failure before one wait make one error, counted") {
  LOOM_REQUIRE_GPU();
  const Tensor x = zeros({5, 3}, Device::cuda());
  Tensor index = zeros({2}, cuda_int64());
  Tensor rows;
  cuda::CudaGraph graph;
  cuda::capture(graph, [&] { rows = index_select(x, 0, index); });
  index.fill_(8);  // no row of 5
  graph.replay();
  (void)gather(x, 1, full({1, 1}, -3, cuda_int64()));
  CHECK_THROWS_WITH_AS(
      cuda::synchronize(),
      doctest::Contains("gather: an index out of range for dim 1 with size 3 (at index position 0) "
                        "(and 1 more failed check(s))"),
      Error);
  CHECK_NOTHROW(cuda::synchronize());
}
