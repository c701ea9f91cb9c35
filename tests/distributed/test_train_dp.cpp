/*
 * `train --dp N` (tools/train/trainer.h) under mpirun with 2 and 4 ranks, through the library's
 * entry point run_training on every rank (as `mpirun -np N train ... --dp N` runs it).
 *
 * The reference is one process with N times the batch: DistributedSampler gives rank r the
 * positions r, r + N, ... of the epoch's permutation, so rank r's batch k with b examples holds
 * positions k·N·b + r + N·j (j < b), and the N ranks' batches k together are positions
 * [k·N·b, (k+1)·N·b): batch k of a single process with batch N·b and the same seed. DDP averages
 * the ranks' mean-loss gradients, which is the gradient of the mean over the N·b examples. The
 * two runs therefore agree up to the reassociation of sums. (The dataset size is a multiple of
 * N·b for N = 2 and 4, so DistributedSampler pads nothing.) Each rank computes the reference
 * itself, with --dp 1 into a directory of its own.
 *
 *   - --dp N --batch b, and --dp N --batch b/2 --grad-accum 2 (no_sync on the first micro-batch),
 *     end with the reference's parameters and validation loss/accuracy (validation is sharded
 *     over the ranks and all-reduced, so it covers the whole set);
 *   - only rank 0 writes: the run directory holds one set of files, metrics.jsonl one line per
 *     logged step, and only rank 0's progress stream has text;
 *   - a run stopped mid-epoch and resumed at the same N ends bit-identical to one never stopped;
 *     every rank saved its own state into the checkpoint (step-X/rank-R/).
 */
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "data/data.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "tests/distributed/mpi_test_util.h"
#include "tests/distributed/train_test_util.h"
#include "tools/train/trainer.h"

using namespace loom;
namespace fs = std::filesystem;

namespace {

using test::bitwise_equal;
using test::excess;
using test::model_file;

constexpr int64_t kExamples = 64;  // a multiple of N·b for N = 2, 4 and b = 4
constexpr int64_t kBatch = 4;

fs::path shared_scratch(const std::string& name) { return test::shared_scratch("train_dp", name); }

// 64 random 1x8x8 images in 4 classes, written by rank 0.
fs::path tiny_dataset(const fs::path& dir) { return test::tiny_image_dataset(dir, "tiny.h5", kExamples, 4); }

train::TrainOptions options(const fs::path& data, const fs::path& out) {
  return test::mlp_train_options(data, out, "16", kBatch);
}

struct Run {
  train::TrainSummary summary;
  std::string log;
};

Run run(const train::TrainOptions& o) {
  std::ostringstream log;
  Run r;
  r.summary = train::run_training(o, log, /*interactive=*/false);
  r.log = log.str();
  return r;
}

int64_t count_lines(const fs::path& path, const std::string& needle) {
  std::ifstream in(path);
  int64_t n = 0;
  for (std::string line; std::getline(in, line);) n += line.find(needle) != std::string::npos;
  return n;
}

}  // namespace

TEST_CASE("train --dp N equals one process with N times the batch, and only rank 0 writes") {
  auto world = test::world();
  const int n = world->size();
  fs::path dir = shared_scratch("equiv");
  fs::path data = tiny_dataset(dir);

  train::TrainOptions o = options(data, dir / "dp");
  o.dp = n;
  o.trace = (dir / "trace.json").string();
  Run dp = run(o);

  train::TrainOptions accum = options(data, dir / "accum");
  accum.dp = n;
  accum.batch = kBatch / 2;
  accum.grad_accum = 2;
  Run acc = run(accum);

  // The reference: this rank alone, no communication, into a directory of its own.
  train::TrainOptions ref = options(data, dir / ("ref-rank" + std::to_string(world->rank())));
  ref.batch = kBatch * n;
  Run single = run(ref);

  const int64_t steps = 2 * kExamples / (kBatch * n);
  CHECK(dp.summary.steps == steps);
  CHECK(acc.summary.steps == steps);
  CHECK(single.summary.steps == steps);
  // float32 sums taken in another order (per-rank matmuls, then the all-reduce), over a few steps.
  nn::StateDict expected = model_file(dir / ("ref-rank" + std::to_string(world->rank())));
  CHECK(excess(model_file(dir / "dp"), expected, 1e-4, 1e-5) <= 0);
  CHECK(excess(model_file(dir / "accum"), expected, 1e-4, 1e-5) <= 0);
  // Validation covers the whole set on every rank.
  REQUIRE(dp.summary.val_accuracy.has_value());
  CHECK(*dp.summary.val_accuracy == doctest::Approx(*single.summary.val_accuracy).epsilon(1e-9));
  CHECK(*dp.summary.val_loss == doctest::Approx(*single.summary.val_loss).epsilon(1e-4));
  // The loss went down (the model learns the random labels of 64 examples).
  CHECK(*dp.summary.val_loss < std::log(4.0));

  // Only rank 0 wrote the run directory and printed progress.
  CHECK(dp.log.empty() == (world->rank() != 0));
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir / "dp")) names.insert(entry.path().filename().string());
  CHECK(names == std::set<std::string>{
                     "config.json", "metrics.jsonl", "report.html", "latest", "model.safetensors",
                     "step-" + std::string(8 - std::to_string(steps).size(), '0') + std::to_string(steps)});
  CHECK(count_lines(dir / "dp" / "metrics.jsonl", "\"kind\":\"train\"") == steps);
  CHECK(count_lines(dir / "dp" / "metrics.jsonl", "\"kind\":\"val\"") == 2);
  CHECK(count_lines(dir / "dp" / "config.json", "\"dp\": " + std::to_string(n)) == 1);
  CHECK(fs::exists(dir / "trace.json"));
  world->barrier();  // every rank checked before rank 0 removes the files
  if (world->rank() == 0) fs::remove_all(dir);
}

TEST_CASE("train --dp N: a run resumed mid-epoch ends bit-identical to one never stopped") {
  auto world = test::world();
  const int n = world->size();
  fs::path dir = shared_scratch("resume");
  fs::path data = tiny_dataset(dir);

  train::TrainOptions o = options(data, dir / "whole");
  o.dp = n;
  // 5 steps: mid-way through epoch 1 (8 steps per epoch at N = 2) or 2 (4 steps at N = 4).
  test::check_resumed_equals_whole([](const train::TrainOptions& t) { return run(t).summary.steps; }, o,
                                   dir / "whole", dir / "stopped", 5, 2 * kExamples / (kBatch * n));
  world->barrier();
  if (world->rank() == 0) fs::remove_all(dir);
}

TEST_CASE("train --dp: a --dp other than the world size is an input error naming mpirun -np") {
  auto world = test::world();
  train::TrainOptions o = options("unused.h5", "unused");
  o.dp = world->size() + 1;
  std::ostringstream log;
  std::string message;
  try {
    train::run_training(o, log, false);
  } catch (const train::InputError& e) {
    message = e.what();
  }
  CHECK(message == "--dp " + std::to_string(world->size() + 1) + " needs mpirun -np " +
                       std::to_string(world->size() + 1) + "; this job has " + std::to_string(world->size()) +
                       " ranks");
}
