/*
 * Pipeline-parallel training over the whole world (p = 2 or 4 stages): balanced partitioning, and
 * for GPipe, 1F1B and ZB-H1 a step of an MLP cut into stages against the whole MLP in one process (every
 * rank builds it from the same seed): the same loss, each stage's gradients equal to the
 * reference's for its layers, the same loss after SGD steps, and the live micro-batches that the
 * schedule promises (GPipe m, 1F1B at most p - s); traces with the B and W spans of ZB-H1, and
 * the measured bubble of the four schedules at one (p, m) next to the theory's.
 */
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <sstream>

#include "autograd/autograd.h"
#include "core/random.h"
#include "distributed/pipeline/pipeline.h"
#include "distributed/pipeline/schedule_simulator.h"
#include "distributed/pipeline/trace.h"
#include "nn/layers/activation.h"
#include "nn/layers/conv2d.h"
#include "nn/layers/flatten.h"
#include "nn/layers/linear.h"
#include "nn/loss.h"
#include "nn/optim/sgd.h"
#include "ops/ops.h"
#include "tests/distributed/mpi_test_util.h"
#include "tests/test_util.h"

namespace loom::distributed::pipeline {
namespace {

using test::world;

// 6 features -> `hidden` + 1 layers of `width` with ReLUs between -> 4 classes: 2·hidden + 3 layers.
std::shared_ptr<nn::Sequential> relu_mlp(uint64_t seed, int64_t width, int hidden) {
  manual_seed(seed);
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Linear>(6, width));
  for (int i = 0; i < hidden; ++i) {
    net->push_back(std::make_shared<nn::ReLU>());
    net->push_back(std::make_shared<nn::Linear>(width, width));
  }
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::Linear>(width, 4));
  return net;
}

std::shared_ptr<nn::Sequential> mlp(uint64_t seed) { return relu_mlp(seed, 16, 3); }  // 9 layers

TEST_CASE("pipeline: balanced partitions minimise the most expensive stage") {
  CHECK(partition_balanced({1, 1, 1, 1}, 2) == std::vector<int64_t>{0, 2, 4});
  CHECK(partition_balanced({4, 1, 1, 1, 1}, 2) == std::vector<int64_t>{0, 1, 5});
  CHECK(partition_balanced({1, 2, 3, 4, 5}, 3) == std::vector<int64_t>{0, 3, 4, 5});
  CHECK(partition_balanced({3}, 1) == std::vector<int64_t>{0, 1});
  auto net = mlp(1);
  CHECK(parameter_counts(*net)[0] == 6 * 16 + 16);
  CHECK(parameter_counts(*net)[1] == 0);
  CHECK(test::error_of([] { partition_balanced({1, 1}, 3); }).find("cannot cut 2 layers into 3") != std::string::npos);
}

TEST_CASE("pipeline: partitioning by measured time sees the cost that parameter counts miss") {
  // Three convolutions (9k parameters, 9.4M multiply-adds per image each) and a linear layer
  // (524k parameters, 0.5M multiply-adds, but memory-bound: here about as slow as one
  // convolution). By parameters the linear layer is a stage of its own and the three
  // convolutions share the other; by time at least one convolution joins the linear layer
  // (whatever the noise in the timings, as long as the linear layer is cheaper than two
  // convolutions: the cut is after the first or the second convolution).
  manual_seed(3);
  auto conv = [] { return std::make_shared<nn::Conv2d>(32, 32, 3, nn::Conv2dOptions{.padding = 1}); };
  nn::Sequential net(conv(), conv(), conv(), std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(32 * 32 * 32, 16));
  const Tensor sample = randn({4, 32, 32, 32});
  const std::vector<double> seconds = measured_times(net, sample, 5);
  REQUIRE(seconds.size() == net.size());
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // Instrumented Loom code next to uninstrumented oneDNN convolutions: the timings are not the
  // machine's any more (under TSan a flatten took 3.5 ms, a convolution 17 ms).
  MESSAGE("[skipped: timing under a sanitizer]");
  return;
#endif
  INFO("seconds per layer: " << seconds[0] << " " << seconds[1] << " " << seconds[2] << " " << seconds[3] << " "
                             << seconds[4]);
  CHECK(partition_balanced(parameter_counts(net), 2)[1] >= 3);
  CHECK(seconds[0] > 10 * seconds[3]);  // a convolution against a flatten (a view)
  CHECK(partition_balanced(seconds, 2)[1] <= 2);
  for (const Tensor& p : net.parameters()) CHECK_FALSE(p.grad().defined());  // no gradients left behind
  CHECK(test::error_of([&] { measured_times(net, sample, 0); }).find("repeats must be >= 1") != std::string::npos);
}

