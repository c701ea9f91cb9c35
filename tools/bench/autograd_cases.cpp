/*
 * Bench cases of the autograd layer.
 *   autograd_overhead  1000 iterations of x = x * 1.0001 + 0.0001 on a 16-element float32
 *                      tensor that requires grad (2000 recorded ops), then x.sum().backward():
 *                      microseconds per op for the recording forward (fwd_us_per_op) and for
 *                      forward + backward (fwd_bwd_us_per_op). The PyTorch side is
 *                      ../shared/anchors/overhead.py.
 */
#include "autograd/autograd.h"
#include "tools/bench/bench.h"

namespace loom::bench {

namespace {

constexpr int kIterations = 1000;
constexpr double kOps = 2.0 * kIterations;

Tensor chain(const Tensor& leaf) {
  Tensor x = leaf;
  for (int i = 0; i < kIterations; ++i) x = x * 1.0001 + 0.0001;
  return x;
}

std::vector<Metric> autograd_overhead(const TimingOptions& options) {
  Tensor leaf = ones({16}).requires_grad_();
  Timing forward = time_median([&] { (void)chain(leaf); }, options);
  Timing both = time_median([&] { chain(leaf).sum().backward(); }, options);
  return {{"fwd_us_per_op", forward.seconds_per_call / kOps * 1e6, "us"},
          {"fwd_bwd_us_per_op", both.seconds_per_call / kOps * 1e6, "us"}};
}

}  // namespace

std::vector<BenchCase> autograd_cases() {
  return {BenchCase("autograd_overhead", "us",
                    "per-op cost of recording and running the graph: 2000 tiny ops, then backward",
                    autograd_overhead)};
}

}  // namespace loom::bench
