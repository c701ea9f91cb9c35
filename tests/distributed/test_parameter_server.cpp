/*
 * Tests of the asynchronous parameter server (distributed/parameter_server.h), run under mpirun
 * with 2 and 4 ranks: rank 0 serves, the others work.
 *
 *   - staleness 0 with one worker is exactly synchronous SGD (momentum and weight decay included),
 *     compared with a single-process SGD loop on the same batches, with one server and with the
 *     parameters sharded over two;
 *   - the shard assignment balances whole tensors, largest first;
 *   - with every other rank working at a different pace and bound S, every applied gradient has
 *     staleness <= S, and the server's counters agree with the workers' own push/pull counts;
 *   - a small regression model trained asynchronously reaches a target loss;
 *   - workers with uneven amounts of work (one with none) shut the server down without a hang;
 *   - a server whose workers stay silent throws after the group's timeout;
 *   - misuse (wrong rank, negative bound, push before pull) throws.
 */
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "core/grad_mode.h"
#include "distributed/parameter_server.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "tests/distributed/mpi_test_util.h"

using namespace loom;
using namespace loom::distributed;

namespace {

// A classification batch sequence, the same on every rank (drawn from one seed).
struct Batches {
  Tensor x;  // [steps, batch, in]
  Tensor y;  // [steps, batch] int64 classes
};

Batches make_batches(int64_t steps, int64_t batch, int64_t in, int64_t classes, uint64_t seed) {
  manual_seed(seed);
  Batches b;
  b.x = randn({steps, batch, in});
  b.y = randint(0, classes, {steps, batch});
  return b;
}

nn::SGDOptions sgd_options() {
  return {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3};
}

OptimizerFactory sgd_factory(nn::SGDOptions options) {
  return
      [options](std::vector<Tensor> params) { return std::make_unique<nn::SGD>(std::move(params), options); };
}

}  // namespace

TEST_CASE("shards: whole tensors, largest first to the least loaded server") {
  auto shaped = [](std::vector<int64_t> numels) {
    std::vector<Tensor> t;
    for (int64_t n : numels) t.push_back(zeros({n}));
    return t;
  };
  // 10 -> s0; 8 -> s1; 7 -> s1 (8 < 10); 3 -> s0 (10 < 15); 2 -> s0 (13 < 15): loads 15 / 15.
  CHECK(assign_shards(shaped({10, 3, 7, 2, 8}), 2) == std::vector<int>{0, 0, 1, 0, 1});
  CHECK(assign_shards(shaped({5, 5, 5}), 3) == std::vector<int>{0, 1, 2});
  CHECK(assign_shards(shaped({4, 9}), 1) == std::vector<int>{0, 0});
  CHECK_THROWS_AS(assign_shards(shaped({4, 9}), 3), Error);
}

TEST_CASE("staleness 0 with one worker equals synchronous SGD exactly") {
  auto world = test::world();
  for (int servers : {1, 2}) {
    CAPTURE(servers);
    // Ranks 0 .. servers-1 serve, rank `servers` is the one worker; the others take no part.
    // Collective on world: every rank runs the same loop, and skips the same cases.
    if (servers + 1 > world->size()) break;
    std::vector<int> members;
    for (int r = 0; r <= servers; ++r) members.push_back(r);
    std::shared_ptr<ProcessGroup> group = world->new_group(members);
    if (!group) continue;

    constexpr int64_t kSteps = 8;
    const Batches data = make_batches(kSteps, 16, 6, 3, 11);
    manual_seed(5);  // the same initial weights on every rank: the servers' are version 0
    auto model = std::make_shared<nn::MLP>(std::vector<int64_t>{6, 12, 3});

    PsStats stats = train_async(group, model, sgd_factory(sgd_options()),
                                [&](nn::Module& m, int64_t step) {
                                  if (step == kSteps) return false;
                                  nn::functional::cross_entropy(m(data.x[step]), data.y[step]).backward();
                                  return true;
                                },
                                {.staleness = 0, .num_servers = servers});

    if (group->rank() < servers) {
      CHECK(stats.applied == kSteps);
      CHECK(stats.dropped == 0);
      CHECK(stats.pushes == kSteps);
      CHECK(stats.pulls == kSteps + 1);  // one pull per step, and the final one that ends the loop
      CHECK(stats.staleness_histogram == std::vector<int64_t>{kSteps});
      continue;
    }
    CHECK(stats.pushes == kSteps);
    // The reference: one process, the same initial weights, the same batches, plain SGD.
    manual_seed(5);
    auto reference = std::make_shared<nn::MLP>(std::vector<int64_t>{6, 12, 3});
    nn::SGD optimizer(reference->parameters(), sgd_options());
    for (int64_t step = 0; step < kSteps; ++step) {
      optimizer.zero_grad();
      nn::functional::cross_entropy((*reference)(data.x[step]), data.y[step]).backward();
      optimizer.step();
    }
    // The worker's module holds the parameters of its last pull: all kSteps updates applied.
    std::vector<Tensor> got = model->parameters(), want = reference->parameters();
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      CAPTURE(i);
      CHECK(got[i].to_vector<float>() == want[i].to_vector<float>());
    }
  }
}

