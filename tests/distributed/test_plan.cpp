/*
 * The parallelism planner (distributed/plan/) against measured runs, under mpirun with 2 and 4
 * ranks (N), on a tiny MLP 64-256-256-32 trained with Adam:
 *   - layouts dp N (DDP), dp N + ZeRO 1, 2 and 3 (ZeroOptimizer, FullyShardedDataParallel),
 *     tp N (split_linear_layers), pp 2 with 4 micro-batches (1F1B, GPipe and ZB-H1), and on 4 ranks
 *     dp 2 x tp 2: one step each after a warm-up step;
 *   - communication: the bytes the process groups count during the measured step
 *     (ProcessGroup::stats, process_group.h's model) equal the prediction exactly, per group;
 *   - memory: the peak of the bytes live in tensor storage during the step, as an allocator that
 *     wraps the CPU allocator counts them (AllocatorStats::peak_allocated_bytes, at the requested
 *     sizes rather than the size classes), is within kMemoryTolerance of the prediction;
 *   - a GPT (2 blocks, d 32) in one process and as TensorParallelGPT over all N ranks: the
 *     same checks, the memory within kGptMemoryTolerance;
 *   - the model sizes match the real modules' parameter counts; the counters follow the model
 *     for every collective, native and ring alike; bad layouts are named.
 * Rank 0 prints the table (layout, predicted, measured, error) that docs/parallelism.md quotes.
 */
#include <doctest/doctest.h>

#include <climits>
#include <cmath>
#include <cstdio>
#include <algorithm>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "distributed/ddp.h"
#include "distributed/pipeline/pipeline.h"
#include "distributed/plan/plan_report.h"
#include "distributed/plan/planner.h"
#include "distributed/tensor_parallel/gpt.h"
#include "distributed/tensor_parallel/split_model.h"
#include "distributed/zero.h"
#include "distributed/zero3.h"
#include "nn/models/gpt.h"
#include "nn/models/mlp.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "tests/distributed/mpi_test_util.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::distributed;
using plan::Layout;

namespace {

// Measured peak / predicted peak must lie in [1 - tol, 1 + tol]. The GPT's activations are
// Korthikanti et al.'s count (model_spec.h), which Loom's blocks undercut by about a tenth at
// this size: the peak comes out 3-8% below the prediction. The measured peak also holds
// oneDNN's matmul scratchpads, which the planner does not model and which depend on the CPU:
// AVX-512's brgemm matmul packs its operands into them, AVX2's gemm:jit needs none (0 bytes for
// every shape here). On the AVX-512 VM every layout was within 5%; on an AVX2 AMD EPYC the
// DDP and tensor-parallel layouts came out 5-10% below the prediction (tp 4: -10.0%), ZeRO's
// within 2.4%.
constexpr double kMemoryTolerance = 0.12;
constexpr double kGptMemoryTolerance = 0.10;
const std::vector<int64_t> kSizes = {64, 256, 256, 32};
constexpr int64_t kRankBatch = 32;  // samples per data-parallel rank and step

// Wraps the CPU allocator and counts the bytes asked for: the live total and its high-water
// mark since reset_peak(). Installed for the whole test: storage remembers its allocator, so
// blocks allocated through it are freed through it, even after the test.
class PeakAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    void* p = inner_->allocate(nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.allocated_bytes += nbytes;
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
    ++stats_.num_allocs;
    return p;
  }
  void deallocate(void* ptr, size_t nbytes) override {
    inner_->deallocate(ptr, nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.allocated_bytes -= nbytes;
  }
  Device device() const override { return kCPU; }
  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  void empty_cache() override { inner_->empty_cache(); }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
  }

 private:
  Allocator* inner_ = cpu_allocator();
  mutable std::mutex mutex_;
  AllocatorStats stats_;
};

PeakAllocator& peak_allocator() {
  static auto* instance = [] {
    auto* a = new PeakAllocator();  // never destroyed: tensors may outlive the test
    set_allocator(DeviceType::CPU, a);
    return a;
  }();
  return *instance;
}

