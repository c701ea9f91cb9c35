/*
 * Synchronous data parallel (DistributedDataParallel) against the asynchronous parameter server
 * (distributed/parameter_server.h), on Fashion-MNIST with the model zoo's MLP: test accuracy
 * after every epoch and training throughput for both, to show the classic trade-off (see
 * docs/distributed_async.md for the measured table).
 *
 *   build/tools/make_dataset fashion-mnist --out data/
 *   mpirun -np 4 build/examples/ps_vs_ddp data/fashion-mnist-train.h5 data/fashion-mnist-test.h5 3 4
 *
 * Arguments: TRAIN.h5 TEST.h5 [epochs = 3] [staleness bound = 4] [both|sync|ps] [batch per rank = 64]
 * [slow rank delay ms = 0] [momentum = 0.9] [servers K = 1]. The delay makes the last rank sleep
 * that long per step, to see how each strategy copes with a straggler.
 *
 *   sync: all N ranks train; each step's gradients are averaged by DDP's bucketed all-reduce, so
 *         every step waits for the slowest rank. Rank r reads shard r of N (DistributedSampler).
 *   ps:   rank 0 (ranks 0..K-1, each a shard) serves the parameters and applies SGD to each
 *         gradient as it arrives; the other ranks train on shards of the data, never waiting
 *         for each other.
 * Both use SGD (lr 0.05, momentum 0.9 unless given, weight decay 5e-4) with the same batch per
 * rank. The accuracy of an epoch is measured on a snapshot of the parameters taken at its end (for
 * ps: the parameters the first worker pulls when it finishes its epoch), after training, so that
 * evaluation takes no time from training.
 */
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/grad_mode.h"
#include "data/data.h"
#include "distributed/ddp.h"
#include "distributed/parameter_server.h"
#include "distributed/process_group.h"
#include "nn/nn.h"
#include "ops/ops.h"

using namespace loom;
using namespace loom::distributed;

namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  std::string train_path, test_path;
  int epochs = 3;
  int64_t staleness = 4;
  int64_t batch = 64;
  int slow_ms = 0;
  double momentum = 0.9;
  int servers = 1;
};

struct Result {
  std::vector<double> accuracy;       // per epoch, on rank 0 (sync) / rank 1 (ps)
  std::vector<double> epoch_seconds;  // wall time of each epoch (ps: rank 1's)
  double seconds = 0;                 // all epochs, from the common start to the last rank done
  int64_t samples = 0;                // trained on, all ranks together
  PsStats ps;                         // ps only, on rank 0
};

nn::SGDOptions sgd_options(const Config& c) {
  return {.lr = 0.05, .momentum = c.momentum, .weight_decay = 5e-4};
}

std::shared_ptr<nn::Module> make_model() {
  manual_seed(0);  // the same initial weights in both runs
  return std::make_shared<nn::MLP>(std::vector<int64_t>{784, 512, 512, 10});
}

std::vector<Tensor> snapshot(const nn::Module& model) {
  std::vector<Tensor> copy;
  for (const Tensor& p : model.parameters()) copy.push_back(p.detach().clone());
  return copy;
}

double accuracy(const std::vector<Tensor>& weights, data::DataLoader& test) {
  auto model = make_model();
  {
    NoGradGuard no_grad;
    std::vector<Tensor> params = model->parameters();
    for (size_t i = 0; i < params.size(); ++i) params[i].detach().copy_(weights[i]);
  }
  model->eval();
  NoGradGuard no_grad;
  int64_t correct = 0, total = 0;
  for (data::Batch& batch : test) {
    correct += (*model)(batch.data).argmax(1).eq(batch.target).sum().item<int64_t>();
    total += batch.size();
  }
  return 100.0 * static_cast<double>(correct) / static_cast<double>(total);
}

struct Data {
  std::shared_ptr<data::Hdf5ImageDataset> train, test;
  data::TransformPtr normalize;
};

std::unique_ptr<data::DataLoader> shard_loader(const Data& d, const Config& c, int64_t replicas,
                                               int64_t index) {
  auto sampler = std::make_shared<data::DistributedSampler>(d.train->size(), replicas, index,
                                                            data::DistributedSamplerOptions{.seed = 1});
  return std::make_unique<data::DataLoader>(d.train, data::DataLoaderOptions().batch_size(c.batch).workers(1),
                                            d.normalize, sampler);
}

