/*
 * 3-D parallelism in one page: an MLP trained with data, tensor and pipeline parallelism at
 * once on a DeviceMesh, checked against the same model trained by one process.
 *
 *   mpirun -np 8 build/examples/mesh_mlp 2 2 2      # dp tp pp (their product is the world size)
 *   mpirun -np 4 build/examples/mesh_mlp 1 2 2 1f1b  # or gpipe, or interleaved (2 chunks per rank)
 *
 * What each rank does (see docs/parallelism.md):
 *   1. the mesh gives it a coordinate (dp, tp, pp) and a data, a tensor and a pipeline group;
 *   2. every rank builds the same full model (same seed), and keeps its piece of it: the linear
 *      layers split over the tensor group (column, row, column, row: one all-reduce per pair),
 *      then the layers of its pipeline stage;
 *   3. each step, its data replica takes 1/dp of the batch, the pipeline runs it as micro-batches,
 *      and the gradients are averaged over the data group before the SGD step.
 * Rank 0 also trains the unsplit model on the whole batch and prints both losses side by side:
 * they agree to rounding.
 */
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "distributed/mesh.h"
#include "distributed/pipeline/pipeline.h"
#include "distributed/tensor_parallel/split_model.h"
#include "nn/nn.h"
#include "ops/ops.h"

using namespace loom;
using namespace loom::distributed;

namespace {

// 32 -> 64 -> 64 -> 64 -> 64 -> 10 with ReLUs: 5 linear layers (9 layers in all).
std::shared_ptr<nn::Sequential> full_model() {
  manual_seed(1);
  auto net = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(32, 64));
  for (int i = 0; i < 3; ++i) {
    net->push_back(std::make_shared<nn::ReLU>());
    net->push_back(std::make_shared<nn::Linear>(64, 64));
  }
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::Linear>(64, 10));
  return net;
}

}  // namespace

int main(int argc, char** argv) {
  auto world = init_process_group(Backend::Mpi);
  if (argc < 4) {
    if (world->rank() == 0) std::fprintf(stderr, "usage: mpirun -np N mesh_mlp DP TP PP [gpipe|1f1b|interleaved]\n");
    return 2;
  }
  const MeshShape shape{.dp = std::atoi(argv[1]), .tp = std::atoi(argv[2]), .pp = std::atoi(argv[3])};
  const std::string schedule = argc > 4 ? argv[4] : "1f1b";
  try {
    DeviceMesh mesh(world, shape);  // throws when dp·tp·pp is not the world size
    const MeshCoord c = mesh.coord();
    std::printf("rank %d: dp %d, tp %d, pp %d\n", world->rank(), c.dp, c.tp, c.pp);

    auto reference = full_model();
    // Linear layers alternate column- and row-parallel, so that each pair needs one all-reduce;
    // the odd last layer stays whole (replicated) on every tensor rank.
    auto model = split_linear_layers(*full_model(), mesh.tensor_group_ptr(), LastLinear::Replicated).net;
    const int64_t microbatches = 4, batch = 16 * shape.dp;
    std::unique_ptr<pipeline::PipelineStageRunner> runner;
    if (schedule == "interleaved") {
      // 2 chunks per rank: the model cut into 2·pp stages, rank s holding stages s and s + pp.
      const auto bounds = pipeline::partition_balanced(pipeline::layer_counts(*model), 2 * shape.pp);
      std::vector<std::shared_ptr<nn::Sequential>> chunks;
      for (int k = 0; k < 2; ++k)
        chunks.push_back(pipeline::stage_of(*model, bounds[k * shape.pp + c.pp], bounds[k * shape.pp + c.pp + 1]));
      runner = std::make_unique<pipeline::PipelineStageRunner>(chunks, mesh.pipeline_group_ptr(), microbatches);
    } else {
      const auto bounds = pipeline::partition_balanced(pipeline::parameter_counts(*model), shape.pp);
      runner = std::make_unique<pipeline::PipelineStageRunner>(
          pipeline::stage_of(*model, bounds[c.pp], bounds[c.pp + 1]), mesh.pipeline_group_ptr(),
          schedule == "gpipe" ? pipeline::ScheduleKind::GPipe : pipeline::ScheduleKind::OneFOneB, microbatches);
    }
    nn::SGD sgd(runner->parameters(), nn::SGDOptions{.lr = 0.1, .momentum = 0.9});
    nn::SGD ref_sgd(reference->parameters(), nn::SGDOptions{.lr = 0.1, .momentum = 0.9});
    auto loss_fn = [](const Tensor& out, const Tensor& y) { return nn::functional::cross_entropy(out, y); };

    Generator data(7);  // the same batches on every rank
    const Tensor teacher = randn({32, 10}, kFloat32, &data);
    for (int step = 1; step <= 10; ++step) {
      const Tensor x = randn({batch, 32}, kFloat32, &data);
      const Tensor y = x.matmul(teacher).argmax(1);
      // This data replica's share of the batch.
      const int64_t share = batch / shape.dp;
      const Tensor my_x = x.slice(0, c.dp * share, (c.dp + 1) * share), my_y = y.slice(0, c.dp * share, (c.dp + 1) * share);
      sgd.zero_grad();
      const pipeline::StepStats stats = runner->train_step(my_x, my_y, loss_fn);
      // Data parallelism: average the replicas' gradients (waits for every replica's backward).
      for (Tensor p : runner->parameters()) {
        mesh.data_group().all_reduce(p.mutable_grad(), ReduceOp::Avg);
      }
      sgd.step();
      // The job's loss: the mean over the data replicas.
      Tensor loss = full({1}, stats.loss, TensorOptions(kFloat64));
      mesh.data_group().all_reduce(loss, ReduceOp::Avg);
      if (world->rank() == 0) {
        ref_sgd.zero_grad();
        Tensor expected = loss_fn((*reference)(x), y);
        expected.backward();
        ref_sgd.step();
        std::printf("step %2d: loss %.6f (%s), one process %.6f\n", step, loss.item<double>(),
                    shape.to_string().c_str(), expected.item<double>());
      }
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "rank %d: %s\n", world->rank(), e.what());
    abort_job(e.what(), 2);
  }
  return 0;
}
