/*
 * Bench case `ddp_mlp_train`: data-parallel training throughput of an MLP 784-512-512-10
 * (cross-entropy, SGD) at a global batch of 128, against one process using the same cores:
 *
 *   DDP:       N ranks x 1 thread x batch 128/N, gradients all-reduced in buckets during backward
 *   baseline:  1 rank  x N threads x batch 128 (rank 0 alone; the other ranks sleep)
 *
 *   samples/s  = 128 / (seconds per training step: forward, backward, sync, SGD step)
 *   efficiency = samples/s(DDP) / samples/s(baseline)     (1.0: DDP costs nothing over threads)
 *   hidden     = 1 - exposed / communication span, per iteration summed over iterations, where
 *                span    = last bucket's completion - first bucket's launch
 *                exposed = last bucket's completion - max(last gradient computed (backward's
 *                          end), first launch)
 *                (from DistributedDataParallel::last_events(), rank 0's timeline)
 *
 * Measured for two bucket caps: 25 MB (torch's default; this 2.7 MB model is then one bucket,
 * launched when backward is over, so nothing can hide) and 1 MB (4 buckets).
 *
 * On a machine with no more cores than ranks, set OMPI_MCA_mpi_yield_when_idle=1: each rank's
 * MPI communication thread busy-polls inside the collective, and without yielding a rank can
 * lose whole scheduler time slices to it (steps 10-20x slower, at random).
 */
#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "core/parallel.h"
#include "distributed/ddp.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "tools/bench_mpi/bench_mpi.h"

