/*
 * ZeRO stage 3 (distributed/zero3.h) under mpirun with 2 and 4 ranks:
 *   - the trajectory: N ranks with batch b each, sharded, give after 4 AdamW (and 4 SGD-momentum)
 *     steps the parameters of one process training the whole model on the N·b batch (tolerance
 *     from reassociation only), including gradient accumulation over two micro-batches;
 *   - dropout: the recomputation in backward replays the forward's mask (checked against an
 *     unsharded model on the same data and seed);
 *   - the memory: parameters, gradients and Adam state per rank are the shards, Ψ/N each
 *     (rounded up to whole shards), and the gathered peak is the largest layer;
 *   - eval-mode forward (no recording) gathers and frees too, and bad models are named.
 */
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "distributed/zero3.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "tests/distributed/mpi_test_util.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::distributed;

namespace {

// 9 -> 7 -> tanh -> 5 -> dropout -> 3: (63 + 7) + (35 + 5) + (15 + 3) = 128 parameters; no
// layer's count divides by 4 (70, 40, 18), so every shard has padding somewhere.
std::shared_ptr<nn::Sequential> make_model(double dropout) {
  manual_seed(13);
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(9, 7), std::make_shared<nn::Tanh>(),
                                          std::make_shared<nn::Linear>(7, 5), std::make_shared<nn::Dropout>(dropout),
                                          std::make_shared<nn::Linear>(5, 3));
}

double max_difference(const nn::StateDict& a, const nn::StateDict& b) {
  double worst = 0;
  for (const auto& [name, t] : a) worst = std::max(worst, (t - b.at(name)).abs().max().item<double>());
  return worst;
}

template <class MakeOptimizer>
void check_trajectory(MakeOptimizer make_optimizer, int64_t accumulation) {
  auto world = test::world();
  const int n = world->size(), r = world->rank();
  const int64_t b = 4;
  Generator g(3);
  // The steps' batches, the same on every rank; rank r takes rows [r·b, (r+1)·b) of each.
  std::vector<Tensor> xs, ys;
  for (int step = 0; step < 4 * accumulation; ++step) {
    xs.push_back(randn({n * b, 9}, kFloat32, &g));
    ys.push_back(randint(0, 3, {n * b}, DType::Int64, &g));
  }
  auto reference = make_model(0.0);
  auto ref_opt = make_optimizer(reference->parameters());
  FullyShardedDataParallel sharded(make_model(0.0), world);
  auto opt = make_optimizer(sharded.parameters());
  for (int step = 0; step < 4; ++step) {
    ref_opt->zero_grad();
    opt->zero_grad();
    for (int64_t micro = 0; micro < accumulation; ++micro) {
      const Tensor& x = xs[step * accumulation + micro];
      const Tensor& y = ys[step * accumulation + micro];
      Tensor ref_loss = nn::functional::cross_entropy((*reference)(x), y) / static_cast<double>(accumulation);
      ref_loss.backward();
      Tensor mine = x.slice(0, r * b, (r + 1) * b);
      Tensor loss = nn::functional::cross_entropy(sharded(mine), y.slice(0, r * b, (r + 1) * b)) /
                    static_cast<double>(accumulation);
      loss.backward();
    }
    ref_opt->step();
    opt->step();
  }
  const double difference = max_difference(reference->state_dict(), sharded.full_state_dict());
  CAPTURE(difference);
  CHECK(difference < 1e-5);
}

}  // namespace

TEST_CASE("zero3: sharded training equals one process on the whole batch (AdamW, SGD momentum, accumulation)") {
  auto adamw = [](std::vector<Tensor> p) {
    return std::make_unique<nn::AdamW>(std::move(p), nn::AdamWOptions{.lr = 1e-2, .weight_decay = 0.1});
  };
  auto sgd = [](std::vector<Tensor> p) {
    return std::make_unique<nn::SGD>(std::move(p), nn::SGDOptions{.lr = 0.05, .momentum = 0.9});
  };
  SUBCASE("AdamW") { check_trajectory(adamw, 1); }
  SUBCASE("SGD momentum, 2 accumulated micro-batches") { check_trajectory(sgd, 2); }
}

