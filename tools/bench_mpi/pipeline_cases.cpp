/*
 * Bench case `pipeline_bubble`: the pipeline bubble measured from a real step's trace against the
 * theory (p - 1) / (m + p - 1), for an MLP 784-1024x6-10 cut into p = world-size stages (by
 * parameter count), batch 256, m = 4, 8 and 16 micro-batches, GPipe, 1F1B and zero-bubble ZB-H1;
 * and interleaved 1F1B with v = 2 chunks per rank (the MLP cut into 2p stages).
 *
 *   bubble_measured  mean over stages of 1 - compute time / step span, from the trace (the step
 *                    with the median span of `samples` steps)
 *   bubble_theory    the schedule simulator's mean over stages with tF = 1, tB + tW = 2 (tB = tW
 *                    = 1 for ZB-H1's halves; schedule_simulator.h): (p - 1) / (m + p - 1) for
 *                    GPipe and 1F1B, (p - 1) / (v·m + p - 1) interleaved, less for ZB-H1, whose W
 *                    halves fill the 1F1B bubble
 *   peak_live        micro-batches of activations held by stage 0 at its peak (GPipe m, 1F1B p)
 *   peak_activation_mb  the bytes behind them: stage 0's allocator high-water mark above the
 *                    step's start (StepStats::peak_activation_bytes)
 *
 * Communication, loss and the unequal stage costs are real here, so measured exceeds theory a
 * little. With LOOM_PIPELINE_TRACE=FILE the trace of the last case is written to FILE (open it
 * in chrome://tracing or ui.perfetto.dev).
 */
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>

#include "core/parallel.h"
#include "distributed/pipeline/pipeline.h"
#include "distributed/pipeline/schedule_simulator.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "tools/bench_mpi/bench_mpi.h"

namespace loom::bench_mpi {
namespace {

std::vector<Metric> pipeline_bubble(distributed::ProcessGroup& world_group, const TimingOptions& options) {
  namespace pl = distributed::pipeline;
  // The runner needs a shared_ptr to the group: a non-owning one to the world the tool holds.
  std::shared_ptr<distributed::ProcessGroup> world(std::shared_ptr<distributed::ProcessGroup>(), &world_group);
  const int p = world->size(), s = world->rank();
  manual_seed(0);
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(784, 1024));
  for (int i = 0; i < 6; ++i) {
    model->push_back(std::make_shared<nn::ReLU>());
    model->push_back(std::make_shared<nn::Linear>(1024, 1024));
  }
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::Linear>(1024, 10));
  const std::vector<int64_t> bounds = pl::partition_balanced(pl::parameter_counts(*model), p);
  auto stage = pl::stage_of(*model, bounds[s], bounds[s + 1]);
  constexpr int64_t kChunks = 2;  // interleaved: rank s runs model stages s and s + p of 2p
  const std::vector<int64_t> fine = pl::partition_balanced(pl::parameter_counts(*model), kChunks * p);
  std::vector<std::shared_ptr<nn::Sequential>> chunks;
  for (int64_t c = 0; c < kChunks; ++c) chunks.push_back(pl::stage_of(*model, fine[c * p + s], fine[c * p + s + 1]));
  Tensor x = randn({256, 784}), y = randint(0, 10, {256}, DType::Int64);
  auto ce = [](const Tensor& out, const Tensor& target) { return nn::functional::cross_entropy(out, target); };
  std::vector<Metric> metrics;
  std::string last_trace;
  for (pl::ScheduleKind kind : {pl::ScheduleKind::GPipe, pl::ScheduleKind::OneFOneB, pl::ScheduleKind::Interleaved1F1B,
                                pl::ScheduleKind::ZeroBubbleH1}) {
    const bool interleaved = kind == pl::ScheduleKind::Interleaved1F1B;
    const int64_t v = interleaved ? kChunks : 1;
    for (int64_t m : {4, 8, 16}) {
      if (m % p != 0 && interleaved) continue;  // interleaving takes micro-batches in groups of p
      pl::PipelineStageRunner runner = interleaved ? pl::PipelineStageRunner(chunks, world, m)
                                                   : pl::PipelineStageRunner(stage, world, kind, m);
      runner.set_tracing(true);
      runner.train_step(x, y, ce);  // warm-up
      // The step with the median span over `samples` steps (the slowest rank's span).
      std::vector<std::pair<double, std::vector<std::vector<pl::TraceEvent>>>> steps;
      int64_t peak = 0, peak_bytes = 0;
      for (int i = 0; i < options.samples; ++i) {
        for (const auto& chunk : runner.chunks()) chunk->zero_grad();
        const pl::StepStats stats = runner.train_step(x, y, ce);
        peak = stats.peak_live_microbatches;
        peak_bytes = stats.peak_activation_bytes;
        auto trace = pl::gather_trace(*world, runner.last_events());
        double span = 0;
        for (const auto& events : trace)
          for (const auto& e : events) span = std::max(span, e.start_us + e.duration_us);
        steps.emplace_back(span, std::move(trace));
      }
      if (s != 0) continue;
      std::sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      const auto& median = steps[steps.size() / 2].second;
      std::vector<double> bubble = pl::measured_bubble(median);
      double mean = 0;
      for (double b : bubble) mean += b / static_cast<double>(bubble.size());
      const pl::SimulationResult simulated =
          pl::simulate(pl::make_schedule(kind, p, m, v), {.comm = pl::CommModel::Eager});
      double theory = 0;
      for (double b : simulated.bubble_fraction) theory += b / static_cast<double>(p);
      nlohmann::ordered_json extra{
          {"schedule", pl::schedule_kind_name(kind)}, {"stages", p}, {"chunks", v}, {"microbatches", m}};
      metrics.push_back({"bubble_measured", mean, "", extra});
      metrics.push_back({"bubble_theory", theory, "", extra});
      metrics.push_back({"peak_live", static_cast<double>(peak), "microbatches", extra});
      metrics.push_back({"peak_activation_mb", static_cast<double>(peak_bytes) / 1e6, "MB", extra});
      metrics.push_back({"step_ms", steps[steps.size() / 2].first / 1e3, "ms", extra});
      last_trace = pl::chrome_trace_json(median);
    }
  }
  if (const char* path = std::getenv("LOOM_PIPELINE_TRACE"); path != nullptr && s == 0) std::ofstream(path) << last_trace;
  return metrics;
}

}  // namespace

std::vector<DistributedCase> pipeline_cases() {
  return {{"pipeline_bubble", "MLP 784-1024x6-10 in world-size stages, batch 256: measured vs theoretical bubble",
           pipeline_bubble}};
}

}  // namespace loom::bench_mpi