TEST_CASE("pipeline: GPipe, 1F1B and ZB-H1 steps equal the whole model's in loss, gradients and SGD updates") {
  const int p = world()->size(), s = world()->rank();
  const int64_t m = 4, batch = 8;
  Generator g(17);
  Tensor x = randn({batch, 6}, kFloat32, &g), y = randint(0, 4, {batch}, DType::Int64, &g);
  auto ce = [](const Tensor& out, const Tensor& target) { return nn::functional::cross_entropy(out, target); };
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::ZeroBubbleH1}) {
    CAPTURE(schedule_kind_name(kind));
    // ZB-H1 holds each micro-batch's graph until its W (pipeline.h).
    const int64_t live_until_w = simulate(make_schedule(kind, p, m)).peak_live_until_weight_grad[s];
    auto reference = mlp(5), model = mlp(5);
    const std::vector<int64_t> bounds = partition_balanced(parameter_counts(*model), p);
    PipelineStageRunner runner(stage_of(*model, bounds[s], bounds[s + 1]), world(), kind, m);
    nn::SGD ref_sgd(reference->parameters(), nn::SGDOptions{.lr = 0.1, .momentum = 0.9});
    nn::SGD sgd(runner.stage().parameters(), nn::SGDOptions{.lr = 0.1, .momentum = 0.9});
    for (int step = 0; step < 3; ++step) {
      ref_sgd.zero_grad();
      sgd.zero_grad();
      Tensor expected = ce((*reference)(x), y);
      expected.backward();
      StepStats stats = runner.train_step(x, y, ce);
      CHECK(std::abs(stats.loss - expected.item<double>()) < 1e-5);
      if (kind == ScheduleKind::ZeroBubbleH1)
        CHECK(stats.peak_live_microbatches == live_until_w);
      else
        CHECK(stats.peak_live_microbatches == (kind == ScheduleKind::GPipe ? m : std::min<int64_t>(p - s, m)));
      CHECK(stats.peak_activation_bytes > 0);
      // This stage's layers are layers [bounds[s], bounds[s+1]) of the reference.
      for (int64_t layer = bounds[s]; layer < bounds[s + 1]; ++layer) {
        const auto* ref_linear = dynamic_cast<const nn::Linear*>(&(*reference)[layer]);
        if (!ref_linear) continue;
        const auto& mine = runner.stage().at<nn::Linear>(layer - bounds[s]);
        CHECK((mine.weight.grad() - ref_linear->weight.grad()).abs().max().item<double>() < 1e-6);
        CHECK((mine.bias.grad() - ref_linear->bias.grad()).abs().max().item<double>() < 1e-6);
      }
      ref_sgd.step();
      sgd.step();
    }
  }
  // A batch that does not split into m micro-batches is named (checked on the first stage, whose
  // first action is that split: no message is left half-done for the others).
  auto model = mlp(5);
  const std::vector<int64_t> bounds = partition_balanced(layer_counts(*model), p);
  PipelineStageRunner runner(stage_of(*model, bounds[s], bounds[s + 1]), world(), ScheduleKind::GPipe, 3);
  if (s == 0)
    CHECK(test::error_of([&] { runner.train_step(x, y, ce); }).find("must split into 3 equal micro-batches") !=
          std::string::npos);
}

