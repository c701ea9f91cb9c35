/*
 * The list of all cases, layer by layer, and the timing loop they share.
 */
#include <algorithm>
#include <chrono>

#include "tools/bench/bench.h"

namespace loom::bench {

Timing time_median(const std::function<void()>& run, const TimingOptions& options) {
  using Clock = std::chrono::steady_clock;
  // Warm-up: caches, primitive creation, allocator, page faults.
  auto start = Clock::now();
  int calls = 0;
  do {
    run();
    ++calls;
  } while (std::chrono::duration<double>(Clock::now() - start).count() < options.min_time / 2);
  double per_call = std::chrono::duration<double>(Clock::now() - start).count() / calls;
  int per_sample = std::max(1, static_cast<int>(options.min_time / per_call));

  std::vector<double> times;
  for (int s = 0; s < options.samples; ++s) {
    auto t0 = Clock::now();
    for (int i = 0; i < per_sample; ++i) run();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / per_sample);
  }
  std::sort(times.begin(), times.end());
  return {times[times.size() / 2], per_sample, options.samples};
}

const std::vector<BenchCase>& all_cases() {
  static const std::vector<BenchCase> cases = [] {
    std::vector<BenchCase> all;
    for (auto layer : {op_cases, autograd_cases, nn_cases, data_cases, quant_cases, distill_cases,
                       checkpoint_cases, cuda_cases, predict_cases}) {
      std::vector<BenchCase> c = layer();
      all.insert(all.end(), c.begin(), c.end());
    }
    return all;
  }();
  return cases;
}

}  // namespace loom::bench
