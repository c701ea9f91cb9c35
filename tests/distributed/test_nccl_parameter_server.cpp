/*
 * The parameter server on CUDA tensors: requests and versions over the MPI group, parameters and
 * gradients over NCCL (distributed/parameter_server.h, "On GPUs"), with the equalities the CPU
 * suite (test_parameter_server.cpp) checks over MPI alone:
 *   - staleness 0 with one worker is synchronous SGD, against a CPU loop on the same batches,
 *     with one server and with the parameters sharded over two;
 *   - workers at different paces: every applied gradient within the bound, and each server's
 *     counts equal to what the workers sent, worker by worker; the workers end with the servers'
 *     parameters.
 * In CI this runs on emulated GPUs (NCCL's stand-in over MPI). With one real GPU the NCCL group
 * has one rank, and a parameter server needs two: the test says it skipped.
 */
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "distributed/parameter_server.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "tests/distributed/mpi_test_util.h"

using namespace loom;
using namespace loom::distributed;

namespace {

// The groups of ranks 0 .. count-1 (collective over both: every rank calls), nullptr on the others.
struct Subgroups {
  std::shared_ptr<ProcessGroup> control, data;
};
Subgroups first_ranks(const std::shared_ptr<ProcessGroup>& control, const std::shared_ptr<ProcessGroup>& data,
                      int count) {
  std::vector<int> members;
  for (int r = 0; r < count; ++r) members.push_back(r);
  return {control->new_group(members), data->new_group(members)};
}

// The GPUs of the NCCL group, and its MPI twin; nullptrs (after a skip message) where the
// parameter server cannot run.
Subgroups groups_or_skip() {
  auto nccl = test::nccl_world_or_skip();
  if (!nccl) return {};
  if (nccl->size() < 2) {
    test::print_skipped("the parameter server needs a GPU for each of two ranks");
    return {};
  }
  return {test::nccl_bootstrap_group(), nccl};
}

std::shared_ptr<nn::MLP> mlp(uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<nn::MLP>(std::vector<int64_t>{6, 12, 3});
}

OptimizerFactory sgd_factory(nn::SGDOptions options) {
  return
      [options](std::vector<Tensor> params) { return std::make_unique<nn::SGD>(std::move(params), options); };
}

}  // namespace

TEST_CASE("nccl parameter server: staleness 0 with one worker on CUDA equals CPU SGD, one server or two") {
  const Subgroups world = groups_or_skip();
  if (!world.control) return;
  constexpr int64_t kSteps = 6;
  manual_seed(11);
  const Tensor x = randn({kSteps, 16, 6});
  const Tensor y = randint(0, 3, {kSteps, 16});
  const nn::SGDOptions options{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3};
  for (int servers : {1, 2}) {
    CAPTURE(servers);
    // Ranks 0 .. servers-1 serve, rank `servers` is the one worker; the others take no part.
    if (servers + 1 > world.control->size()) break;
    const Subgroups group = first_ranks(world.control, world.data, servers + 1);
    if (!group.control) continue;
    REQUIRE(group.data != nullptr);
    const Device gpu = group.data->device();
    auto model = mlp(5);  // the same initial weights on every rank: the servers' are version 0
    model->to(gpu);
    PsStats stats =
        train_async(PsGroups(group.control, group.data), model, sgd_factory(options),
                    [&](nn::Module& m, int64_t step) {
                      if (step == kSteps) return false;
                      nn::functional::cross_entropy(m(x[step].to(gpu)), y[step].to(gpu)).backward();
                      return true;
                    },
                    {.staleness = 0, .num_servers = servers});
    if (group.control->rank() < servers) {
      CHECK(stats.applied == kSteps);
      CHECK(stats.dropped == 0);
      CHECK(stats.pulls == kSteps + 1);
      CHECK(stats.staleness_histogram == std::vector<int64_t>{kSteps});
      continue;
    }
    CHECK(stats.pushes == kSteps);
    auto reference = mlp(5);
    nn::SGD optimizer(reference->parameters(), options);
    for (int64_t step = 0; step < kSteps; ++step) {
      optimizer.zero_grad();
      nn::functional::cross_entropy((*reference)(x[step]), y[step]).backward();
      optimizer.step();
    }
    for (const Tensor& p : model->parameters()) CHECK(p.device() == gpu);
    // The CUDA kernels and the CPU's sum in different orders: equal to float rounding.
    CHECK(test::max_rel_diff(model->parameters(), reference->parameters(), 1e-5) <= 1e-4);
  }
}