namespace loom::bench_mpi {
namespace {

using Clock = std::chrono::steady_clock;

struct Mlp : nn::Module {
  nn::Linear fc1{784, 512};
  nn::Linear fc2{512, 512};
  nn::Linear fc3{512, 10};
  Mlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("fc3", fc3);
  }
  Tensor forward(const Tensor& x) override { return fc3(fc2(fc1(x).relu()).relu()); }
};

constexpr int64_t kGlobalBatch = 128;

void train_step(nn::Module& model, nn::Optimizer& opt, const Tensor& x, const Tensor& y) {
  nn::functional::cross_entropy(model(x), y).backward();
  opt.step();
  opt.zero_grad();
}

// Median seconds per call of `run` on this process alone (no collective): warm-up, then
// `samples` samples of at least min_time each.
double time_local(const std::function<void()>& run, const TimingOptions& options) {
  auto seconds_since = [](Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  auto t0 = Clock::now();
  for (int i = 0; i < 3; ++i) run();
  const double per_call = std::max(1e-9, seconds_since(t0) / 3);
  const int calls = std::max(1, static_cast<int>(options.min_time / per_call));
  std::vector<double> times;
  for (int s = 0; s < options.samples; ++s) {
    t0 = Clock::now();
    for (int i = 0; i < calls; ++i) run();
    times.push_back(seconds_since(t0) / calls);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// The fraction of the communication span that overlapped backward, over `iterations` steps
// (see the header comment), from rank 0's DDP timeline.
double hidden_fraction(distributed::DistributedDataParallel& ddp, const std::function<void()>& step,
                       int iterations) {
  using Kind = distributed::DdpEvent::Kind;
  double exposed = 0, span = 0;
  for (int it = 0; it < iterations; ++it) {
    step();
    Clock::time_point first_launch = Clock::time_point::max(), last_grad{}, last_done{};
    for (const distributed::DdpEvent& e : ddp.last_events()) {
      if (e.kind == Kind::BucketLaunched) first_launch = std::min(first_launch, e.time);
      if (e.kind == Kind::GradReady) last_grad = std::max(last_grad, e.time);
      if (e.kind == Kind::BucketCompleted) last_done = std::max(last_done, e.time);
    }
    // Communication that starts after backward ended (one bucket) is all exposed.
    exposed +=
        std::max(0.0, std::chrono::duration<double>(last_done - std::max(last_grad, first_launch)).count());
    span += std::chrono::duration<double>(last_done - first_launch).count();
  }
  return span > 0 ? 1.0 - exposed / span : 0.0;
}

std::vector<Metric> ddp_mlp_train(distributed::ProcessGroup& world, const TimingOptions& options) {
  const int n = world.size();
  LOOM_CHECK(kGlobalBatch % n == 0, "ddp_mlp_train: the global batch ", kGlobalBatch,
             " must split evenly over the ranks, got ", n, " ranks");
  const int64_t local_batch = kGlobalBatch / n;
  const int threads_before = get_num_threads();
  manual_seed(1);
  Tensor x = randn({kGlobalBatch, 784});
  Tensor y = randint(0, 10, {kGlobalBatch});

  // Baseline: rank 0 alone with n threads. The others wait for it without spinning on a core
  // (an MPI barrier busy-polls): they sleep until the non-blocking barrier has completed,
  // which rank 0 joins only after its measurement.
  double base_seconds = 0;
  auto done = world.barrier_async();
  if (world.rank() == 0) {
    set_num_threads(n);
    manual_seed(2);
    Mlp model;
    nn::SGD opt(model.parameters(), {.lr = 0.01});
    base_seconds = time_local([&] { train_step(model, opt, x, y); }, options);
  } else {
    while (!done->is_completed()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Rank 0 arrives here after measuring; the barrier completes on every rank at that point.
  done->wait();
  set_num_threads(1);

  std::vector<Metric> metrics;
  const double base_rate = static_cast<double>(kGlobalBatch) / std::max(base_seconds, 1e-12);
  metrics.push_back({"samples_per_s",
                     base_rate,
                     "samples/s",
                     {{"config", "1 rank x " + std::to_string(n) + " threads x batch 128"},
                      {"step_ms", base_seconds * 1e3}}});

  Tensor xl = x.narrow(0, world.rank() * local_batch, local_batch).contiguous();
  Tensor yl = y.narrow(0, world.rank() * local_batch, local_batch).contiguous();
  for (double cap_mb : {25.0, 1.0}) {
    manual_seed(2);
    auto model = std::make_shared<Mlp>();
    // Collective construction: broadcasts rank 0's weights.
    distributed::DistributedDataParallel ddp(model, world.shared_from_this(),
                                             distributed::DdpOptions{.bucket_cap_mb = cap_mb});
    nn::SGD opt(ddp.parameters(), {.lr = 0.01});
    auto step = [&] { train_step(ddp, opt, xl, yl); };
    const double seconds = time_collective(world, step, options);
    const double hidden = hidden_fraction(ddp, step, 20);
    const double rate = static_cast<double>(kGlobalBatch) / seconds;
    const std::string config = std::to_string(n) + " ranks x 1 thread x batch " + std::to_string(local_batch);
    metrics.push_back({"samples_per_s",
                       rate,
                       "samples/s",
                       {{"config", config},
                        {"bucket_cap_mb", cap_mb},
                        {"buckets", ddp.num_buckets()},
                        {"step_ms", seconds * 1e3}}});
    metrics.push_back({"scaling_efficiency", rate / base_rate, "", {{"bucket_cap_mb", cap_mb}}});
    metrics.push_back({"allreduce_hidden",
                       hidden,
                       "fraction",
                       {{"bucket_cap_mb", cap_mb}, {"buckets", ddp.num_buckets()}}});
  }
  set_num_threads(threads_before);
  return metrics;
}

}  // namespace

std::vector<DistributedCase> ddp_cases() {
  return {
      {"ddp_mlp_train",
       "MLP 784-512-512-10 at global batch 128: N ranks x 1 thread (DDP) vs 1 rank x N threads; samples/s, "
       "scaling efficiency, fraction of all-reduce time hidden behind backward",
       ddp_mlp_train},
  };
}

}  // namespace loom::bench_mpi
