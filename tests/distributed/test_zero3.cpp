/*
 * ZeRO stage 3 (distributed/zero3.h) under mpirun with 2 and 4 ranks:
 *   - the trajectory: N ranks with batch b each, sharded, give after 4 AdamW (and 4 SGD-momentum)
 *     steps the parameters of one process training the whole model on the N·b batch (tolerance
 *     from reassociation only), including gradient accumulation over two micro-batches;
 *   - dropout: the recomputation in backward replays the forward's mask (checked against an
 *     unsharded model on the same data and seed);
 *   - the memory: parameters, gradients and Adam state per rank are the shards, Ψ/N each
 *     (rounded up to whole shards), and the gathered peak is the largest layer;
 *   - eval-mode forward (no recording) gathers and frees too, and bad models are named;
 *   - prefetch: the same trajectory with and without it; which gathers were posted ahead, and
 *     the order of every collective, forward and backward;
 *   - tied weights (one Linear used twice) train as the unsharded model does;
 *   - gather_all: forwards without collectives, so ranks may run different numbers of them.
 */
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
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

// 9 -> 9 -> tanh -> the same 9 -> 9 again -> 3: the second use of `a` is tied to the first.
std::shared_ptr<nn::Sequential> make_tied_model() {
  manual_seed(13);
  auto a = std::make_shared<nn::Linear>(9, 9);
  return std::make_shared<nn::Sequential>(a, std::make_shared<nn::Tanh>(), a, std::make_shared<nn::Linear>(9, 3));
}

double max_difference(const nn::StateDict& a, const nn::StateDict& b) {
  double worst = 0;
  for (const auto& [name, t] : a) worst = std::max(worst, (t - b.at(name)).abs().max().item<double>());
  return worst;
}

template <class MakeOptimizer>
void check_trajectory(MakeOptimizer make_optimizer, int64_t accumulation, bool prefetch = true,
                      const std::function<std::shared_ptr<nn::Sequential>()>& make = [] { return make_model(0.0); }) {
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
  auto reference = make();
  auto ref_opt = make_optimizer(reference->parameters());
  FullyShardedDataParallel sharded(make(), world);
  sharded.set_prefetch(prefetch);
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
  SUBCASE("AdamW without prefetch") { check_trajectory(adamw, 1, false); }
  SUBCASE("a tied Linear, AdamW") { check_trajectory(adamw, 1, true, make_tied_model); }
  SUBCASE("a tied Linear, SGD, 2 micro-batches, no prefetch") { check_trajectory(sgd, 2, false, make_tied_model); }
}

TEST_CASE("zero3: prefetch posts the next layer's gather ahead; the collectives' order") {
  auto world = test::world();
  for (const bool prefetch : {true, false}) {
    CAPTURE(prefetch);
    FullyShardedDataParallel sharded(make_model(0.0), world);
    sharded.set_prefetch(prefetch);
    std::vector<std::string> spans;
    sharded.set_span_observer([&](const std::string& name, auto begin, auto end, int64_t bytes) {
      CHECK(end >= begin);
      CHECK(bytes > 0);
      spans.push_back(name);
    });
    Tensor x = randn({4, 9});
    nn::functional::cross_entropy(sharded(x), randint(0, 3, {4}, DType::Int64)).backward();
    // Layers 0, 2 and 4 have parameters. Forward gathers 0, 2, 4; backward 4, 2, 0. A layer's
    // reduce-scatter is waited for when the next layer's backward has posted its own (so after
    // that layer's gather), and the last one's at once. With prefetch every gather but the first
    // of each pass was posted while the layer before it ran.
    CHECK(spans == std::vector<std::string>{"all-gather 0", "all-gather 2", "all-gather 4", "all-gather 4",
                                            "all-gather 2", "reduce-scatter 4", "all-gather 0", "reduce-scatter 2",
                                            "reduce-scatter 0"});
    const auto timings = sharded.timings();
    CHECK(timings.gathers == 6);
    CHECK(timings.prefetched == (prefetch ? 4 : 0));
    CHECK(timings.gather_wait_seconds >= 0);
    sharded.reset_timings();
    CHECK(sharded.timings().gathers == 0);
  }
}

TEST_CASE("zero3: gather_all makes the model whole; forwards then need no collective") {
  auto world = test::world();
  auto reference = make_tied_model();
  auto model = make_tied_model();
  FullyShardedDataParallel sharded(model, world);
  Generator g(5);
  const Tensor x = randn({6, 9}, kFloat32, &g);
  {
    FullParameters whole(sharded);
    NoGradGuard no_grad;
    sharded.full_state_dict();  // nests: must not release what `whole` holds
    for (const Tensor& p : model->parameters()) CHECK(p.numel() > 0);
    // Rank r runs r + 1 forwards: with a collective per forward the ranks would wait forever.
    for (int k = 0; k <= world->rank(); ++k)
      CHECK((sharded(x) - (*reference)(x)).abs().max().item<double>() < 1e-6);
  }
  for (const Tensor& p : model->parameters()) CHECK(p.numel() == 0);
  // Layers 0 and 3 own parameters, gathered once each: layer 2 borrows layer 0's, and the nested
  // gather_all of full_state_dict finds them all gathered.
  CHECK(sharded.timings().gathers == 2);
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

TEST_CASE("zero3: a forward without recording gathers and frees; a model without parameters is named") {
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
}