TEST_CASE("nccl parameter server: workers at different paces on CUDA stay within the bound, counts agree") {
  const Subgroups world = groups_or_skip();
  if (!world.control) return;
  ProcessGroup& control = *world.control;
  constexpr int64_t kSteps = 8;
  manual_seed(21);
  const Tensor x = randn({kSteps, 8, 6});
  const Tensor y = randint(0, 3, {kSteps, 8});
  std::vector<std::pair<int, int64_t>> cases = {{1, 0}, {1, 2}};  // (servers, bound)
  if (control.size() >= 4) cases.push_back({2, 1});
  for (auto [servers, bound] : cases) {
    CAPTURE(servers);
    CAPTURE(bound);
    const Device gpu = world.data->device();
    auto model = mlp(6);
    model->to(gpu);
    PsStats stats = train_async(
        PsGroups(world.control, world.data), model, sgd_factory({.lr = 0.05}),
        [&](nn::Module& m, int64_t step) {
          if (step == kSteps) return false;
          // Workers at different paces, so that the server interleaves them and gradients go stale.
          std::this_thread::sleep_for(std::chrono::microseconds(400 * control.rank() * (step % 3)));
          nn::functional::cross_entropy(m(x[step].to(gpu)), y[step].to(gpu)).backward();
          return true;
        },
        {.staleness = bound, .num_servers = servers});

    const bool server = control.rank() < servers;
    const std::vector<int64_t> pushes = test::gather_counts(control, server ? 0 : stats.pushes);
    const std::vector<int64_t> pulls = test::gather_counts(control, server ? 0 : stats.pulls);
    if (!server) {
      CHECK(stats.pushes == kSteps);
      for (const Tensor& p : model->parameters()) CHECK(p.device() == gpu);
      continue;
    }
    CHECK(stats.max_applied_staleness <= bound);
    int64_t histogram_total = 0;
    for (int64_t count : stats.staleness_histogram) histogram_total += count;
    CHECK(histogram_total == stats.applied);
    int64_t pushes_total = 0, pulls_total = 0;
    for (int r = servers; r < control.size(); ++r) {
      CAPTURE(r);
      CHECK(stats.applied_per_rank[r] + stats.dropped_per_rank[r] == pushes[r]);
      pushes_total += pushes[r];
      pulls_total += pulls[r];
    }
    CHECK(stats.applied + stats.dropped == pushes_total);
    CHECK(stats.pulls == pulls_total);
    CHECK(stats.applied >= 1);
  }
}

TEST_CASE("nccl parameter server: groups that do not fit are refused, naming them") {
  const Subgroups world = groups_or_skip();
  if (!world.control) return;
  auto error_of = [](auto&& make) -> std::string {
    try {
      make();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const Device gpu = world.data->device();
  auto on_gpu = mlp(1);
  on_gpu->to(gpu);
  auto on_cpu = mlp(1);
  const PsOptions options{.num_servers = 1};
  const bool server = world.control->rank() == 0;
  auto make = [&](PsGroups groups, std::shared_ptr<nn::Module> model) {
    if (server)
      ParameterServer(std::move(groups), std::move(model), sgd_factory({.lr = 0.1}), options);
    else
      Worker(std::move(groups), std::move(model), options);
  };
  // CPU parameters cannot travel on NCCL; NCCL cannot be polled for requests.
  CHECK(error_of([&] { make(PsGroups(world.control, world.data), on_cpu); }).find("the data group") !=
        std::string::npos);
  CHECK(error_of([&] {
          make(PsGroups(world.data, world.data), on_gpu);
        }).find("control group must be a CPU group") != std::string::npos);
  CHECK(error_of([&] { make(PsGroups(world.control, nullptr), on_gpu); }).find("null process group") !=
        std::string::npos);
}
