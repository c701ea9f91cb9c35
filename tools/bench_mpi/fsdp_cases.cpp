/*
 * Bench case `fsdp_prefetch`: what prefetching the next layer's parameters saves in ZeRO stage 3
 * (distributed/zero3.h). A stack of 8 Linear(512, 512) + ReLU layers (2.1M parameters, 8.4 MB)
 * is trained by FullyShardedDataParallel on a global batch of 64, split over the ranks, with
 * prefetch off and on. Each step gathers every layer twice (forward, and again for the backward's
 * recomputation) and reduce-scatters its gradient once.
 *
 * Reported per configuration: the step time (the slowest rank's, median of samples), the time
 * rank 0 sat waiting for all-gathers per step (FullyShardedDataParallel::timings), and the
 * reduce-scatters' time. Without prefetch every gather is posted when its layer starts, so its
 * whole time is waited for; with it, only what the previous layer's compute did not cover. The
 * difference of the waits is the communication that prefetch hid: `gather_wait_hidden` is that
 * difference over the wait without prefetch.
 *
 * On one machine with few cores the ranks, their MPI progress threads and the compute share the
 * cores, so the gathers compete with the compute they overlap: expect less hiding than on a
 * cluster whose network works on its own.
 */
#include <memory>

#include "distributed/zero3.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "tools/bench_mpi/bench_mpi.h"

namespace loom::bench_mpi {
namespace {

constexpr int64_t kLayers = 8, kWidth = 512, kGlobalBatch = 64;

std::shared_ptr<nn::Sequential> make_stack() {
  manual_seed(3);
  auto stack = std::make_shared<nn::Sequential>();
  for (int64_t i = 0; i < kLayers; ++i) {
    stack->push_back(std::make_shared<nn::Linear>(kWidth, kWidth));
    stack->push_back(std::make_shared<nn::ReLU>());
  }
  return stack;
}

std::vector<Metric> fsdp_prefetch(distributed::ProcessGroup& world, const TimingOptions& options) {
  const int n = world.size();
  LOOM_CHECK(kGlobalBatch % n == 0, "fsdp_prefetch: the global batch ", kGlobalBatch,
             " must split evenly over the ranks, got ", n, " ranks");
  manual_seed(4);
  const int64_t local = kGlobalBatch / n;
  const Tensor x = randn({local, kWidth}), target = randn({local, kWidth});
  std::vector<Metric> metrics;
  double wait_without = 0;
  for (const bool prefetch : {false, true}) {
    distributed::FullyShardedDataParallel model(make_stack(), world.shared_from_this());
    model.set_prefetch(prefetch);
    nn::SGD sgd(model.parameters(), {.lr = 1e-3});
    int64_t steps = 0;
    auto step = [&] {
      nn::functional::mse_loss(model(x), target).backward();
      sgd.step();
      sgd.zero_grad();
      ++steps;
    };
    const double seconds = time_collective(world, step, options);
    const auto t = model.timings();
    const double wait_ms = 1e3 * t.gather_wait_seconds / static_cast<double>(steps);
    const double reduce_ms = 1e3 * t.reduce_seconds / static_cast<double>(steps);
    if (!prefetch) wait_without = wait_ms;
    const nlohmann::ordered_json config = {{"prefetch", prefetch},
                                           {"layers", kLayers},
                                           {"width", kWidth},
                                           {"batch_per_rank", local}};
    auto with = [&config](nlohmann::ordered_json extra) {
      nlohmann::ordered_json all = config;
      all.update(extra);
      return all;
    };
    metrics.push_back({"step_ms", seconds * 1e3, "ms", config});
    metrics.push_back({"gather_wait_ms", wait_ms, "ms/step",
                       with({{"gathers_per_step", t.gathers / steps}, {"prefetched_per_step", t.prefetched / steps}})});
    metrics.push_back({"reduce_scatter_ms", reduce_ms, "ms/step", config});
    if (prefetch && wait_without > 0)
      metrics.push_back({"gather_wait_hidden", 1.0 - wait_ms / wait_without, "fraction", config});
  }
  return metrics;
}

}  // namespace

std::vector<DistributedCase> fsdp_cases() {
  return {{"fsdp_prefetch",
           "ZeRO-3 (FSDP) step of 8 Linear(512) layers, batch 64, with the next layer's all-gather prefetched or not",
           fsdp_prefetch}};
}

}  // namespace loom::bench_mpi
