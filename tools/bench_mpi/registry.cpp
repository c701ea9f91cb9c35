/*
 * The list of all distributed cases and the timing loop they share (see bench_mpi.h).
 */
#include <algorithm>
#include <chrono>

#include "ops/ops.h"
#include "tools/bench_mpi/bench_mpi.h"

namespace loom::bench_mpi {
namespace {

// The largest of the ranks' values. The timing's own all-reduce always uses the backend's
// native algorithm, whatever algorithm the case is measuring.
double max_over_ranks(distributed::ProcessGroup& world, double value) {
  distributed::Algorithm measured = world.algorithm();
  world.set_algorithm(distributed::Algorithm::Native);
  Tensor t = full({1}, value, kFloat64);
  // Waits for every rank's value: all ranks then decide on the same number (of calls, or time).
  world.all_reduce(t, distributed::ReduceOp::Max);
  world.set_algorithm(measured);
  return t.item<double>();
}

}  // namespace

double time_collective(distributed::ProcessGroup& world, const std::function<void()>& run,
                       const TimingOptions& options) {
  using Clock = std::chrono::steady_clock;
  auto seconds_since = [](Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); };

  // Warm-up (connections, buffers, page faults) for about min_time / 2. The number of calls is
  // fixed beforehand from a first call, agreed by all ranks: a rank that stopped earlier than its
  // peers would leave them waiting in a collective it never joins.
  auto t0 = Clock::now();
  run();
  double first = std::max(1e-9, max_over_ranks(world, seconds_since(t0)));
  int warmup_calls = std::max(1, static_cast<int>(options.min_time / 2 / first));
  t0 = Clock::now();
  for (int i = 0; i < warmup_calls; ++i) run();
  double per_call = std::max(1e-9, max_over_ranks(world, seconds_since(t0) / warmup_calls));
  int per_sample = std::max(1, static_cast<int>(options.min_time / per_call));

  std::vector<double> times;
  for (int s = 0; s < options.samples; ++s) {
    // Waits until every rank is here: the sample starts together on all ranks, so no rank's time
    // includes waiting for a late peer to arrive from the previous sample.
    world.barrier();
    t0 = Clock::now();
    for (int i = 0; i < per_sample; ++i) run();
    // The collective has finished when the slowest rank finished it.
    times.push_back(max_over_ranks(world, seconds_since(t0) / per_sample));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

const std::vector<DistributedCase>& all_cases() {
  static const std::vector<DistributedCase> cases = [] {
    std::vector<DistributedCase> all;
    for (auto file : {collective_cases, ddp_cases, pipeline_cases, fsdp_cases}) {
      std::vector<DistributedCase> c = file();
      all.insert(all.end(), c.begin(), c.end());
    }
    return all;
  }();
  return cases;
}

}  // namespace loom::bench_mpi