TEST_CASE("pipeline: interleaved 1F1B (2 chunks per rank) equals the whole model in loss, gradients and SGD updates") {
  const int p = world()->size(), r = world()->rank();
  const int64_t v = 2, m = 2 * p, batch = 4 * p;
  Generator g(29);
  Tensor x = randn({batch, 6}, kFloat32, &g), y = randint(0, 4, {batch}, DType::Int64, &g);
  auto ce = [](const Tensor& out, const Tensor& target) { return nn::functional::cross_entropy(out, target); };
  // 8 linear layers with ReLUs between: 15 layers, enough for p·v = 8 stages on 4 ranks.
  auto reference = relu_mlp(41, 16, 6), model = relu_mlp(41, 16, 6);
  const std::vector<int64_t> bounds = partition_balanced(layer_counts(*model), p * v);
  std::vector<std::shared_ptr<nn::Sequential>> chunks;
  for (int64_t c = 0; c < v; ++c) chunks.push_back(stage_of(*model, bounds[c * p + r], bounds[c * p + r + 1]));
  PipelineStageRunner runner(chunks, world(), m);
  nn::SGD ref_sgd(reference->parameters(), nn::SGDOptions{.lr = 0.1, .momentum = 0.9});
  nn::SGD sgd(runner.parameters(), nn::SGDOptions{.lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < 3; ++step) {
    CAPTURE(step);
    ref_sgd.zero_grad();
    sgd.zero_grad();
    Tensor expected = ce((*reference)(x), y);
    expected.backward();
    const StepStats stats = runner.train_step(x, y, ce);
    CHECK(std::abs(stats.loss - expected.item<double>()) < 1e-5);
    for (int64_t c = 0; c < v; ++c)
      for (int64_t layer = bounds[c * p + r]; layer < bounds[c * p + r + 1]; ++layer) {
        const auto* ref_linear = dynamic_cast<const nn::Linear*>(&(*reference)[layer]);
        if (!ref_linear) continue;
        const auto& mine = runner.chunks()[c]->at<nn::Linear>(layer - bounds[c * p + r]);
        CHECK((mine.weight.grad() - ref_linear->weight.grad()).abs().max().item<double>() < 1e-6);
        CHECK((mine.bias.grad() - ref_linear->bias.grad()).abs().max().item<double>() < 1e-6);
      }
    ref_sgd.step();
    sgd.step();
  }
}

TEST_CASE("pipeline: 1F1B holds p micro-batches of activation memory where GPipe holds m, in bytes") {
  const int p = world()->size(), s = world()->rank();
  const int64_t m = 8;
  // Wide enough that activations, not the allocator's rounding, make up the bytes.
  manual_seed(5);
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(64, 512), std::make_shared<nn::ReLU>(),
                                                std::make_shared<nn::Linear>(512, 512), std::make_shared<nn::ReLU>(),
                                                std::make_shared<nn::Linear>(512, 512), std::make_shared<nn::ReLU>(),
                                                std::make_shared<nn::Linear>(512, 4));
  const std::vector<int64_t> bounds = partition_balanced(layer_counts(*model), p);
  auto stage = stage_of(*model, bounds[s], bounds[s + 1]);
  Generator g(3);
  Tensor x = randn({128, 64}, kFloat32, &g), y = randint(0, 4, {128}, DType::Int64, &g);
  auto ce = [](const Tensor& out, const Tensor& t) { return nn::functional::cross_entropy(out, t); };
  int64_t bytes[2] = {0, 0};
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB}) {
    PipelineStageRunner runner(stage, world(), kind, m);
    runner.train_step(x, y, ce);  // the first step allocates the gradients: not activations
    stage->zero_grad();
    bytes[kind == ScheduleKind::OneFOneB] = runner.train_step(x, y, ce).peak_activation_bytes;
  }
  CAPTURE(s);
  CAPTURE(bytes[0]);
  CAPTURE(bytes[1]);
  // Stage s holds m micro-batches under GPipe and min(p - s, m) under 1F1B: the bytes follow,
  // give or take two micro-batches' messages in flight (a received input waiting for its
  // forward, a sent gradient not yet taken).
  const auto live = static_cast<double>(std::min<int64_t>(p - s, m));
  CHECK(bytes[1] < bytes[0]);
  CHECK(static_cast<double>(bytes[1]) <= static_cast<double>(bytes[0]) * (live + 2) / static_cast<double>(m));
  MESSAGE("stage " << s << ": peak activation bytes GPipe " << bytes[0] << ", 1F1B " << bytes[1] << " (live micro-batches "
                   << m << " vs " << std::min<int64_t>(p - s, m) << ")");
}

