/*
 * A training run killed between checkpoints and resumed from the last one ends bit-identical
 * to a run that was never interrupted: parameters, optimizer state, LR schedule, the random
 * generator and the data loader's position all come back from the checkpoint.
 *
 * The run has everything whose state matters: dropout (draws from the default generator), a
 * shuffling loader with two workers, AdamW (moments and step counts), a warm-up + cosine
 * schedule and gradient clipping. A negative control shows that the comparison is sharp:
 * resuming without the generator's state gives different parameters.
 */
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "data/data_loader.h"
#include "data/dataset.h"
#include "nn/nn.h"
#include "nn/training_state.h"
#include "ops/ops.h"

namespace loom::test {
namespace {

namespace fs = std::filesystem;
using nn::StateDict;

constexpr int64_t kExamples = 100, kBatch = 16;  // 7 batches per epoch, the last one of 4
constexpr int64_t kTotalSteps = 40;

std::shared_ptr<data::TensorDataset> make_dataset() {
  Generator g(1234);
  Tensor x = randn({kExamples, 20}, {}, &g);
  Tensor y = randint(0, 4, {kExamples}, DType::Int64, &g);
  return std::make_shared<data::TensorDataset>(x, y);
}

// Everything a training run holds, built the same way at every (re)start.
struct Run {
  nn::Sequential model;
  nn::AdamW optimizer;
  nn::CosineWithWarmup schedule;
  data::DataLoader loader;
  int64_t step = 0;

  explicit Run(std::shared_ptr<data::TensorDataset> dataset)
      : model(std::make_shared<nn::Linear>(20, 32), std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.3),
              std::make_shared<nn::Linear>(32, 4)),
        optimizer(model.parameters(), nn::AdamWOptions{.lr = 1e-2}),
        schedule(optimizer, 5, kTotalSteps),
        loader(dataset, data::DataLoaderOptions().batch_size(kBatch).shuffle(true).seed(99).workers(2)) {}

  // Trains until `until` steps are done, saving a checkpoint after every `every` steps.
  void train(int64_t until, nn::CheckpointManager* checkpoints = nullptr, int64_t every = 0) {
    while (step < until) {
      for (data::Batch& batch : loader) {
        optimizer.zero_grad();
        nn::functional::cross_entropy(model(batch.data), batch.target).backward();
        nn::clip_grad_norm_(model.parameters(), 1.0);
        optimizer.step();
        schedule.step();
        ++step;
        if (checkpoints && step % every == 0) save(*checkpoints);
        if (step == until) break;
      }
    }
  }

  void save(nn::CheckpointManager& checkpoints) const {
    checkpoints.save(step, {{"model", model.state_dict()},
                            {"optimizer", optimizer.state_dict()},
                            {"schedule", schedule.state_dict()},
                            {"rng", nn::rng_state_dict()},
                            {"loader", nn::counters_to_state_dict(loader.state().to_map())}});
  }

  void restore(const nn::Checkpoint& checkpoint, bool with_rng = true) {
    model.load_state_dict(checkpoint.sections.at("model"));
    optimizer.load_state_dict(checkpoint.sections.at("optimizer"));
    schedule.load_state_dict(checkpoint.sections.at("schedule"));
    if (with_rng) nn::load_rng_state_dict(checkpoint.sections.at("rng"));
    loader.load_state(data::LoaderState::from_map(nn::counters_from_state_dict(checkpoint.sections.at("loader"))));
    step = checkpoint.step;
  }
};

// Whether two state dicts hold the same keys with bitwise equal contents.
bool bitwise_equal(const StateDict& a, const StateDict& b) {
  if (a.keys() != b.keys()) return false;
  for (const auto& [name, t] : a) {
    const Tensor& u = b.at(name);
    if (t.dtype() != u.dtype() || t.sizes() != u.sizes()) return false;
    Tensor tc = t.contiguous(), uc = u.contiguous();
    if (std::memcmp(tc.data_ptr(), uc.data_ptr(), tc.nbytes()) != 0) return false;
  }
  return true;
}

struct Final {
  StateDict model, optimizer, schedule, rng, loader;
};

Final final_state(const Run& run) {
  auto snapshot = [](const StateDict& s) {
    StateDict out;
    for (const auto& [name, t] : s) out.insert(name, t.clone());
    return out;
  };
  return {snapshot(run.model.state_dict()), snapshot(run.optimizer.state_dict()), run.schedule.state_dict(),
          nn::rng_state_dict(), nn::counters_to_state_dict(run.loader.state().to_map())};
}

Final uninterrupted(const std::shared_ptr<data::TensorDataset>& dataset) {
  manual_seed(7);
  Run run(dataset);
  run.train(kTotalSteps);
  return final_state(run);
}

// Trains with checkpoints every `every` steps, "dies" after `kill_at` steps (the Run is
// destroyed without saving), then a fresh Run resumes from the latest checkpoint.
Final interrupted(const std::shared_ptr<data::TensorDataset>& dataset, int64_t every, int64_t kill_at,
                  const fs::path& dir, bool restore_rng = true) {
  fs::remove_all(dir);
  nn::CheckpointManager checkpoints(dir);
  {
    manual_seed(7);
    Run run(dataset);
    run.train(kill_at, &checkpoints, every);
  }
  manual_seed(555);  // a new process: whatever the generator holds now must not matter
  Run resumed(dataset);
  std::optional<nn::Checkpoint> latest = checkpoints.load_latest();
  REQUIRE(latest.has_value());
  CHECK(latest->step == kill_at / every * every);
  resumed.restore(*latest, restore_rng);
  resumed.train(kTotalSteps, &checkpoints, every);
  fs::remove_all(dir);
  return final_state(resumed);
}

void check_identical(const Final& a, const Final& b) {
  CHECK(bitwise_equal(a.model, b.model));
  CHECK(bitwise_equal(a.optimizer, b.optimizer));
  CHECK(bitwise_equal(a.schedule, b.schedule));
  CHECK(bitwise_equal(a.rng, b.rng));
  CHECK(bitwise_equal(a.loader, b.loader));
}

fs::path scratch_dir(const std::string& name) {
  return fs::temp_directory_path() / ("loom_resume_" + name + "_" + std::to_string(::getpid()));
}

}  // namespace

TEST_CASE("resuming mid-epoch from the last checkpoint is bit-identical to an uninterrupted run") {
  auto dataset = make_dataset();
  Final reference = uninterrupted(dataset);
  // Checkpoints at steps 6, 12, 18: the kill at 17 loses five steps; step 12 is batch 5 of epoch 1.
  check_identical(reference, interrupted(dataset, 6, 17, scratch_dir("mid")));
}

TEST_CASE("resuming at an epoch boundary is bit-identical to an uninterrupted run") {
  auto dataset = make_dataset();
  Final reference = uninterrupted(dataset);
  // 7 batches per epoch: the checkpoint of step 14 is the end of epoch 1.
  check_identical(reference, interrupted(dataset, 7, 16, scratch_dir("boundary")));
}

TEST_CASE("negative control: resuming without the generator's state gives a different run") {
  auto dataset = make_dataset();
  Final reference = uninterrupted(dataset);
  Final wrong = interrupted(dataset, 6, 17, scratch_dir("no_rng"), /*restore_rng=*/false);
  CHECK_FALSE(bitwise_equal(reference.model, wrong.model));  // dropout masks differ after step 12
  CHECK(bitwise_equal(reference.loader, wrong.loader));      // the data order does not depend on it
}

}  // namespace loom::test