std::shared_ptr<nn::MLP> make_mlp() {
  manual_seed(5);
  return std::make_shared<nn::MLP>(kSizes);
}

Tensor loss_of(const Tensor& out, const Tensor& target) { return nn::functional::cross_entropy(out, target); }

// What one layout's measured steps gave on this rank.
struct Measured {
  int64_t peak_bytes = 0;      // the largest peak of kMeasuredSteps, above the bytes live before the build
  int64_t low_peak_bytes = 0;  // the smallest
  uint64_t data_bytes = 0, tensor_bytes = 0, pipeline_bytes = 0;  // the last step's
};

// The peak varies between steps: the communication thread drops its references to a finished
// collective's tensors a moment after wait() returns, so a buffer the step has let go of may
// still be counted when the next one is allocated. The largest of a few steps is the peak with
// everything alive that the code keeps alive, which is what the planner predicts.
constexpr int kMeasuredSteps = 3;

// Runs `build` (which makes the model, wrappers and optimizer, and returns one step), then a
// warm-up step (the optimizer's state and the gradients appear), then the measured steps.
// data, tensor, pipe: the groups whose counters are read (null when absent).
Measured measure(const std::function<std::function<void()>()>& build, ProcessGroup* data, ProcessGroup* tensor,
                 ProcessGroup* pipe) {
  PeakAllocator& alloc = peak_allocator();
  const auto before = static_cast<int64_t>(alloc.stats().allocated_bytes);
  Measured out;
  out.low_peak_bytes = INT64_MAX;
  {
    std::function<void()> step = build();
    step();
    for (int i = 0; i < kMeasuredSteps; ++i) {
      for (ProcessGroup* g : {data, tensor, pipe})
        if (g) g->reset_stats();
      alloc.reset_peak();
      step();
      const int64_t peak = static_cast<int64_t>(alloc.stats().peak_allocated_bytes) - before;
      out.peak_bytes = std::max(out.peak_bytes, peak);
      out.low_peak_bytes = std::min(out.low_peak_bytes, peak);
    }
    if (data) out.data_bytes = data->stats().modeled_bytes_sent();
    if (tensor) out.tensor_bytes = tensor->stats().modeled_bytes_sent();
    if (pipe) out.pipeline_bytes = pipe->stats().modeled_bytes_sent();
  }
  return out;
}

// One row of the table, printed by every rank (the stages of a pipeline differ), and the checks.
void compare(const std::string& name, const plan::StagePrediction& predicted, const Measured& measured,
             double tolerance = kMemoryTolerance) {
  const double want = predicted.memory.total();
  const double error = (static_cast<double>(measured.peak_bytes) - want) / want;
  std::printf("| %-40s | %4d | %9.0f | %9lld | %+6.1f%% | %9lld | %9.0f | %9llu |\n", name.c_str(),
              test::world()->rank(), want, static_cast<long long>(measured.peak_bytes), 100 * error,
              static_cast<long long>(measured.low_peak_bytes), predicted.comm.total(),
              static_cast<unsigned long long>(measured.data_bytes + measured.tensor_bytes + measured.pipeline_bytes));
  std::fflush(stdout);
  CAPTURE(name);
  CHECK(std::fabs(error) <= tolerance);
  CHECK(measured.data_bytes == static_cast<uint64_t>(std::llround(predicted.comm.data_parallel)));
  CHECK(measured.tensor_bytes == static_cast<uint64_t>(std::llround(predicted.comm.tensor_parallel)));
  CHECK(measured.pipeline_bytes == static_cast<uint64_t>(std::llround(predicted.comm.pipeline)));
}

// The rank's slice of this step's data: dp replicas take different rows.
struct Batch {
  Tensor x, y;
};
Batch make_batch(int64_t rows, uint64_t seed) {
  Generator g(seed);
  return {randn({rows, kSizes.front()}, kFloat32, &g), randint(0, kSizes.back(), {rows}, DType::Int64, &g)};
}

