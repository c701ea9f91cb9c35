/*
 * 3-D parallelism on a DeviceMesh: every factorisation dp x tp x pp of the world (2 or 4 ranks).
 * An MLP whose linear layers are tensor-parallel (column, row, column, row) is cut into pp
 * pipeline stages and run with 1F1B; each data-parallel replica takes its share of the batch and
 * the gradients are averaged over the data group. After each step every rank's parameter shards
 * must hold the slices of the single-process model's gradients, and three SGD steps must keep the
 * losses equal: DP x TP x PP computes what one process computes.
 */
#include <doctest/doctest.h>

#include "autograd/autograd.h"
#include "core/random.h"
#include "distributed/mesh.h"
#include "distributed/pipeline/pipeline.h"
#include "distributed/tensor_parallel/layers.h"
#include "nn/layers/activation.h"
#include "nn/layers/linear.h"
#include "nn/loss.h"
#include "nn/optim/sgd.h"
#include "ops/ops.h"
#include "tests/distributed/mpi_test_util.h"
#include "tests/test_util.h"

namespace loom::distributed {
namespace {

using test::world;

// The single-process model: Linear 6-16, ReLU, 16-16, ReLU, 16-16, ReLU, 16-4 (layers 0, 2, 4, 6).
std::shared_ptr<nn::Sequential> reference_mlp() {
  manual_seed(31);
  return std::make_shared<nn::Sequential>(
      std::make_shared<nn::Linear>(6, 16), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(16, 16),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(16, 16), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(16, 4));
}

// The same model with its linear layers split over the tensor group: column, row, column, row.
std::shared_ptr<nn::Sequential> tensor_parallel_mlp(const nn::Sequential& reference, std::shared_ptr<ProcessGroup> tp) {
  auto net = std::make_shared<nn::Sequential>();
  for (int64_t i = 0; i < static_cast<int64_t>(reference.size()); ++i) {
    if (i % 2 == 1) {
      net->push_back(std::make_shared<nn::ReLU>());
    } else if (i % 4 == 0) {
      net->push_back(std::make_shared<ColumnParallelLinear>(reference.at<nn::Linear>(i), tp));
    } else {
      net->push_back(std::make_shared<RowParallelLinear>(reference.at<nn::Linear>(i), tp));
    }
  }
  return net;
}

TEST_CASE("hybrid DP x TP x PP equals one process on every factorisation of the world") {
  const int n = world()->size();
  const int64_t batch = 16, microbatches = 2;
  Generator g(8);
  const Tensor x = randn({batch, 6}, kFloat32, &g), y = randint(0, 4, {batch}, DType::Int64, &g);
  auto ce = [](const Tensor& out, const Tensor& target) { return nn::functional::cross_entropy(out, target); };
  for (int dp = 1; dp <= n; ++dp)
    for (int tp = 1; tp <= n; ++tp) {
      if (n % (dp * tp) != 0 || n / (dp * tp) > 4) continue;
      const MeshShape shape{.dp = dp, .tp = tp, .pp = n / (dp * tp)};
      CAPTURE(shape.to_string());
      DeviceMesh mesh(world(), shape);
      const MeshCoord c = mesh.coord();
      auto reference = reference_mlp();
      auto model = tensor_parallel_mlp(*reference, mesh.tensor_group_ptr());
      const std::vector<int64_t> bounds = pipeline::partition_balanced(pipeline::layer_counts(*model), shape.pp);
      pipeline::PipelineStageRunner runner(pipeline::stage_of(*model, bounds[c.pp], bounds[c.pp + 1]),
                                           mesh.pipeline_group_ptr(), pipeline::ScheduleKind::OneFOneB, microbatches);
      nn::SGD ref_sgd(reference->parameters(), nn::SGDOptions{.lr = 0.1, .momentum = 0.9});
      nn::SGD sgd(runner.stage().parameters(), nn::SGDOptions{.lr = 0.1, .momentum = 0.9});
      const int64_t share = batch / dp;
      const Tensor my_x = x.slice(0, c.dp * share, (c.dp + 1) * share), my_y = y.slice(0, c.dp * share, (c.dp + 1) * share);
      for (int step = 0; step < 3; ++step) {
        CAPTURE(step);
        ref_sgd.zero_grad();
        sgd.zero_grad();
        Tensor expected = ce((*reference)(x), y);
        expected.backward();
        pipeline::StepStats stats = runner.train_step(my_x, my_y, ce);
        // Data parallelism: the replicas' gradients (and losses) averaged over the data group.
        for (Tensor p : runner.stage().parameters()) {
          mesh.data_group().all_reduce(p.grad());
          p.mutable_grad().div_(static_cast<double>(dp));
        }
        Tensor loss = full({1}, stats.loss, TensorOptions(kFloat64));
        mesh.data_group().all_reduce(loss);
        CHECK(std::abs(loss.item<double>() / dp - expected.item<double>()) < 1e-5);
        // Each linear layer of this stage against its slice of the reference's gradient.
        for (int64_t layer = bounds[c.pp]; layer < bounds[c.pp + 1]; layer += 1) {
          if (layer % 2 == 1) continue;
          const nn::Linear& ref = reference->at<nn::Linear>(layer);
          nn::Module& mine = runner.stage()[layer - bounds[c.pp]];
          if (auto* col = dynamic_cast<ColumnParallelLinear*>(&mine)) {
            const int64_t rows = col->weight.size(0);
            CHECK((col->weight.grad() - ref.weight.grad().slice(0, c.tp * rows, (c.tp + 1) * rows)).abs().max().item<double>() < 1e-5);
          } else if (auto* row = dynamic_cast<RowParallelLinear*>(&mine)) {
            const int64_t cols = row->weight.size(1);
            CHECK((row->weight.grad() - ref.weight.grad().slice(1, c.tp * cols, (c.tp + 1) * cols)).abs().max().item<double>() < 1e-5);
            CHECK((row->bias.grad() - ref.bias.grad()).abs().max().item<double>() < 1e-5);
          } else {
            FAIL("layer " << layer << " is not tensor-parallel");
          }
        }
        ref_sgd.step();
        sgd.step();
      }
    }
}

}  // namespace
}  // namespace loom::distributed