void straggle(const ProcessGroup& group, const Config& c) {
  if (c.slow_ms > 0 && group.rank() == group.size() - 1)
    std::this_thread::sleep_for(std::chrono::milliseconds(c.slow_ms));
}

// (a) Synchronous: DDP on every rank.
Result run_sync(const std::shared_ptr<ProcessGroup>& group, const Data& d, const Config& c) {
  auto model = make_model();
  auto ddp = std::make_shared<DistributedDataParallel>(model, group);
  nn::SGD optimizer(ddp->parameters(), sgd_options(c));
  auto train = shard_loader(d, c, group->size(), group->rank());
  Result result;
  std::vector<std::vector<Tensor>> snapshots;
  group->barrier();  // a common start: every rank has loaded its data and built its replica
  const auto start = Clock::now();
  int64_t samples = 0;
  for (int epoch = 0; epoch < c.epochs; ++epoch) {
    const auto epoch_start = Clock::now();
    train->set_epoch(epoch);
    for (data::Batch& batch : *train) {
      optimizer.zero_grad();
      straggle(*group, c);
      // backward() returns with the gradients averaged over the ranks (DDP's all-reduce).
      nn::functional::cross_entropy((*ddp)(batch.data), batch.target).backward();
      optimizer.step();
      samples += batch.size();
    }
    result.epoch_seconds.push_back(std::chrono::duration<double>(Clock::now() - epoch_start).count());
    snapshots.push_back(snapshot(*model));  // replicas are equal: rank 0's stands for all
  }
  group->barrier();  // the run ends when the slowest rank is done
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  Tensor total = full({1}, samples, kInt64);
  group->all_reduce(total);  // samples trained on, all ranks together
  result.samples = total.item<int64_t>();
  if (group->rank() == 0) {
    data::DataLoader test(d.test, data::DataLoaderOptions().batch_size(1000), d.normalize);
    for (const auto& weights : snapshots) result.accuracy.push_back(accuracy(weights, test));
  }
  return result;
}

// (b) Asynchronous: rank 0 serves, the others train.
Result run_ps(const std::shared_ptr<ProcessGroup>& group, const Data& d, const Config& c) {
  auto model = make_model();
  Result result;
  std::vector<std::vector<Tensor>> snapshots;
  int64_t samples = 0;
  group->barrier();  // a common start, as in the synchronous run
  const auto start = Clock::now();
  const PsOptions options{.staleness = c.staleness, .num_servers = c.servers};
  const int first_worker = c.servers;
  if (group->rank() < c.servers) {
    auto make_sgd = [&c](std::vector<Tensor> p) {
      return std::make_unique<nn::SGD>(std::move(p), sgd_options(c));
    };
    result.ps = ParameterServer(group, model, make_sgd, options).run();
  } else {
    Worker worker(group, model, options);
    auto train = shard_loader(d, c, group->size() - c.servers, group->rank() - c.servers);
    std::vector<Tensor> params = model->parameters();
    for (int epoch = 0; epoch < c.epochs; ++epoch) {
      const auto epoch_start = Clock::now();
      train->set_epoch(epoch);
      for (data::Batch& batch : *train) {
        worker.pull();
        for (Tensor& p : params) p.mutable_grad() = Tensor();
        straggle(*group, c);
        nn::functional::cross_entropy((*model)(batch.data), batch.target).backward();
        worker.push();
        samples += batch.size();
      }
      result.epoch_seconds.push_back(std::chrono::duration<double>(Clock::now() - epoch_start).count());
      worker.pull();  // the parameters as they are when this worker ends its epoch
      snapshots.push_back(snapshot(*model));
    }
    worker.finish();
  }
  group->barrier();  // the servers returned, so every worker sent "done"; align the clocks' end
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  Tensor total = full({1}, samples, kInt64);
  group->all_reduce(total);  // samples trained on, all workers together
  result.samples = total.item<int64_t>();
  if (group->rank() == first_worker) {
    data::DataLoader test(d.test, data::DataLoaderOptions().batch_size(1000), d.normalize);
    for (const auto& weights : snapshots) result.accuracy.push_back(accuracy(weights, test));
  }
  // The first worker measured the accuracy and epoch times; rank 0 prints: send them over.
  Tensor report = zeros({2, c.epochs}, kFloat64);
  if (group->rank() == first_worker) {
    for (int e = 0; e < c.epochs; ++e) {
      report.data_ptr<double>()[e] = result.accuracy[e];
      report.data_ptr<double>()[c.epochs + e] = result.epoch_seconds[e];
    }
  }
  group->all_reduce(report);  // the other ranks contribute zeros: a broadcast from the first worker
  result.accuracy.assign(report.data_ptr<double>(), report.data_ptr<double>() + c.epochs);
  result.epoch_seconds.assign(report.data_ptr<double>() + c.epochs, report.data_ptr<double>() + 2 * c.epochs);
  return result;
}