// dp N with ZeRO stage `zero` (0: DDP) on the world group.
Measured run_data_parallel(int zero) {
  auto world = test::world();
  return measure(
      [&]() -> std::function<void()> {
        auto batch = std::make_shared<Batch>(make_batch(kRankBatch, 100 + world->rank()));
        if (zero == 0) {
          auto ddp = std::make_shared<DistributedDataParallel>(make_mlp(), world);
          auto adam = std::make_shared<nn::Adam>(ddp->parameters());
          return [=] {
            loss_of((*ddp)(batch->x), batch->y).backward();
            adam->step();
            adam->zero_grad();
          };
        }
        if (zero == 3) {
          auto fsdp = std::make_shared<FullyShardedDataParallel>(make_mlp(), world);
          auto adam = std::make_shared<nn::Adam>(fsdp->parameters());
          return [=] {
            loss_of((*fsdp)(batch->x), batch->y).backward();
            adam->step();
            adam->zero_grad();
          };
        }
        auto model = make_mlp();
        auto opt = std::make_shared<ZeroOptimizer>(model->parameters(), world, zero, [](std::vector<Tensor> shard) {
          return std::make_unique<nn::Adam>(std::move(shard));
        });
        return [=] {
          loss_of((*model)(batch->x), batch->y).backward();
          opt->step();
          opt->zero_grad();
        };
      },
      world.get(), nullptr, nullptr);
}

// tp `tensor` ranks inside each of `world / tensor` DDP replicas (dp 1: no DDP).
Measured run_tensor_parallel(int tensor) {
  auto world = test::world();
  const int n = world->size(), r = world->rank(), dp = n / tensor;
  std::shared_ptr<ProcessGroup> tensor_group, data_group;
  for (int replica = 0; replica < dp; ++replica) {
    std::vector<int> ranks;
    for (int i = 0; i < tensor; ++i) ranks.push_back(replica * tensor + i);
    if (auto g = world->new_group(ranks)) tensor_group = g;
  }
  for (int i = 0; i < tensor; ++i) {
    std::vector<int> ranks;
    for (int replica = 0; replica < dp; ++replica) ranks.push_back(replica * tensor + i);
    if (auto g = world->new_group(ranks)) data_group = g;
  }
  return measure(
      [&]() -> std::function<void()> {
        auto batch = std::make_shared<Batch>(make_batch(kRankBatch, 100 + r / tensor));
        std::shared_ptr<nn::Module> net = split_linear_layers(*make_mlp(), tensor_group).net;
        if (dp > 1) net = std::make_shared<DistributedDataParallel>(net, data_group);
        auto adam = std::make_shared<nn::Adam>(net->parameters());
        return [=] {
          loss_of((*net)(batch->x), batch->y).backward();
          adam->step();
          adam->zero_grad();
        };
      },
      dp > 1 ? data_group.get() : nullptr, tensor_group.get(), nullptr);
}

// pp 2 on `group` (two ranks), one stage per rank.
Measured run_pipeline(const std::shared_ptr<ProcessGroup>& group, pipeline::ScheduleKind kind, int64_t microbatches,
                      const std::vector<int64_t>& bounds) {
  const int s = group->rank();
  return measure(
      [&]() -> std::function<void()> {
        auto batch = std::make_shared<Batch>(make_batch(kRankBatch, 100));
        auto stage = pipeline::stage_of(*make_mlp(), bounds[static_cast<size_t>(s)], bounds[static_cast<size_t>(s + 1)]);
        auto runner = std::make_shared<pipeline::PipelineStageRunner>(stage, group, kind, microbatches);
        auto adam = std::make_shared<nn::Adam>(runner->parameters());
        return [=] {
          runner->train_step(batch->x, batch->y, loss_of);
          adam->step();
          adam->zero_grad();
        };
      },
      nullptr, nullptr, group.get());
}


// The GPT of the GPT rows: 2 blocks, d 32, 4 heads, 64 tokens, context 16; 8 sequences a step.
constexpr plan::GptSizes kGpt{.layers = 2, .d_model = 32, .heads = 4, .vocab = 64, .context = 16};
constexpr int64_t kGptBatch = 8;