TEST_CASE("every applied gradient is within the staleness bound") {
  auto world = test::world();
  constexpr int64_t kSteps = 12;
  const Batches data = make_batches(kSteps, 8, 6, 3, 21);
  // (servers, bound): one server, and on 4 ranks also two servers with two workers.
  std::vector<std::pair<int, int64_t>> cases = {{1, 0}, {1, 1}, {1, 3}};
  if (world->size() >= 4) cases.insert(cases.end(), {{2, 0}, {2, 2}});
  for (auto [servers, bound] : cases) {
    CAPTURE(servers);
    CAPTURE(bound);
    manual_seed(6);
    auto model = std::make_shared<nn::MLP>(std::vector<int64_t>{6, 12, 3});
    PsStats stats = train_async(
        world, model, sgd_factory({.lr = 0.05}),
        [&](nn::Module& m, int64_t step) {
          if (step == kSteps) return false;
          // Workers at different paces, so that the server interleaves them and gradients go stale.
          std::this_thread::sleep_for(std::chrono::microseconds(300 * world->rank() * (step % 3)));
          nn::functional::cross_entropy(m(data.x[step]), data.y[step]).backward();
          return true;
        },
        {.staleness = bound, .num_servers = servers});

    const bool server = world->rank() < servers;
    // Every rank's count of its own pushes and pulls, on every rank (servers contribute 0).
    const std::vector<int64_t> pushes = test::gather_counts(*world, server ? 0 : stats.pushes);
    const std::vector<int64_t> pulls = test::gather_counts(*world, server ? 0 : stats.pulls);
    if (!server) {
      CHECK(stats.pushes == kSteps);
      continue;
    }
    CHECK(stats.max_applied_staleness <= bound);
    REQUIRE(stats.staleness_histogram.size() == static_cast<size_t>(bound + 1));
    int64_t histogram_total = 0;
    for (int64_t count : stats.staleness_histogram) histogram_total += count;
    CHECK(histogram_total == stats.applied);
    // Each server saw exactly what the workers sent, worker by worker.
    int64_t pushes_total = 0, pulls_total = 0;
    for (int r = servers; r < world->size(); ++r) {
      CAPTURE(r);
      CHECK(stats.applied_per_rank[r] + stats.dropped_per_rank[r] == pushes[r]);
      pushes_total += pushes[r];
      pulls_total += pulls[r];
    }
    CHECK(stats.pushes == pushes_total);
    CHECK(stats.applied + stats.dropped == pushes_total);
    CHECK(stats.pulls == pulls_total);
    // The first gradient to arrive was computed on version 0 with nothing applied yet
    // (staleness 0): it is always applied.
    CHECK(stats.applied >= 1);
    // A single worker alternates push and pull: its gradients are never stale.
    if (world->size() - servers == 1) CHECK(stats.dropped == 0);
  }
}

TEST_CASE("asynchronous training of a regression model reaches the target loss") {
  auto world = test::world();
  // y = x w* + b*: a noise-free linear teacher the student Linear(8 -> 2) can fit exactly.
  manual_seed(31);
  const Tensor x = randn({512, 8});
  const Tensor w_true = randn({8, 2});
  const Tensor y = matmul(x, w_true).add(0.5);
  const int workers = world->size() - 1;
  const int64_t kBatch = 16, kStepsPerWorker = 240 / workers;

  manual_seed(32);
  auto model = std::make_shared<nn::MLP>(std::vector<int64_t>{8, 2});
  double initial_loss = 0;
  if (world->rank() == 0) {
    NoGradGuard no_grad;
    initial_loss = nn::functional::mse_loss((*model)(x), y).item<double>();
  }
  PsStats stats = train_async(world, model, sgd_factory({.lr = 0.05}),
                              [&](nn::Module& m, int64_t step) {
                                if (step == kStepsPerWorker) return false;
                                // Worker w reads batches w-1, w-1 + workers, ...: disjoint shards of the
                                // data.
                                const int64_t batch = (step * workers + world->rank() - 1) % (512 / kBatch);
                                nn::functional::mse_loss(m(x.narrow(0, batch * kBatch, kBatch)),
                                                         y.narrow(0, batch * kBatch, kBatch))
                                    .backward();
                                return true;
                              },
                              {.staleness = 4});
  if (world->rank() != 0) return;
  NoGradGuard no_grad;
  const double final_loss = nn::functional::mse_loss((*model)(x), y).item<double>();
  INFO("initial loss ", initial_loss, ", final loss ", final_loss, ", applied ", stats.applied, ", dropped ",
       stats.dropped);
  CHECK(initial_loss > 1.0);
  CHECK(final_loss < 1e-3);
}

