/*
 * Tests of DistributedDataParallel (distributed/ddp.h), run under mpirun with 2 and 4 ranks.
 *
 * The reference is one process: every rank also trains an identical model (same seed) on the
 * whole global batch of N*b samples, with no communication at all. N ranks with b samples each
 * and averaged gradients must follow the same trajectory, up to the reassociation of sums
 * (the all-reduce adds the ranks' partial gradients in another order than one big matmul).
 *
 *   - construction broadcasts rank 0's parameters (replicas built from different seeds agree),
 *     and forward rank 0's buffers;
 *   - 5 SGD-momentum and 5 AdamW steps with several buckets equal the single-process run (also
 *     with the ring all-reduce of distributed/ring.h);
 *   - no_sync(): micro-batches accumulate locally (no communication), and the synced total
 *     equals the gradient of the larger batch;
 *   - a parameter without a gradient is an error naming it (find_unused_parameters = false),
 *     and counts as zero with find_unused_parameters = true, also when only some ranks use it;
 *   - the first bucket's all-reduce is launched before the last gradient of backward exists.
 */
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "distributed/ddp.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "tests/distributed/mpi_test_util.h"

using namespace loom;
using namespace loom::distributed;

namespace {

// An MLP with an optional branch: `extra` is used only while use_extra is set (to make a
// parameter unused in some iterations or on some ranks) and `never` is never used.
struct Net : nn::Module {
  nn::Linear fc1{6, 16};
  nn::Linear fc2{16, 16};
  nn::Linear fc3{16, 3};
  nn::Linear extra{16, 16};
  bool use_extra = true;
  explicit Net(bool with_never = false) {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("extra", extra);
    register_module("fc3", fc3);
    if (with_never) never = register_module("never", std::make_shared<nn::Linear>(16, 16));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = fc2(fc1(x).tanh()).tanh();
    if (use_extra) h = h + extra(h).tanh();
    return fc3(h);
  }
  std::shared_ptr<nn::Linear> never;
};

std::shared_ptr<Net> make_net(uint64_t seed, bool with_never = false) {
  manual_seed(seed);
  return std::make_shared<Net>(with_never);
}

// The global batch, the same on every rank: x [n, 6], y [n, 3].
struct Batch {
  Tensor x, y;
};
Batch global_batch(int64_t n, uint64_t seed) {
  manual_seed(seed);
  return {randn({n, 6}), randn({n, 3})};
}
Batch local_part(const Batch& global, int rank, int64_t b) {
  return {global.x.narrow(0, rank * b, b).contiguous(), global.y.narrow(0, rank * b, b).contiguous()};
}

// max |a - e| / (atol + rtol |e|) over all elements: <= 1 means close.
double closeness(const Tensor& actual, const Tensor& expected, double rtol, double atol) {
  std::vector<float> a = actual.to_vector<float>(), e = expected.to_vector<float>();
  REQUIRE(a.size() == e.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(double(a[i]) - double(e[i])) / (atol + rtol * std::abs(double(e[i]))));
  return worst;
}

void check_params_close(nn::Module& actual, nn::Module& expected, double rtol, double atol) {
  auto a = actual.named_parameters(), e = expected.named_parameters();
  REQUIRE(a.size() == e.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("parameter ", e[i].first);
    CHECK(closeness(a[i].second, e[i].second, rtol, atol) <= 1.0);
  }
}

// Bucket cap (MiB) small enough to cut Net into several buckets: fc2.weight is 1 KiB.
constexpr double kSmallCapMb = 1100.0 / (1024.0 * 1024.0);

template <class MakeOpt>
void train_and_compare(MakeOpt make_opt, double rtol, double atol) {
  auto world = test::world();
  const int n = world->size();
  const int64_t b = 4;
  auto ref = make_net(7);
  auto model = make_net(7);
  auto ddp =
      std::make_shared<DistributedDataParallel>(model, world, DdpOptions{.bucket_cap_mb = kSmallCapMb});
  REQUIRE(ddp->num_buckets() >= 3);
  auto ref_opt = make_opt(ref->parameters());
  auto opt = make_opt(ddp->parameters());
  for (int step = 0; step < 5; ++step) {
    Batch global = global_batch(n * b, 100 + step);
    Batch local = local_part(global, world->rank(), b);
    nn::functional::mse_loss((*ref)(global.x), global.y).backward();
    ref_opt->step();
    ref_opt->zero_grad();
    nn::functional::mse_loss((*ddp)(local.x), local.y).backward();
    // The sync finished inside backward: every rank holds the averaged gradient now.
    CHECK(ddp->last_events().back().kind == DdpEvent::Kind::SyncFinished);
    opt->step();
    opt->zero_grad();
  }
  check_params_close(*model, *ref, rtol, atol);
}

}  // namespace