void print(const char* name, const Result& r, int ranks) {
  for (size_t e = 0; e < r.accuracy.size(); ++e)
    std::printf("%-5s epoch %zu: test accuracy %.2f%%, %.1f s\n", name, e + 1, r.accuracy[e],
                r.epoch_seconds[e]);
  std::printf("%-5s %d ranks: %lld samples in %.1f s = %.0f samples/s\n", name, ranks,
              static_cast<long long>(r.samples), r.seconds, static_cast<double>(r.samples) / r.seconds);
}

}  // namespace

int main(int argc, char** argv) {
  std::shared_ptr<ProcessGroup> group;
  try {
    group = init_process_group(Backend::Mpi);
    LOOM_CHECK(argc >= 3,
               "usage: mpirun -np N ps_vs_ddp TRAIN.h5 TEST.h5 [epochs] [staleness] [both|sync|ps] "
               "[batch per rank] [slow rank delay ms] [momentum] [servers]");
    LOOM_CHECK(group->size() >= 2, "ps_vs_ddp: run with at least 2 ranks (mpirun -np 2..4), got ",
               group->size());
    Config c;
    c.train_path = argv[1];
    c.test_path = argv[2];
    if (argc > 3) c.epochs = std::stoi(argv[3]);
    if (argc > 4) c.staleness = std::stoll(argv[4]);
    const std::string mode = argc > 5 ? argv[5] : "both";
    if (argc > 6) c.batch = std::stoll(argv[6]);
    if (argc > 7) c.slow_ms = std::stoi(argv[7]);
    if (argc > 8) c.momentum = std::stod(argv[8]);
    if (argc > 9) c.servers = std::stoi(argv[9]);
    LOOM_CHECK(mode == "both" || mode == "sync" || mode == "ps",
               "ps_vs_ddp: mode must be both, sync or ps, got '", mode, "'");

    Data d;
    d.train = std::make_shared<data::Hdf5ImageDataset>(c.train_path);
    d.test = std::make_shared<data::Hdf5ImageDataset>(c.test_path);
    d.normalize = std::make_shared<data::Normalize>(std::vector<float>{0.2860f}, std::vector<float>{0.3530f});
    if (group->rank() == 0)
      std::printf(
          "MLP 784-512-512-10, %d ranks, batch %lld per rank, %d epochs, momentum %g, staleness bound "
          "%lld, %d server(s)%s\n",
          group->size(), static_cast<long long>(c.batch), c.epochs, c.momentum,
          static_cast<long long>(c.staleness), c.servers,
          c.slow_ms > 0 ? (", last rank +" + std::to_string(c.slow_ms) + " ms per step").c_str() : "");

    if (mode != "ps") {
      Result sync = run_sync(group, d, c);
      if (group->rank() == 0) print("sync", sync, group->size());
    }
    if (mode != "sync") {
      Result ps = run_ps(group, d, c);
      if (group->rank() == 0) {
        print("ps", ps, group->size());
        std::printf(
            "ps    server 0: %lld gradients applied, %lld dropped as staler than %lld; staleness of the "
            "applied:",
            static_cast<long long>(ps.ps.applied), static_cast<long long>(ps.ps.dropped),
            static_cast<long long>(c.staleness));
        for (size_t k = 0; k < ps.ps.staleness_histogram.size(); ++k)
          std::printf(" %zu:%lld", k, static_cast<long long>(ps.ps.staleness_histogram[k]));
        std::printf("\n");
      }
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    // The other ranks may be inside a collective or waiting for this one: end them all.
    if (group) abort_job(e.what());
    return 1;
  }
}
