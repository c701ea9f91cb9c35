/*
 * What the tests of `train` under mpirun share (test_train_dp.cpp, test_train_parallel.cpp): a
 * scratch directory every rank of a job names alike, a tiny image dataset, the comparisons
 * of the state dicts two runs end with, and the stop-and-resume check.
 */
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/data.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "tests/distributed/mpi_test_util.h"
#include "tools/train/trainer.h"

namespace loom::test {

// A directory every rank names alike (rank 0's pid, broadcast), so that the ranks of one job
// share it and concurrent jobs (np2 and np4) do not.
inline std::filesystem::path shared_scratch(const std::string& suite, const std::string& name) {
  auto group = world();
  Tensor pid = full({1}, static_cast<double>(::getpid()), DType::Int64);
  group->broadcast(pid, 0);
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("loom_" + suite + "_" + name + "_np" + std::to_string(group->size()) + "_" +
                               std::to_string(pid.item<int64_t>()));
  if (group->rank() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  group->barrier();  // the directory exists before any rank uses it
  return dir;
}

// `examples` random 1x8x8 images in `classes` classes (named "a", "b", ...), written by rank 0
// to dir/file.
inline std::filesystem::path tiny_image_dataset(const std::filesystem::path& dir, const std::string& file,
                                                int64_t examples, int64_t classes) {
  std::filesystem::path path = dir / file;
  if (world()->rank() == 0) {
    Generator g(7);
    Tensor images = randint(0, 256, {examples, 1, 8, 8}, DType::UInt8, &g);
    Tensor labels = randint(0, classes, {examples}, DType::Int64, &g);
    data::DatasetInfo info;
    info.name = "tiny";
    for (int64_t c = 0; c < classes; ++c)
      info.class_names.push_back(std::string(1, static_cast<char>('a' + c)));
    data::write_image_dataset(path.string(), images, labels, info, {.chunk_rows = 16});
  }
  world()->barrier();  // the file is complete before the other ranks open it
  return path;
}

// A small mlp run of `train` on `data` (also its validation set) into `out`: hidden layers
// `hidden`, `batch` per rank, 2 epochs of SGD at lr 0.1, seed 3, no loader workers, every step
// logged. The tests change what they compare.
inline train::TrainOptions mlp_train_options(const std::filesystem::path& data, const std::filesystem::path& out,
                                             const std::string& hidden, int64_t batch) {
  train::TrainOptions o;
  o.model = train::ModelKind::kMlp;
  o.hidden = hidden;
  o.data = data.string();
  o.val = data.string();
  o.workers = 0;
  o.epochs = 2;
  o.batch = batch;
  o.lr = 0.1;
  o.seed = 3;
  o.log_every = 1;
  o.out = out.string();
  return o;
}

// The "loss" of every {"kind":"train"} line of a run's metrics.jsonl, in order.
inline std::vector<double> train_losses(const std::filesystem::path& dir) {
  std::ifstream in(dir / "metrics.jsonl");
  std::vector<double> losses;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.value("kind", "") == "train") losses.push_back(j.at("loss").get<double>());
  }
  return losses;
}

// The trained model a run wrote (rank 0: RUN_DIR/model.safetensors, single-process names): a
// job's checkpoints hold one directory per rank, which a lone reader cannot load.
inline nn::StateDict model_file(const std::filesystem::path& run_dir) {
  return nn::load_safetensors(run_dir / "model.safetensors").tensors;
}

// Largest |a - b| - (atol + rtol |b|) over all entries: <= 0 when close; 1 when the keys or a
// shape differ.
inline double excess(const nn::StateDict& a, const nn::StateDict& b, double rtol, double atol) {
  if (a.keys() != b.keys()) return 1;
  double worst = -1;
  for (const auto& [name, t] : a) {
    Tensor x = t.to(DType::Float64).contiguous(), y = b.at(name).to(DType::Float64).contiguous();
    if (x.sizes() != y.sizes()) return 1;
    const double* p = x.data_ptr<double>();
    const double* q = y.data_ptr<double>();
    for (int64_t i = 0; i < x.numel(); ++i)
      worst = std::max(worst, std::abs(p[i] - q[i]) - (atol + rtol * std::abs(q[i])));
  }
  return worst;
}

inline bool bitwise_equal(const nn::StateDict& a, const nn::StateDict& b) {
  if (a.keys() != b.keys()) return false;
  for (const auto& [name, t] : a) {
    Tensor tc = t.contiguous(), uc = b.at(name).contiguous();
    if (tc.sizes() != uc.sizes() || std::memcmp(tc.data_ptr(), uc.data_ptr(), tc.nbytes()) != 0) return false;
  }
  return true;
}

// `options` run to the end into `whole_dir`, and into `stopped_dir` stopped after `stop_after`
// steps (mid-epoch) and resumed: the resumed run takes the remaining steps up to `total_steps`,
// ends with a model bit-identical to the uninterrupted one, and every rank of the job saved its
// own state into the last checkpoint. `run` returns a run's step count.
inline void check_resumed_equals_whole(const std::function<int64_t(const train::TrainOptions&)>& run,
                                       train::TrainOptions options, const std::filesystem::path& whole_dir,
                                       const std::filesystem::path& stopped_dir, int64_t stop_after,
                                       int64_t total_steps) {
  train::TrainOptions whole = options;
  whole.out = whole_dir.string();
  CHECK(run(whole) == total_steps);
  train::TrainOptions first = options;
  first.out = stopped_dir.string();
  first.max_steps = stop_after;
  CHECK(run(first) == stop_after);
  train::TrainOptions rest = first;
  rest.max_steps = 0;
  rest.resume = rest.out;
  CHECK(run(rest) == total_steps);
  CHECK(bitwise_equal(model_file(stopped_dir), model_file(whole_dir)));
  const std::filesystem::path step_dir = whole_dir / nn::CheckpointManager::step_dir_name(total_steps);
  for (int r = 0; r < world()->size(); ++r)
    CHECK(std::filesystem::exists(step_dir / nn::CheckpointManager::rank_dir_name(r)));
}

}  // namespace loom::test
