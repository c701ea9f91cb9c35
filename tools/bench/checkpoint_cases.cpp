/*
 * Bench case of checkpointing (nn/serialize/): how long a training loop stops for one
 * checkpoint of a GPT (6 layers, d_model 384, vocabulary 4096: 12.3M parameters) with its AdamW
 * state (parameters + two moments: 148 MB), written to a fresh run directory under the
 * system's temp directory (TMPDIR).
 *   sync_save_ms     CheckpointManager::save: the loop waits for every byte to be written and
 *                    fsynced, and the commit
 *   async_pause_ms   AsyncCheckpointer::save: the loop waits only for the host snapshot (a copy
 *                    of the state in memory) and the writer thread's start
 *   async_write_ms   from save() to the commit at the first poll() after the writer finished:
 *                    how long the previous checkpoint stays `latest`
 * Each number is the median of 5 saves (one save is large: repeating it for a fixed time would
 * measure the page cache's flushing more than the save).
 */
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include <unistd.h>

#include "core/random.h"
#include "nn/models/gpt.h"
#include "nn/optim/adam.h"
#include "nn/serialize/serialize.h"
#include "ops/ops.h"
#include "tools/bench/bench.h"

namespace loom::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

std::vector<Metric> checkpoint_pause(const TimingOptions&) {
  manual_seed(0);
  nn::GPT model(nn::GPTConfig{.vocab_size = 4096, .context = 128, .n_layers = 6, .n_heads = 6, .d_model = 384});
  nn::AdamW optimizer(model.parameters(), nn::AdamWOptions{.lr = 1e-3});
  // One step, so that the moments exist (the optimizer's state is most of a checkpoint).
  Tensor idx = randint(0, 4096, {2, 128});
  model(idx).sum().backward();
  optimizer.step();
  auto state = [&] {
    return std::map<std::string, nn::StateDict>{{"model", model.state_dict()}, {"optimizer", optimizer.state_dict()}};
  };
  double state_bytes = 0;
  for (const auto& [name, tensors] : state())
    for (const auto& [key, t] : tensors) state_bytes += static_cast<double>(t.numel() * t.element_size());

  const fs::path dir = fs::temp_directory_path() / ("loom_bench_checkpoint_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  constexpr int kSaves = 5;
  std::vector<double> sync_ms, pause_ms, write_ms;
  {
    nn::CheckpointManager manager(dir / "sync", 2);
    for (int i = 0; i < kSaves; ++i) {
      const auto start = Clock::now();
      manager.save(i, state());
      sync_ms.push_back(ms_since(start));
    }
  }
  {
    nn::CheckpointManager manager(dir / "async", 2);
    nn::AsyncCheckpointer async(manager);
    for (int i = 0; i < kSaves; ++i) {
      const auto start = Clock::now();
      async.save(i, state());
      pause_ms.push_back(ms_since(start));
      // A training loop polls at every step boundary; here the "steps" are 1 ms sleeps.
      while (!async.poll()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      write_ms.push_back(ms_since(start));
    }
  }
  fs::remove_all(dir);
  return {
      {"state_mb", state_bytes / 1e6, "MB"},
      {"sync_save_ms", median(sync_ms), "ms"},
      {"async_pause_ms", median(pause_ms), "ms"},
      {"async_write_ms", median(write_ms), "ms"},
      {"pause_reduction", median(sync_ms) / median(pause_ms), "x"},
  };
}

}  // namespace

std::vector<BenchCase> checkpoint_cases() {
  return {BenchCase("checkpoint_pause", "ms",
                    "checkpoint of a 12.3M-parameter GPT + AdamW state: sync save vs async pause (snapshot) and "
                    "background write",
                    checkpoint_pause)};
}

}  // namespace loom::bench