// One traced step of `kind` (m = 8): every rank's track holds its m forwards, m backwards (B for
// ZB-H1) and, for ZB-H1, m weight-gradient spans W; messages carry bytes; the bubble is a fraction.
void check_traced_step(ScheduleKind kind) {
  const int p = world()->size();
  const int64_t m = 8;
  auto model = mlp(5);
  const std::vector<int64_t> bounds = partition_balanced(layer_counts(*model), p);
  PipelineStageRunner runner(stage_of(*model, bounds[world()->rank()], bounds[world()->rank() + 1]), world(),
                             kind, m);
  runner.set_tracing(true);
  Generator g(2);
  Tensor x = randn({16, 6}, kFloat32, &g), y = randint(0, 4, {16}, DType::Int64, &g);
  runner.train_step(x, y, [](const Tensor& out, const Tensor& t) { return nn::functional::cross_entropy(out, t); });
  CHECK(runner.last_events().size() == runner.schedule()[world()->rank()].size());
  const auto trace = gather_trace(*world(), runner.last_events());
  if (world()->rank() != 0) {
    CHECK(trace.empty());
    return;
  }
  REQUIRE(trace.size() == static_cast<size_t>(p));
  size_t total = 0;
  for (int r = 0; r < p; ++r) {
    int forwards = 0, backwards = 0, weights = 0, messages_with_bytes = 0;
    for (const TraceEvent& e : trace[r]) {
      forwards += e.compute && e.name[0] == 'F';
      backwards += e.compute && e.name[0] == 'B';
      weights += e.compute && e.name[0] == 'W';
      messages_with_bytes += !e.compute && e.bytes > 0;
      CHECK(e.duration_us >= 0);
    }
    CHECK(forwards == m);
    CHECK(backwards == m);
    CHECK(weights == (kind == ScheduleKind::ZeroBubbleH1 ? m : 0));
    // Two neighbours for inner stages, one for the ends: 2m messages per link side.
    CHECK(messages_with_bytes == 2 * m * ((r > 0) + (r < p - 1)));
    total += trace[r].size();
  }
  const auto json = nlohmann::json::parse(chrome_trace_json(trace));
  CHECK(json["traceEvents"].size() == total + p);  // + one thread-name record per rank
  const std::vector<double> bubble = measured_bubble(trace);
  for (double b : bubble) CHECK((b >= 0.0 && b < 1.0));
  MESSAGE("measured bubble of stage 0: " << bubble[0] << ", theory " << (p - 1.0) / (m + p - 1.0));
}

TEST_CASE("pipeline: a traced step has one track per rank, m forwards and backwards each, and a bubble") {
  for (ScheduleKind kind : {ScheduleKind::OneFOneB, ScheduleKind::ZeroBubbleH1}) {
    const std::string name = schedule_kind_name(kind);
    CAPTURE(name);
    check_traced_step(kind);
  }
}