Measured run_gpt(const std::shared_ptr<ProcessGroup>& tensor_group) {
  return measure(
      [&]() -> std::function<void()> {
        Generator g(7);
        auto x = std::make_shared<Tensor>(randint(0, kGpt.vocab, {kGptBatch, kGpt.context}, DType::Int64, &g));
        auto y = std::make_shared<Tensor>(randint(0, kGpt.vocab, {kGptBatch, kGpt.context}, DType::Int64, &g));
        manual_seed(3);
        nn::GPTConfig config{.vocab_size = kGpt.vocab, .context = kGpt.context, .n_layers = kGpt.layers,
                             .n_heads = kGpt.heads, .d_model = kGpt.d_model};
        if (!tensor_group) {
          auto gpt = std::make_shared<nn::GPT>(config);
          auto adam = std::make_shared<nn::Adam>(gpt->parameters());
          return [=] {
            Tensor logits = (*gpt)(*x);
            nn::functional::cross_entropy(logits.reshape({-1, kGpt.vocab}), y->reshape({-1})).backward();
            adam->step();
            adam->zero_grad();
          };
        }
        auto gpt = std::make_shared<TensorParallelGPT>(config, tensor_group);
        auto adam = std::make_shared<nn::Adam>(gpt->parameters());
        return [=] {
          gpt->loss(*x, *y).backward();
          adam->step();
          adam->zero_grad();
        };
      },
      nullptr, tensor_group.get(), nullptr);
}
}  // namespace

TEST_CASE("plan: the model sizes are the modules' parameter counts") {
  CHECK(plan::mlp_spec(kSizes).params() == static_cast<int64_t>(nn::MLP(kSizes).num_parameters()));
  nn::GPTConfig config{.vocab_size = 65, .context = 16, .n_layers = 2, .n_heads = 4, .d_model = 32};
  plan::GptSizes sizes{.layers = 2, .d_model = 32, .heads = 4, .vocab = 65, .context = 16};
  CHECK(plan::gpt_spec(sizes).params() == static_cast<int64_t>(nn::GPT(config).num_parameters()));
  config.tie_weights = sizes.tie_weights = false;
  CHECK(plan::gpt_spec(sizes).params() == static_cast<int64_t>(nn::GPT(config).num_parameters()));
  // GPT-2 1.5B ("xl"): 1,557,611,200 parameters with the tied head and a context of 1024.
  CHECK(plan::gpt_spec(plan::gpt2_sizes("gpt2-xl")).params() == 1557611200);
}

TEST_CASE("plan: the counters follow the algorithm model for every collective, native and ring") {
  auto world = test::world();
  const auto n = static_cast<uint64_t>(world->size());
  const auto r = static_cast<uint64_t>(world->rank());
  for (Algorithm algorithm : {Algorithm::Native, Algorithm::Ring}) {
    world->set_algorithm(algorithm);
    world->reset_stats();
    world->all_reduce(ones({10}, kFloat32));                       // 40 bytes
    world->all_reduce(ones({3}, kFloat64));                        // 24 bytes
    world->all_gather(ones({2, 3}), zeros({2 * static_cast<int64_t>(n), 3}));
    world->reduce_scatter(ones({static_cast<int64_t>(n), 5}), zeros({1, 5}));
    world->broadcast(ones({4}), 1);
    world->reduce(ones({4}), 0);
    world->barrier();
    CommStats s = world->stats();
    CHECK(s.all_reduce.calls == 2);
    CHECK(s.all_reduce.payload_bytes == 64);
    CHECK(s.all_reduce.modeled_bytes_sent == 2 * (n - 1) * 64 / n);
    CHECK(s.all_gather.modeled_bytes_sent == (n - 1) * 24);
    CHECK(s.reduce_scatter.modeled_bytes_sent == (n - 1) * 20);
    CHECK(s.broadcast.modeled_bytes_sent == (r == 0 ? 0u : 16u));  // the chain 1 -> 2 -> ... -> 0 ends on 0
    CHECK(s.reduce.modeled_bytes_sent == (r == 0 ? 0u : 16u));
    CHECK(s.send.calls == 0);  // the ring's own sends are the collectives'
    CHECK(s.modeled_bytes_sent() == s.all_reduce.modeled_bytes_sent + s.all_gather.modeled_bytes_sent +
                                        s.reduce_scatter.modeled_bytes_sent + 32 - (r == 0 ? 32u : 0u));
    if (algorithm == Algorithm::Ring) CHECK(s.bytes_sent > 0);  // the actual sends, as before
  }
  world->set_algorithm(Algorithm::Native);
  world->reset_stats();
  const int peer = (world->rank() + 1) % world->size(), from = (world->rank() + world->size() - 1) % world->size();
  Tensor in = zeros({7});
  WorkPtr receiving = world->recv_async(in, from);
  world->send(ones({7}), peer);
  receiving->wait();
  CommStats s = world->stats();
  CHECK(s.send.modeled_bytes_sent == 28);
  CHECK(s.recv.payload_bytes == 28);
  CHECK(s.recv.modeled_bytes_sent == 0);
  CHECK(s.bytes_sent == 28);
}