TEST_CASE("ddp: construction broadcasts rank 0's parameters; state dict keys are module.*") {
  auto world = test::world();
  auto model = make_net(1000 + world->rank());  // a different init on every rank
  auto rank0 = make_net(1000);                  // what rank 0 drew
  DistributedDataParallel ddp(model, world);
  check_params_close(*model, *rank0, 0, 0);
  auto state = ddp.state_dict();
  CHECK(state.contains("module.fc1.weight"));
  CHECK(state.contains("module.fc3.bias"));
}

TEST_CASE("ddp: broadcast_buffers gives every rank rank 0's buffers at each forward") {
  auto world = test::world();
  // Net plus a buffer the forward reads (as BatchNorm's running statistics would be).
  struct Scaled : nn::Module {
    nn::Linear fc{6, 3};
    Tensor scale;
    Scaled() {
      register_module("fc", fc);
      scale = register_buffer("scale", full({1}, 1.0));
    }
    Tensor forward(const Tensor& x) override { return fc(x) * scale; }
  };
  manual_seed(3);
  auto model = std::make_shared<Scaled>();
  model->scale.fill_(10.0 + world->rank());
  DistributedDataParallel ddp(model, world);
  CHECK(model->scale.item<float>() == 10.0f);  // construction broadcast
  model->scale.fill_(20.0 + world->rank());    // ranks drift apart (e.g. local statistics)
  Tensor out = ddp(ones({1, 6}));
  CHECK(model->scale.item<float>() == 20.0f);  // forward used rank 0's value everywhere
  Tensor expected = model->fc(ones({1, 6})) * 20.0;
  CHECK(closeness(out, expected, 1e-6, 1e-6) <= 1.0);
}

TEST_CASE("ddp: buckets hold parameters in reverse registration order, within the cap") {
  auto world = test::world();
  auto model = make_net(1);
  DistributedDataParallel ddp(model, world, DdpOptions{.bucket_cap_mb = kSmallCapMb});
  std::vector<int64_t> order;
  for (const auto& bucket : ddp.bucket_assignment()) {
    int64_t bytes = 0;
    for (int64_t i : bucket) {
      order.push_back(i);
      bytes += static_cast<int64_t>(model->parameters()[static_cast<size_t>(i)].nbytes());
    }
    // A bucket over the cap holds a single parameter larger than the cap.
    CHECK((bytes <= 1100 || bucket.size() == 1));
  }
  const int64_t count = static_cast<int64_t>(model->parameters().size());
  REQUIRE(static_cast<int64_t>(order.size()) == count);
  for (int64_t k = 0; k < count; ++k) CHECK(order[static_cast<size_t>(k)] == count - 1 - k);
}

TEST_CASE("ddp: N ranks x batch b equal one process with batch N*b (SGD momentum, 5 steps)") {
  train_and_compare(
      [](std::vector<Tensor> p) {
        return std::make_unique<nn::SGD>(std::move(p), nn::SGDOptions{.lr = 0.1, .momentum = 0.9});
      },
      1e-5, 1e-6);
}