TEST_CASE("workers with uneven work shut the server down") {
  auto world = test::world();
  const auto saved_timeout = world->timeout();
  world->set_timeout(std::chrono::seconds(30));  // a hang becomes an error well within CTest's limit
  manual_seed(41);
  auto model = std::make_shared<nn::MLP>(std::vector<int64_t>{4, 3});
  const Tensor x = randn({4, 4});
  // Worker r does 5 (r - 1) steps: worker 1 none at all, the last one the most.
  const int64_t my_steps = 5 * (world->rank() - 1);
  PsStats stats = train_async(world, model, sgd_factory({.lr = 0.01}), [&](nn::Module& m, int64_t step) {
    if (step >= my_steps) return false;
    m(x).pow(2).mean().backward();
    return true;
  });
  world->set_timeout(saved_timeout);
  int64_t expected_pushes = 0;
  for (int r = 1; r < world->size(); ++r) expected_pushes += 5 * (r - 1);
  if (world->rank() == 0) {
    CHECK(stats.pushes == expected_pushes);
    CHECK(stats.pulls == expected_pushes + world->size() - 1);  // plus each worker's last pull
    CHECK(stats.applied + stats.dropped == expected_pushes);
  } else {
    CHECK(stats.pushes == my_steps);
  }
}

TEST_CASE("a server whose workers fall silent times out instead of hanging") {
  auto world = test::world();
  // Tags of their own: the receives the server leaves posted when it gives up must not match
  // messages of the other tests.
  const PsOptions options{.tag_base = 0x5100};
  manual_seed(51);
  auto model = std::make_shared<nn::MLP>(std::vector<int64_t>{4, 3});
  if (world->rank() == 0) {
    const auto saved_timeout = world->timeout();
    world->set_timeout(std::chrono::milliseconds(300));
    ParameterServer server(world, model, sgd_factory({.lr = 0.1}), options);
    CHECK_THROWS_WITH_AS(server.run(), doctest::Contains("no message from workers"), Error);
    world->set_timeout(saved_timeout);
  }
  // The workers stay silent until the server gave up: this barrier waits for rank 0's throw.
  world->barrier();
  if (world->rank() != 0) {
    // "done" now lands in the receive the server left posted, so nothing is left in flight.
    Worker worker(world, model, options);
    worker.finish();
  }
}

TEST_CASE("misuse throws") {
  auto world = test::world();
  auto model = std::make_shared<nn::MLP>(std::vector<int64_t>{4, 3});
  // Constructor checks: they throw before any message is sent, so each rank checks its own.
  if (world->rank() == 0) {
    CHECK_THROWS_AS(Worker(world, model), Error);
    CHECK_THROWS_AS(ParameterServer(world, model, sgd_factory({.lr = 0.1}), {.staleness = -1}), Error);
    CHECK_THROWS_AS(ParameterServer(world, model, sgd_factory({.lr = 0.1}), {.num_servers = world->size()}),
                    Error);  // no rank left to work
    CHECK_THROWS_AS(ParameterServer(world, std::make_shared<nn::Sequential>(), sgd_factory({.lr = 0.1})),
                    Error);
  } else {
    CHECK_THROWS_AS(ParameterServer(world, model, sgd_factory({.lr = 0.1})), Error);
  }
  // A push before any pull has no parameter version to be computed on: it throws without
  // sending, and the worker still shuts the server down cleanly.
  if (world->rank() == 0) {
    PsStats stats = ParameterServer(world, model, sgd_factory({.lr = 0.1})).run();
    CHECK(stats.pushes == 0);
    CHECK(stats.pulls == 0);
  } else {
    Worker worker(world, model);
    CHECK_THROWS_AS(worker.push(), Error);
    worker.finish();
    CHECK_THROWS_AS(worker.pull(), Error);  // after finish()
  }
}