TEST_CASE("plan: predictions match measured steps (memory within tolerance, bytes exactly)") {
  auto world = test::world();
  const int n = world->size(), r = world->rank();
  const plan::ModelSpec model = plan::mlp_spec(kSizes);
  peak_allocator();
  if (r == 0) {
    std::printf("\nmlp %s, Adam, %lld samples per data-parallel rank, %d ranks (rank 0's numbers)\n",
                model.description.c_str(), static_cast<long long>(kRankBatch), n);
    std::printf("| %-40s | %4s | %9s | %9s | %7s | %9s | %9s | %9s |\n", "layout", "rank", "predicted", "measured",
                "error", "lowest", "sent pred", "sent meas");
  }
  auto layout = [&](int64_t dp, int64_t tp, int64_t pp, int zero, int64_t m) {
    Layout l;
    l.dp = dp, l.tp = tp, l.pp = pp, l.zero = zero, l.microbatches = m, l.batch = kRankBatch * dp;
    return l;
  };
  for (int zero = 0; zero <= 3; ++zero) {
    const Layout l = layout(n, 1, 1, zero, 1);
    compare(l.describe(), plan::predict(model, l).stages[0], run_data_parallel(zero));
  }
  {
    const Layout l = layout(1, n, 1, 0, 1);
    compare(l.describe(), plan::predict(model, l).stages[0], run_tensor_parallel(n));
  }
  // pp 2 with 4 micro-batches, on ranks 0 and 1 (the others wait).
  std::shared_ptr<ProcessGroup> pipe = n == 2 ? world : world->new_group({0, 1});
  for (auto [kind, name] : {std::pair{pipeline::ScheduleKind::OneFOneB, "1F1B"}, {pipeline::ScheduleKind::GPipe, "GPipe"},
                            {pipeline::ScheduleKind::ZeroBubbleH1, "ZB-H1"}}) {
    if (!pipe) break;
    Layout l = layout(1, 1, 2, 0, 4);
    l.schedule = kind == pipeline::ScheduleKind::GPipe          ? plan::PipelineKind::GPipe
                 : kind == pipeline::ScheduleKind::ZeroBubbleH1 ? plan::PipelineKind::ZeroBubbleH1
                                                                : plan::PipelineKind::OneFOneB;
    const plan::Prediction p = plan::predict(model, l);
    const Measured measured = run_pipeline(pipe, kind, 4, plan::stage_boundaries(model, 2));
    compare(l.describe() + " " + name, p.stages[static_cast<size_t>(pipe->rank())], measured);
  }
  if (n == 4) {
    const Layout l = layout(2, 2, 1, 0, 1);
    compare(l.describe(), plan::predict(model, l).stages[0], run_tensor_parallel(2));
  }
}