TEST_CASE("ddp: N ranks x batch b equal one process with batch N*b (AdamW, 5 steps)") {
  // Adam divides by sqrt(v): a gradient component near zero amplifies a reassociation
  // difference, hence the absolute part of the tolerance.
  train_and_compare(
      [](std::vector<Tensor> p) {
        return std::make_unique<nn::AdamW>(std::move(p), nn::AdamWOptions{.lr = 1e-2, .weight_decay = 0.1});
      },
      1e-5, 1e-5);
}

TEST_CASE("ddp: the same over the textbook ring all-reduce (Algorithm::Ring)") {
  auto world = test::world();
  // Restores the native algorithm even when a REQUIRE leaves the test case early: the world
  // group is shared by all test cases.
  struct RingGuard {
    ProcessGroup& group;
    explicit RingGuard(ProcessGroup& g) : group(g) { group.set_algorithm(Algorithm::Ring); }
    ~RingGuard() { group.set_algorithm(Algorithm::Native); }
  } guard(*world);
  train_and_compare(
      [](std::vector<Tensor> p) {
        return std::make_unique<nn::SGD>(std::move(p), nn::SGDOptions{.lr = 0.1, .momentum = 0.9});
      },
      1e-5, 1e-6);
}

TEST_CASE("ddp: the first bucket's all-reduce starts while backward still runs") {
  auto world = test::world();
  auto model = make_net(3);
  DistributedDataParallel ddp(model, world, DdpOptions{.bucket_cap_mb = kSmallCapMb});
  Batch local = local_part(global_batch(4 * world->size(), 5), world->rank(), 4);
  nn::functional::mse_loss(ddp(local.x), local.y).backward();
  const auto& events = ddp.last_events();
  auto first_launch = std::find_if(events.begin(), events.end(), [](const DdpEvent& e) {
    return e.kind == DdpEvent::Kind::BucketLaunched;
  });
  auto last_grad = std::find_if(events.rbegin(), events.rend(),
                                [](const DdpEvent& e) { return e.kind == DdpEvent::Kind::GradReady; });
  REQUIRE(first_launch != events.end());
  REQUIRE(last_grad != events.rend());
  // Bucket 0 was on the wire before backward produced its last parameter gradient (fc1's,
  // registered first, so computed last).
  CHECK(first_launch - events.begin() < events.rend() - last_grad - 1);
  CHECK(first_launch->index == 0);
  CHECK(last_grad->index <= 1);  // fc1.weight or fc1.bias: parameters 0 and 1
}

TEST_CASE("ddp: no_sync accumulates locally; the synced sum equals the larger batch") {
  auto world = test::world();
  const int n = world->size();
  const int64_t b = 3, micro = 3;
  auto ref = make_net(11);
  auto model = make_net(11);
  auto local_only = make_net(11);  // this rank's micro-batches, no communication
  DistributedDataParallel ddp(model, world, DdpOptions{.bucket_cap_mb = kSmallCapMb});

  std::vector<Batch> globals;
  for (int64_t m = 0; m < micro; ++m) globals.push_back(global_batch(n * b, 200 + static_cast<uint64_t>(m)));
  {
    auto guard = ddp.no_sync();
    for (int64_t m = 0; m + 1 < micro; ++m) {
      Batch local = local_part(globals[static_cast<size_t>(m)], world->rank(), b);
      nn::functional::mse_loss(ddp(local.x), local.y).backward();
      nn::functional::mse_loss((*local_only)(local.x), local.y).backward();
    }
  }
  // Inside no_sync nothing was communicated: the gradients are this rank's own.
  for (size_t i = 0; i < model->parameters().size(); ++i)
    CHECK(closeness(model->parameters()[i].grad(), local_only->parameters()[i].grad(), 1e-6, 1e-7) <= 1.0);

  Batch last = local_part(globals.back(), world->rank(), b);
  nn::functional::mse_loss(ddp(last.x), last.y).backward();
  int64_t launches = 0;
  for (const DdpEvent& e : ddp.last_events()) launches += e.kind == DdpEvent::Kind::BucketLaunched;
  CHECK(launches == ddp.num_buckets());  // one sync for the whole accumulation

  for (const Batch& g : globals) nn::functional::mse_loss((*ref)(g.x), g.y).backward();
  for (size_t i = 0; i < ref->parameters().size(); ++i)
    CHECK(closeness(model->parameters()[i].grad(), ref->parameters()[i].grad(), 1e-5, 1e-6) <= 1.0);
}

