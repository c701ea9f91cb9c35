/*
 * Every parallelism on CUDA tensors over the NCCL process group, with the equalities the CPU
 * suites check over MPI: DDP equals one process on the whole batch, ZeRO-1/2 equal DDP, FSDP
 * equals one process, the tensor-parallel MLP and the pipeline equal the unsplit model. The
 * references run on the CPU, so each test also compares the CUDA kernels with the CPU ones.
 *
 * In CI this runs on emulated GPUs (one per rank, NCCL replaced by its stand-in over MPI,
 * distributed/nccl/emulated/nccl.h); on a machine with one GPU per rank it runs on NCCL itself,
 * and with fewer GPUs than ranks on a group of world size 1 (tests/distributed/mpi_test_util.h).
 */
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "distributed/ddp.h"
#include "distributed/pipeline/pipeline.h"
#include "distributed/tensor_parallel/layers.h"
#include "distributed/zero.h"
#include "distributed/zero3.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "tests/distributed/mpi_test_util.h"

using namespace loom;
using namespace loom::distributed;

namespace {

const Device kGpu = Device::cuda(0);

std::shared_ptr<nn::Sequential> mlp(uint64_t seed) {
  manual_seed(seed);
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Linear>(6, 16));
  net->push_back(std::make_shared<nn::Tanh>());
  net->push_back(std::make_shared<nn::Linear>(16, 16));
  net->push_back(std::make_shared<nn::Tanh>());
  net->push_back(std::make_shared<nn::Linear>(16, 3));
  return net;
}

std::shared_ptr<nn::Sequential> mlp_on_gpu(uint64_t seed) {
  auto net = mlp(seed);
  net->to(kGpu);
  return net;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return (a.to(kCPU) - b.to(kCPU)).abs().max().item<double>();
}

std::unique_ptr<nn::Optimizer> sgd(std::vector<Tensor> p) {
  return std::make_unique<nn::SGD>(std::move(p), nn::SGDOptions{.lr = 0.05, .momentum = 0.9});
}

// Bucket cap (MiB) that cuts the MLP into several buckets: its 16 x 16 weight is 1 KiB.
constexpr double kSmallCapMb = 1100.0 / (1024.0 * 1024.0);

}  // namespace

TEST_CASE("nccl parallel: DDP, ZeRO-1 and ZeRO-2 on CUDA equal one CPU process on the whole batch") {
  auto group = test::nccl_world_or_skip();
  if (!group) return;
  const int n = group->size(), r = group->rank();
  const int64_t b = 4;
  auto reference = mlp(5);
  auto ddp_model = mlp_on_gpu(5), z1_model = mlp_on_gpu(5), z2_model = mlp_on_gpu(5);
  auto ddp = std::make_shared<DistributedDataParallel>(ddp_model, group, DdpOptions{.bucket_cap_mb = kSmallCapMb});
  REQUIRE(ddp->num_buckets() >= 3);
  auto ref_opt = sgd(reference->parameters());
  auto ddp_opt = sgd(ddp->parameters());
  ZeroOptimizer z1(z1_model->parameters(), group, 1, sgd);
  ZeroOptimizer z2(z2_model->parameters(), group, 2, sgd);
  for (int step = 0; step < 5; ++step) {
    manual_seed(300 + static_cast<uint64_t>(step));
    Tensor x = randn({n * b, 6}), y = randn({n * b, 3});
    Tensor xl = x.narrow(0, r * b, b).contiguous().to(kGpu), yl = y.narrow(0, r * b, b).contiguous().to(kGpu);
    nn::functional::mse_loss((*reference)(x), y).backward();
    ref_opt->step();
    ref_opt->zero_grad();
    nn::functional::mse_loss((*ddp)(xl), yl).backward();
    // The buckets' all-reduces finished inside backward.
    CHECK(ddp->last_events().back().kind == DdpEvent::Kind::SyncFinished);
    ddp_opt->step();
    ddp_opt->zero_grad();
    nn::functional::mse_loss((*z1_model)(xl), yl).backward();
    z1.step();
    z1.zero_grad();
    nn::functional::mse_loss((*z2_model)(xl), yl).backward();
    z2.step();
    z2.zero_grad();
  }
  CHECK(test::max_rel_diff(*ddp_model, *reference, 1e-5) <= 1e-4);
  CHECK(test::max_rel_diff(*z1_model, *ddp_model, 1e-6) <= 1e-5);
  CHECK(test::max_rel_diff(*z2_model, *z1_model, 1e-6) <= 1e-5);
}