TEST_CASE("plan: ZeRO's memory terms and traffic follow the paper's ratios") {
  const plan::ModelSpec gpt = plan::gpt_spec(plan::gpt2_sizes("gpt2-xl"));
  const double psi = static_cast<double>(gpt.params());
  Layout l;
  l.dp = 64, l.batch = 64;
  plan::Prediction ddp = plan::predict(gpt, l);
  l.zero = 3;
  plan::Prediction fsdp = plan::predict(gpt, l);
  // 16Ψ bytes of parameters, gradients and Adam state; sharded, 1/N of the parameters and Adam
  // state (to within the step counters and the shards' padding; zero 3's gradients at its peak
  // are the shards of the layers after the largest only).
  const plan::MemoryBreakdown& a = ddp.stages[0].memory;
  CHECK(a.parameters + a.gradients + a.optimizer_state == doctest::Approx(16 * psi).epsilon(1e-4));
  const plan::MemoryBreakdown& b = fsdp.stages[0].memory;
  CHECK(b.parameters + b.optimizer_state == doctest::Approx(12 * psi / 64).epsilon(1e-3));
  CHECK(b.gradients < 4 * psi / 64);
  // ZeRO 3 sends 1.5x an all-reduce's bytes.
  CHECK(fsdp.stages[0].comm.data_parallel == doctest::Approx(1.5 * ddp.stages[0].comm.data_parallel).epsilon(1e-3));
  // A pipeline's 1F1B bubble is (p-1)/(m+p-1) with backward = 2 forwards.
  l = Layout{};
  l.pp = 4, l.microbatches = 8, l.batch = 8;
  CHECK(plan::predict(gpt, l).bubble == doctest::Approx(3.0 / 11.0));
}

TEST_CASE("plan: ranking keeps what fits, fastest first; bad layouts are named") {
  const plan::ModelSpec gpt = plan::gpt_spec(plan::gpt2_sizes("gpt2-xl"));
  Layout base;
  base.batch = 512;
  base.amp = plan::Amp::Bf16;
  const double budget = plan::parse_size("80GB");
  const auto ranked = plan::rank_layouts(gpt, 64, budget, base);
  REQUIRE(!ranked.empty());
  for (size_t i = 0; i < ranked.size(); ++i) {
    CHECK(ranked[i].layout.gpus() == 64);
    CHECK(ranked[i].worst_stage().memory.total() <= budget);
    if (i > 0) CHECK(ranked[i - 1].step_seconds <= ranked[i].step_seconds);
  }
  // Plain data parallelism of 1.5B parameters needs ~32Ψ bytes with its buckets: not in 80 GB
  // at this batch without checkpointing... but it does fit with ZeRO 3.
  Layout l = base;
  l.dp = 64, l.zero = 3;
  CHECK(plan::predict(gpt, l).worst_stage().memory.total() < budget);
  CHECK(plan::parse_size("1.5GiB") == 1.5 * 1073741824.0);
  l = Layout{};
  l.tp = 3;
  CHECK(test::error_of([&] { plan::predict(gpt, l); }).find("tp 3 does not divide") != std::string::npos);
  l = Layout{};
  l.zero = 2;
  CHECK(test::error_of([&] { plan::predict(gpt, l); }).find("needs dp >= 2") != std::string::npos);
  l = Layout{};
  l.dp = 2, l.batch = 3;
  CHECK(test::error_of([&] { plan::predict(gpt, l); }).find("batch 3 is not divisible") != std::string::npos);
  CHECK(test::error_of([&] { plan::parse_size("eighty"); }).find("cannot read a memory size") != std::string::npos);
}

TEST_CASE("plan: GPT predictions against measured steps") {
  auto world = test::world();
  const plan::ModelSpec model = plan::gpt_spec(kGpt);
  Layout l;
  l.batch = kGptBatch;
  compare("gpt " + l.describe(), plan::predict(model, l).stages[0], run_gpt(nullptr), kGptMemoryTolerance);
  l.tp = world->size();
  compare("gpt " + l.describe(), plan::predict(model, l).stages[0], run_gpt(world), kGptMemoryTolerance);
}