TEST_CASE("zero3: the recomputation in backward replays the forward's dropout mask") {
  // Every rank trains on the same batch with the same seed, so the averaged gradient is the
  // local one: one SGD step must equal an unsharded model's. A recomputation that drew a new
  // mask would give gradients for another mask than the loss's.
  auto world = test::world();
  auto reference = make_model(0.5);
  FullyShardedDataParallel sharded(make_model(0.5), world);
  nn::SGD ref_sgd(reference->parameters(), nn::SGDOptions{.lr = 0.5});
  nn::SGD sgd(sharded.parameters(), nn::SGDOptions{.lr = 0.5});
  Generator g(9);
  const Tensor x = randn({16, 9}, kFloat32, &g), y = randint(0, 3, {16}, DType::Int64, &g);
  manual_seed(77);
  nn::functional::cross_entropy((*reference)(x), y).backward();
  manual_seed(77);
  nn::functional::cross_entropy(sharded(x), y).backward();
  ref_sgd.step();
  sgd.step();
  const double difference = max_difference(reference->state_dict(), sharded.full_state_dict());
  CAPTURE(difference);
  CHECK(difference < 1e-6);
  CHECK(difference == doctest::Approx(0.0));
}

TEST_CASE("zero3: parameters, gradients and optimizer state per rank are 1/N of the model's") {
  auto world = test::world();
  const int64_t n = world->size();
  auto model = make_model(0.0);
  const int64_t psi = model->num_parameters();
  FullyShardedDataParallel sharded(model, world);
  nn::Adam adam(sharded.parameters(), nn::AdamOptions{.lr = 1e-3});
  Tensor x = randn({4, 9});
  nn::functional::cross_entropy(sharded(x), randint(0, 3, {4}, DType::Int64)).backward();
  adam.step();
  const ZeroMemoryReport report = sharded.memory_report();
  // Each layer's shard is ceil(Ψ_u / N) elements: 70, 40 and 18 parameters.
  int64_t shard_elements = 0;
  for (int64_t layer : {70, 40, 18}) shard_elements += (layer + n - 1) / n;
  CHECK(report.parameter_bytes == 4 * shard_elements);
  CHECK(report.gradient_bytes == 4 * shard_elements);
  // Adam: two moments per shard element (plus a step counter per shard tensor).
  CHECK(optimizer_state_bytes(adam) >= 8 * shard_elements);
  CHECK(optimizer_state_bytes(adam) < 8 * shard_elements + 64);
  CHECK(4 * shard_elements <= 4 * psi / n + 4 * 3);  // Ψ/N, up to the padding of three layers
  CHECK(sharded.peak_gathered_bytes() == 4 * n * ((70 + n - 1) / n));
  // Between steps the wrapped model's parameters hold nothing: only the shards exist.
  for (const Tensor& p : model->parameters()) CHECK(p.numel() == 0);
  MESSAGE("rank holds " << report.parameter_bytes << " B of parameters (model: " << 4 * psi << " B), "
                        << report.gradient_bytes << " B of gradients, " << optimizer_state_bytes(adam)
                        << " B of Adam state; peak gathered layer " << sharded.peak_gathered_bytes() << " B");
}

TEST_CASE("zero3: a forward without recording gathers and frees; bad models are named") {
  auto world = test::world();
  auto reference = make_model(0.0);
  FullyShardedDataParallel sharded(make_model(0.0), world);
  sharded.eval();
  Tensor x = randn({3, 9}, kFloat32);
  world->broadcast(x, 0);
  Tensor out;
  {
    NoGradGuard no_grad;
    out = sharded(x);
  }
  CHECK((out - (*reference)(x)).abs().max().item<double>() < 1e-6);
  CHECK(test::error_of([&] { FullyShardedDataParallel(std::make_shared<nn::Sequential>(std::make_shared<nn::ReLU>()), world); })
            .find("no parameters to shard") != std::string::npos);
  auto shared = std::make_shared<nn::Linear>(4, 4);
  CHECK(test::error_of([&] { FullyShardedDataParallel(std::make_shared<nn::Sequential>(shared, shared), world); })
            .find("shares a parameter with an earlier layer") != std::string::npos);
}