TEST_CASE("nccl parallel: the textbook ring all-reduce over NCCL send/recv equals NCCL's all-reduce") {
  auto group = test::nccl_world_or_skip();
  if (!group) return;
  const int n = group->size(), r = group->rank();
  // 10 elements: chunks of unequal size for 4 ranks; large enough that every rank sends.
  Tensor mine = (arange(10).to(kFloat32) * (r + 1) + 0.25 * r).to(kGpu);
  Tensor native = mine.clone(), ring = mine.clone();
  group->all_reduce(native);
  struct RingGuard {
    ProcessGroup& g;
    explicit RingGuard(ProcessGroup& group) : g(group) { g.set_algorithm(Algorithm::Ring); }
    ~RingGuard() { g.set_algorithm(Algorithm::Native); }
  } guard(*group);
  group->all_reduce(ring);
  CHECK(max_abs_diff(ring, native) < 1e-5);
  CHECK(max_abs_diff(native, arange(10).to(kFloat32) * (n * (n + 1) / 2.0) + 0.25 * n * (n - 1) / 2.0) < 1e-5);
}

TEST_CASE("nccl parallel: DDP's first bucket is all-reduced while backward still runs (event order)") {
  auto group = test::nccl_world_or_skip();
  if (!group) return;
  auto model = mlp_on_gpu(3);
  DistributedDataParallel ddp(model, group, DdpOptions{.bucket_cap_mb = kSmallCapMb});
  manual_seed(9);
  Tensor x = randn({4, 6}).to(kGpu), y = randn({4, 3}).to(kGpu);
  nn::functional::mse_loss(ddp(x), y).backward();
  const auto& events = ddp.last_events();
  auto first_launch = std::find_if(events.begin(), events.end(),
                                   [](const DdpEvent& e) { return e.kind == DdpEvent::Kind::BucketLaunched; });
  auto last_grad = std::find_if(events.rbegin(), events.rend(),
                                [](const DdpEvent& e) { return e.kind == DdpEvent::Kind::GradReady; });
  REQUIRE(first_launch != events.end());
  REQUIRE(last_grad != events.rend());
  CHECK(first_launch - events.begin() < events.rend() - last_grad - 1);
}

TEST_CASE("nccl parallel: FSDP (ZeRO-3) on CUDA equals one CPU process on the whole batch") {
  auto group = test::nccl_world_or_skip();
  if (!group) return;
  const int n = group->size(), r = group->rank();
  const int64_t b = 4;
  auto reference = mlp(13);
  auto ref_opt = sgd(reference->parameters());
  FullyShardedDataParallel sharded(mlp_on_gpu(13), group);
  auto opt = sgd(sharded.parameters());
  Generator g(3);
  for (int step = 0; step < 4; ++step) {
    Tensor x = randn({n * b, 6}, kFloat32, &g), y = randn({n * b, 3}, kFloat32, &g);
    ref_opt->zero_grad();
    opt->zero_grad();
    nn::functional::mse_loss((*reference)(x), y).backward();
    nn::functional::mse_loss(sharded(x.slice(0, r * b, (r + 1) * b).to(kGpu)), y.slice(0, r * b, (r + 1) * b).to(kGpu))
        .backward();
    ref_opt->step();
    opt->step();
  }
  double worst = 0;
  const nn::StateDict full = sharded.full_state_dict(), expected = reference->state_dict();
  for (const auto& [name, t] : expected) worst = std::max(worst, max_abs_diff(full.at(name), t));
  CAPTURE(worst);
  CHECK(worst < 1e-5);
}

