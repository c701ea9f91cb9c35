/*
 * Tests of ZeRO stages 1 and 2 (distributed/zero.h), run under mpirun with 2 and 4 ranks.
 *
 *   - ZeRO-1 and ZeRO-2 follow the same trajectory as DDP and as one process on the whole
 *     batch, for 5 AdamW and 5 SGD-momentum steps, on a model whose parameter count (55) is
 *     divisible by neither 2 nor 4 (the last shard is padded);
 *   - the memory report: optimizer state 8Ψ/N per rank (Adam's two moments, stage 1 and 2),
 *     gradients 4Ψ with stage 1 and 4Ψ/N with stage 2 (rounded up to the shard size).
 */
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "distributed/ddp.h"
#include "distributed/zero.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "tests/distributed/mpi_test_util.h"

using namespace loom;
using namespace loom::distributed;

namespace {

// 7 -> 5 -> 2 -> 1: (35 + 5) + (10 + 2) + (2 + 1) = 55 parameters.
struct Small : nn::Module {
  nn::Linear fc1{7, 5};
  nn::Linear fc2{5, 2};
  nn::Linear fc3{2, 1};
  Small() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("fc3", fc3);
  }
  Tensor forward(const Tensor& x) override { return fc3(fc2(fc1(x).tanh()).tanh()); }
};

std::shared_ptr<Small> make_small(uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<Small>();
}

using OptFactory = std::function<std::unique_ptr<nn::Optimizer>(std::vector<Tensor>)>;

OptFactory adamw() {
  return [](std::vector<Tensor> p) {
    return std::make_unique<nn::AdamW>(std::move(p), nn::AdamWOptions{.lr = 1e-2, .weight_decay = 0.1});
  };
}
OptFactory sgd_momentum() {
  return [](std::vector<Tensor> p) {
    return std::make_unique<nn::SGD>(std::move(p),
                                     nn::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3});
  };
}

OptFactory sgd_momentum_lr(double lr) {
  return [lr](std::vector<Tensor> p) {
    return std::make_unique<nn::SGD>(std::move(p), nn::SGDOptions{.lr = lr, .momentum = 0.9});
  };
}

// Trains a reference on the whole batch, a DDP replica, a ZeRO-1 and a ZeRO-2 replica for 5
// steps and compares the parameters.
void compare_trajectories(const OptFactory& make_opt) {
  auto world = test::world();
  const int n = world->size();
  const int64_t b = 4;
  auto ref = make_small(5), ddp_model = make_small(5), z1_model = make_small(5), z2_model = make_small(5);
  auto ddp = std::make_shared<DistributedDataParallel>(ddp_model, world);
  auto ref_opt = make_opt(ref->parameters());
  auto ddp_opt = make_opt(ddp->parameters());
  ZeroOptimizer z1(z1_model->parameters(), world, 1, make_opt);
  ZeroOptimizer z2(z2_model->parameters(), world, 2, make_opt);
  CHECK(z1.numel() == 55);
  CHECK(z1.shard_size() == (55 + n - 1) / n);

  for (int step = 0; step < 5; ++step) {
    manual_seed(300 + static_cast<uint64_t>(step));
    Tensor x = randn({n * b, 7}), y = randn({n * b, 1});
    Tensor xl = x.narrow(0, world->rank() * b, b).contiguous(),
           yl = y.narrow(0, world->rank() * b, b).contiguous();

    nn::functional::mse_loss((*ref)(x), y).backward();
    ref_opt->step();
    ref_opt->zero_grad();

    nn::functional::mse_loss((*ddp)(xl), yl).backward();
    ddp_opt->step();
    ddp_opt->zero_grad();

    nn::functional::mse_loss((*z1_model)(xl), yl).backward();
    z1.step();
    z1.zero_grad();

    nn::functional::mse_loss((*z2_model)(xl), yl).backward();
    z2.step();
    z2.zero_grad();
  }
  // Reassociation only: DDP and ZeRO average the same per-rank gradients by the same
  // collective family; the single process sums in one matmul.
  CHECK(test::max_rel_diff(*z1_model, *ref, 1e-5) <= 1e-5);
  CHECK(test::max_rel_diff(*z2_model, *ref, 1e-5) <= 1e-5);
  CHECK(test::max_rel_diff(*z1_model, *ddp_model, 1e-6) <= 1e-5);
  CHECK(test::max_rel_diff(*z2_model, *z1_model, 1e-6) <= 1e-5);
}

}  // namespace

TEST_CASE("zero: stages 1 and 2 equal DDP and one process (AdamW, 55 parameters)") {
  compare_trajectories(adamw());
}

TEST_CASE("zero: stages 1 and 2 equal DDP and one process (SGD momentum, 55 parameters)") {
  compare_trajectories(sgd_momentum());
}

TEST_CASE("zero: shards cover the flat parameter space once, the last one padded") {
  auto world = test::world();
  auto model = make_small(1);
  ZeroOptimizer zero(model->parameters(), world, 1, adamw());
  // Every rank's [begin, end) in one all-reduce: slot r holds rank r's bounds on every rank.
  Tensor bounds = zeros({2 * world->size()}, kInt64);
  bounds.data_ptr<int64_t>()[2 * world->rank()] = zero.shard_begin();
  bounds.data_ptr<int64_t>()[2 * world->rank() + 1] = zero.shard_end();
  world->all_reduce(bounds);  // every rank needs every rank's bounds
  std::vector<int64_t> v = bounds.to_vector<int64_t>();
  CHECK(v[0] == 0);
  for (int r = 1; r < world->size(); ++r) CHECK(v[2 * r] == v[2 * r - 1]);
  CHECK(v.back() == 55);
  int64_t views = 0;
  for (const Tensor& p : zero.shard_params()) views += p.numel();
  CHECK(views == zero.shard_end() - zero.shard_begin());
}