TEST_CASE("ddp: a parameter without a gradient is an error naming it, not a hang") {
  auto world = test::world();
  auto model = make_net(21, /*with_never=*/true);
  model->use_extra = false;
  DistributedDataParallel ddp(model, world, DdpOptions{.bucket_cap_mb = kSmallCapMb});
  Batch local = local_part(global_batch(2 * world->size(), 9), world->rank(), 2);
  nn::functional::mse_loss(ddp(local.x), local.y).backward();
  // extra.* and never.* got no gradient: the sync cannot finish and says why.
  std::string message;
  try {
    ddp.finish_gradient_sync();
  } catch (const loom::Error& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(message.find("'never.weight'") != std::string::npos);
  CHECK(message.find("'extra.bias'") != std::string::npos);
  CHECK(message.find("'fc1.weight'") == std::string::npos);
  CHECK(message.find("did not receive a gradient") != std::string::npos);
  CHECK(message.find("find_unused_parameters") != std::string::npos);
  // The DDP is usable afterwards (and all ranks are still in step): with the branch used, the
  // only missing parameters are never.*, reported by the next forward.
  model->use_extra = true;
  nn::functional::mse_loss(ddp(local.x), local.y).backward();
  CHECK_THROWS_WITH_AS(ddp(local.x), doctest::Contains("'never.bias'"), loom::Error);
  world->barrier();  // every rank reached this point: nothing hung
}

TEST_CASE("ddp: find_unused_parameters counts missing gradients as zero on every rank") {
  auto world = test::world();
  const int n = world->size();
  const int64_t b = 3;
  auto ref = make_net(31, /*with_never=*/true);
  auto model = make_net(31, /*with_never=*/true);
  DistributedDataParallel ddp(model, world,
                              DdpOptions{.bucket_cap_mb = kSmallCapMb, .find_unused_parameters = true});
  Batch global = global_batch(n * b, 41);

  // Iteration 1: the branch is used on rank 0 only. The equivalent single process:
  // loss = (1/N) sum_r loss_r, with rank r's forward taking the branch when r == 0.
  model->use_extra = world->rank() == 0;
  Batch local = local_part(global, world->rank(), b);
  nn::functional::mse_loss(ddp(local.x), local.y).backward();
  Tensor ref_loss;
  for (int r = 0; r < n; ++r) {
    ref->use_extra = r == 0;
    Batch part = local_part(global, r, b);
    Tensor l = nn::functional::mse_loss((*ref)(part.x), part.y).div(static_cast<double>(n));
    ref_loss = ref_loss.defined() ? ref_loss + l : l;
  }
  ref_loss.backward();
  auto got = model->named_parameters(), want = ref->named_parameters();
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("parameter ", got[i].first);
    // `never` is unused on every rank: its gradient stays undefined, as without DDP.
    REQUIRE(got[i].second.grad().defined() == want[i].second.grad().defined());
    if (want[i].second.grad().defined())
      CHECK(closeness(got[i].second.grad(), want[i].second.grad(), 1e-5, 1e-6) <= 1.0);
  }
  CHECK(!model->never->weight.grad().defined());
  CHECK(model->extra.weight.grad().defined());  // used by rank 0 only, averaged everywhere

  // Iteration 2: nobody uses the branch; training goes on without an error.
  model->zero_grad();
  model->use_extra = false;
  nn::functional::mse_loss(ddp(local.x), local.y).backward();
  CHECK(ddp.last_events().back().kind == DdpEvent::Kind::SyncFinished);
  CHECK(!model->extra.weight.grad().defined());
  CHECK(model->fc1.weight.grad().defined());
}
