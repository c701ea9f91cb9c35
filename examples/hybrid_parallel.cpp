/*
 * Hybrid parallelism with the public API: an MLP trained data parallel x tensor parallel, its
 * gradients averaged and clipped by the whole model's norm, and the whole model written to one
 * file that a single process loads.
 *
 *   mpirun -np 4 build/examples/hybrid_parallel 2 2 /tmp/hybrid.safetensors   # dp tp [out]
 *
 * Each rank (see docs/parallelism.md):
 *   1. joins a dp x tp DeviceMesh and builds the same whole model (same seed);
 *   2. keeps its piece: the Linear layers split column, row, column over the tensor group
 *      (split_linear_layers), with where each piece sits in the whole model (its placement);
 *   3. each step, takes its replica's share of the batch, runs forward and backward through its
 *      piece, averages the gradients over the data group, clips them by the norm of the whole
 *      model (summed over the tensor group), and steps;
 *   4. at the end, gathers the whole state dict from every rank's pieces; rank 0 saves it.
 */
#include <cstdio>
#include <cstdlib>
#include <string>

#include "distributed/gradient_sync.h"
#include "distributed/mesh.h"
#include "distributed/shard_placement.h"
#include "distributed/tensor_parallel/split_model.h"
#include "nn/nn.h"
#include "ops/ops.h"

using namespace loom;
using namespace loom::distributed;

// 16 -> 32 -> 32 -> 4 with ReLUs: column, row, column (gathered: the loss needs every logit).
std::shared_ptr<nn::Sequential> whole_model() {
  manual_seed(1);
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(16, 32), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(32, 32), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(32, 4));
}

int main(int argc, char** argv) {
  auto world = init_process_group(Backend::Mpi);
  if (argc < 3) {
    if (world->rank() == 0) std::fprintf(stderr, "usage: mpirun -np N hybrid_parallel DP TP [OUT.safetensors]\n");
    return 2;
  }
  try {
    const MeshShape shape{.dp = std::atoi(argv[1]), .tp = std::atoi(argv[2]), .pp = 1};
    DeviceMesh mesh(world, shape);  // throws when dp·tp is not the world size
    const MeshCoord c = mesh.coord();

    auto whole = whole_model();
    SplitSequential piece = split_linear_layers(*whole, mesh.tensor_group_ptr(), LastLinear::Gathered);
    check_placements(*whole, *piece.net, piece.placement.pieces, piece.placement.replicated);
    // The norm counts a parameter that every tensor rank holds whole (the row layer's bias) once.
    std::vector<Tensor> counted;
    for (const auto& [name, p] : piece.net->named_parameters())
      if (c.tp == 0 || !piece.placement.replicated.count(name)) counted.push_back(p);
    nn::SGD sgd(piece.net->parameters(), nn::SGDOptions{.lr = 0.1, .momentum = 0.9});

    Generator data(7);  // the same batches on every rank
    const Tensor teacher = randn({16, 4}, kFloat32, &data);
    const int64_t batch = 32, share = batch / shape.dp;
    for (int step = 1; step <= 20; ++step) {
      const Tensor x = randn({batch, 16}, kFloat32, &data), y = x.matmul(teacher).argmax(1);
      // This data replica's share of the batch; the tensor ranks of a replica read the same one.
      const Tensor my_x = x.slice(0, c.dp * share, (c.dp + 1) * share);
      const Tensor my_y = y.slice(0, c.dp * share, (c.dp + 1) * share);
      sgd.zero_grad();
      Tensor loss = nn::functional::cross_entropy((*piece.net)(my_x), my_y);
      loss.backward();
      average_gradients(piece.net->parameters(), mesh.data_group());  // waits for the other replicas
      const double norm = clip_grad_norm_across(piece.net->parameters(), counted, 1.0, {&mesh.tensor_group()});
      sgd.step();
      // The job's loss: the mean over the data replicas (waits for each replica's loss).
      Tensor mean = full({1}, loss.item<double>(), TensorOptions(kFloat64));
      mesh.data_group().all_reduce(mean, ReduceOp::Avg);
      if (world->rank() == 0 && step % 5 == 0)
        std::printf("step %2d: loss %.4f, gradient norm %.3f (%s)\n", step, mean.item<double>(), norm,
                    shape.to_string().c_str());
    }

    // Replica 0 places its pieces; every rank gets the whole state dict (collective).
    nn::StateDict trained = gather_full_state_dict(*whole, piece.net->state_dict(), piece.placement.pieces,
                                                   c.dp == 0, *world);
    if (world->rank() == 0 && argc > 3) {
      whole->load_state_dict(trained);
      nn::save_safetensors(argv[3], whole->state_dict());
      std::printf("wrote the whole model to %s\n", argv[3]);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "rank %d: %s\n", world->rank(), e.what());
    abort_job(e.what(), 2);
  }
  return 0;
}