TEST_CASE("zero: memory report — state shrinks by N (stage 1), gradients too (stage 2)") {
  auto world = test::world();
  const int64_t n = world->size();
  struct Wide : nn::Module {
    nn::Linear fc1{33, 65};
    nn::Linear fc2{65, 17};
    Wide() {
      register_module("fc1", fc1);
      register_module("fc2", fc2);
    }
    Tensor forward(const Tensor& x) override { return fc2(fc1(x).relu()); }
  };
  manual_seed(9);
  auto full = std::make_shared<Wide>();
  manual_seed(9);
  auto m1 = std::make_shared<Wide>();
  manual_seed(9);
  auto m2 = std::make_shared<Wide>();
  const int64_t psi = full->num_parameters();  // Ψ = 33*65 + 65 + 65*17 + 17 = 3352
  const int64_t shard = (psi + n - 1) / n;

  nn::AdamW full_opt(full->parameters());
  ZeroOptimizer z1(m1->parameters(), world, 1, adamw());
  ZeroOptimizer z2(m2->parameters(), world, 2, adamw());
  manual_seed(10);
  Tensor x = randn({4, 33}), y = randn({4, 17});
  for (nn::Module* m : {static_cast<nn::Module*>(full.get()), static_cast<nn::Module*>(m1.get()),
                        static_cast<nn::Module*>(m2.get())})
    nn::functional::mse_loss(m->forward(x), y).backward();
  full_opt.step();
  z1.step();
  z2.step();

  // Plain AdamW: 8Ψ bytes of moments plus a step counter per parameter tensor.
  const int64_t full_state = optimizer_state_bytes(full_opt);
  const int64_t counters = static_cast<int64_t>(full->parameters().size());
  REQUIRE(full_state > 8 * psi);
  const int64_t counter_bytes = (full_state - 8 * psi) / counters;
  CHECK(full_state == 8 * psi + counter_bytes * counters);

  for (ZeroOptimizer* z : {&z1, &z2}) {
    ZeroMemoryReport report = z->memory_report();
    const int64_t mine = z->shard_end() - z->shard_begin();
    const auto pieces = static_cast<int64_t>(z->shard_params().size());
    // Moments only for this rank's shard: 8Ψ/N (within the padding of the last shard).
    CHECK(report.optimizer_state_bytes == 8 * mine + counter_bytes * pieces);
    CHECK(8 * mine <= 8 * shard);
    // Summed over the ranks, the moments are exactly the unsharded optimizer's.
    Tensor total = tensor(std::vector<int64_t>{8 * mine});
    world->all_reduce(total);  // every rank checks the world-wide sum
    CHECK(total.item<int64_t>() == 8 * psi);
    CHECK(report.parameter_bytes == 4 * n * shard);  // stages 1 and 2 keep full parameters
  }
  // Gradients: stage 1 keeps the whole averaged gradient, stage 2 only its shard.
  CHECK(z1.memory_report().gradient_bytes == 4 * n * shard);
  CHECK(z2.memory_report().gradient_bytes == 4 * shard);
  for (const Tensor& p : m2->parameters()) CHECK(!p.grad().defined());  // freed by reduce_scatter
}

TEST_CASE("zero: fewer parameters than ranks: empty shards still join every collective") {
  auto world = test::world();
  // Linear(2, 1): 3 parameters. With 4 ranks the shard size is 1 and rank 3 owns nothing.
  manual_seed(4);
  nn::Linear ref(2, 1);
  manual_seed(4);
  nn::Linear model(2, 1);
  nn::SGD ref_opt(ref.parameters(), {.lr = 0.1, .momentum = 0.9});
  ZeroOptimizer zero(model.parameters(), world, 2, sgd_momentum_lr(0.1));
  const int n = world->size();
  for (int step = 0; step < 3; ++step) {
    manual_seed(50 + static_cast<uint64_t>(step));
    Tensor x = randn({2 * n, 2}), y = randn({2 * n, 1});
    nn::functional::mse_loss(ref(x), y).backward();
    ref_opt.step();
    ref_opt.zero_grad();
    Tensor xl = x.narrow(0, 2 * world->rank(), 2).contiguous(),
           yl = y.narrow(0, 2 * world->rank(), 2).contiguous();
    nn::functional::mse_loss(model(xl), yl).backward();
    zero.step();
    zero.zero_grad();
  }
  CHECK(test::max_rel_diff(model, ref, 1e-6) <= 1e-5);
  if (zero.shard_begin() == zero.shard_end()) {
    CHECK(zero.memory_report().optimizer_state_bytes == 0);
    CHECK_THROWS_AS(zero.inner(), loom::Error);
  }
}

TEST_CASE("zero: bad arguments throw") {
  auto world = test::world();
  auto model = make_small(1);
  CHECK_THROWS_AS(ZeroOptimizer(model->parameters(), world, 3, adamw()), loom::Error);
  CHECK_THROWS_AS(ZeroOptimizer({}, world, 1, adamw()), loom::Error);
}