TEST_CASE("pipeline: the measured bubble of GPipe, 1F1B, interleaved 1F1B and ZB-H1 at one (p, m)") {
  // The real-run counterpart of the simulator's bubble: each rank's idle share of the step (1 -
  // its compute time / the step's span over all ranks, from the trace), averaged over the ranks
  // and over a few steps after a warm-up. Printed next to the theory. On this machine's two cores
  // with more ranks than cores (mpirun --oversubscribe) the ranks also wait for a core, which
  // the trace counts as compute or as waiting depending on where it hits: the numbers are
  // indicative only, and the test asserts only what holds anyway.
  const int p = world()->size(), r = world()->rank();
  const int64_t m = 2 * p, v = 2, batch = 32 * m;
  // Wider than mlp(): with 16 features a micro-batch's compute is a few microseconds, less than
  // a message's latency, and the measurement would show nothing but the messages.
  // 17 layers: p·v = 8 stages on 4 ranks.
  Generator g(31);
  Tensor x = randn({batch, 6}, kFloat32, &g), y = randint(0, 4, {batch}, DType::Int64, &g);
  auto ce = [](const Tensor& out, const Tensor& target) { return nn::functional::cross_entropy(out, target); };
  const ScheduleKind kinds[] = {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved1F1B,
                                ScheduleKind::ZeroBubbleH1};
  std::ostringstream table;
  table << "p = " << p << ", m = " << m << " (interleaved: v = " << v << "); bubble = idle / step, mean over ranks\n"
        << "schedule          theory  simulated  measured (trace)  measured (StepStats)  compute ms  step ms\n";
  for (ScheduleKind kind : kinds) {
    const std::string name = schedule_kind_name(kind);
    CAPTURE(name);
    auto model = relu_mlp(7, 256, 7);
    std::unique_ptr<PipelineStageRunner> runner;
    if (kind == ScheduleKind::Interleaved1F1B) {
      const std::vector<int64_t> bounds = partition_balanced(layer_counts(*model), p * v);
      std::vector<std::shared_ptr<nn::Sequential>> chunks;
      for (int64_t c = 0; c < v; ++c) chunks.push_back(stage_of(*model, bounds[c * p + r], bounds[c * p + r + 1]));
      runner = std::make_unique<PipelineStageRunner>(chunks, world(), m);
    } else {
      const std::vector<int64_t> bounds = partition_balanced(layer_counts(*model), p);
      runner = std::make_unique<PipelineStageRunner>(stage_of(*model, bounds[r], bounds[r + 1]), world(), kind, m);
    }
    runner->set_tracing(true);
    const int steps = 3;
    double traced = 0, stepped = 0, compute = 0, step_time = 0;
    runner->train_step(x, y, ce);  // warm-up: first-touch allocations
    for (int step = 0; step < steps; ++step) {
      const StepStats stats = runner->train_step(x, y, ce);
      CHECK((stats.bubble_fraction() >= 0.0 && stats.bubble_fraction() < 1.0));
      CHECK(stats.compute_seconds > 0);
      double sum = 0;
      Tensor t = tensor(std::vector<double>{stats.bubble_fraction(), stats.compute_seconds, stats.step_seconds}, {3});
      world()->all_reduce(t);  // sums over the ranks
      stepped += t.data_ptr<double>()[0] / p;
      compute += t.data_ptr<double>()[1] / p;
      step_time += t.data_ptr<double>()[2] / p;
      const auto trace = gather_trace(*world(), runner->last_events());
      if (r != 0) continue;
      for (double b : measured_bubble(trace)) {
        CHECK((b >= 0.0 && b < 1.0));
        sum += b;
      }
      traced += sum / p;
    }
    // The theory's fraction, and the simulator's with every forward, B and W one unit (so a
    // whole backward two) and chunks of an interleaved rank a 1/v of that.
    const int64_t chunks = kind == ScheduleKind::Interleaved1F1B ? v : 1;
    const double units = kind == ScheduleKind::ZeroBubbleH1 ? 3.0 * m : static_cast<double>(chunks * m);
    const double theory = (p - 1.0) / (units + p - 1.0);
    SimulationOptions costs;
    costs.comm = CommModel::Eager;
    const SimulationResult sim = simulate(make_schedule(kind, p, m, chunks), costs);
    double simulated = 0;
    for (double b : sim.bubble_fraction) simulated += b / p;
    CHECK(simulated == doctest::Approx(theory));
    char line[160];
    std::snprintf(line, sizeof line, "%-17s %6.3f  %9.3f  %16.3f  %20.3f  %10.2f  %7.2f\n", schedule_kind_name(kind),
                  theory, simulated, traced / steps, stepped / steps, 1e3 * compute / steps, 1e3 * step_time / steps);
    table << line;
  }
  if (r == 0) MESSAGE(table.str());
}


}  // namespace
}  // namespace loom::distributed::pipeline