TEST_CASE("nccl parallel: the tensor-parallel MLP on CUDA equals the CPU MLP, forward and backward") {
  auto group = test::nccl_world_or_skip();
  if (!group) return;
  const int t = group->size(), r = group->rank();
  const int64_t in = 6, hidden = 8, out = 5;
  manual_seed(11);
  nn::Linear ref1(in, hidden), ref2(hidden, out);
  manual_seed(11);
  ColumnParallelLinear col(in, hidden, group);
  RowParallelLinear row(hidden, out, group);
  col.to(kGpu);
  row.to(kGpu);
  Generator g(5);
  Tensor x_ref = randn({4, in}, kFloat32, &g).requires_grad_(true);
  Tensor x = x_ref.detach().to(kGpu).requires_grad_(true);
  Tensor target = randn({4, out}, kFloat32, &g);
  Tensor y_ref = ref2(ref1(x_ref).relu());
  Tensor y = row(col(x).relu());
  CHECK(max_abs_diff(y, y_ref) < 1e-5);
  ((y_ref - target) * (y_ref - target)).sum().backward();
  Tensor target_gpu = target.to(kGpu);
  ((y - target_gpu) * (y - target_gpu)).sum().backward();
  const int64_t h = hidden / t;
  CHECK(max_abs_diff(x.grad(), x_ref.grad()) < 1e-5);
  CHECK(max_abs_diff(col.weight.grad(), ref1.weight.grad().slice(0, r * h, (r + 1) * h)) < 1e-5);
  CHECK(max_abs_diff(row.weight.grad(), ref2.weight.grad().slice(1, r * h, (r + 1) * h)) < 1e-5);
  CHECK(max_abs_diff(row.bias.grad(), ref2.bias.grad()) < 1e-5);
}

TEST_CASE("nccl parallel: GPipe and 1F1B on CUDA equal the whole CPU model in loss and gradients") {
  using namespace loom::distributed::pipeline;
  auto group = test::nccl_world_or_skip();
  if (!group) return;
  const int p = group->size(), s = group->rank();
  const int64_t m = 4, batch = 8;
  Generator g(17);
  Tensor x = randn({batch, 6}, kFloat32, &g), y = randn({batch, 3}, kFloat32, &g);
  auto mse = [](const Tensor& out, const Tensor& target) { return nn::functional::mse_loss(out, target); };
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB}) {
    CAPTURE(schedule_kind_name(kind));
    auto reference = mlp(5), model = mlp(5);
    const std::vector<int64_t> bounds = partition_balanced(layer_counts(*model), p);
    auto stage = stage_of(*model, bounds[s], bounds[s + 1]);
    stage->to(kGpu);
    PipelineStageRunner runner(stage, group, kind, m);
    Tensor expected = mse((*reference)(x), y);
    expected.backward();
    StepStats stats = runner.train_step(x.to(kGpu), y.to(kGpu), mse);
    CHECK(std::abs(stats.loss - expected.item<double>()) < 1e-5);
    for (int64_t layer = bounds[s]; layer < bounds[s + 1]; ++layer) {
      const auto* ref_linear = dynamic_cast<const nn::Linear*>(&(*reference)[layer]);
      if (!ref_linear) continue;
      const auto& mine = runner.stage().at<nn::Linear>(layer - bounds[s]);
      CHECK(max_abs_diff(mine.weight.grad(), ref_linear->weight.grad()) < 1e-6);
      CHECK(max_abs_diff(mine.bias.grad(), ref_linear->bias.grad()) < 1e-6);
    }
  }
}
