/*
 * `train --pp p --pipeline-schedule interleaved | zb-h1` under mpirun (p = the world size, 2 or 4):
 * the schedule changes only the order of the micro-batches' forwards and backwards, so each run
 * must end where 1F1B's does — the same logged losses, validation loss and parameters, up to
 * float32 reassociation. Interleaved cuts the mlp into p x 2 stages (rank r holds stages r and
 * r + p, and its checkpoint pieces under those layers' names); ZB-H1 splits every backward into
 * its input and weight halves. A traced run of each writes the schedule's theoretical bubble.
 */
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/distributed/mpi_test_util.h"
#include "tests/distributed/train_test_util.h"
#include "tools/train/trainer.h"

using namespace loom;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kExamples = 32, kBatch = 8;

train::TrainOptions mlp_options(const fs::path& data, const fs::path& out, int64_t p,
                                train::PipelineSchedule schedule) {
  // 2p linear layers, one per interleaved stage. train cuts the mlp by parameter counts; with
  // the layers this alike in size, each of the p x 2 stages gets one linear layer.
  std::string hidden = "64";
  for (int64_t i = 2; i < 2 * p; ++i) hidden += ",64";
  train::TrainOptions o = test::mlp_train_options(data, out, hidden, kBatch);
  o.pp = p;
  o.microbatches = p;  // interleaved needs a multiple of p
  o.pipeline_schedule = schedule;
  return o;
}

train::TrainSummary run(const train::TrainOptions& o) {
  std::ostringstream log;
  return train::run_training(o, log, /*interactive=*/false);
}

// The pipeline line of a run's metrics.jsonl.
nlohmann::json pipeline_line(const fs::path& dir) {
  std::ifstream in(dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);)
    if (line.find("\"kind\":\"pipeline\"") != std::string::npos) return nlohmann::json::parse(line);
  return {};
}

}  // namespace

TEST_CASE("train --pipeline-schedule interleaved and zb-h1 end where 1f1b does") {
  auto world = test::world();
  const int64_t p = world->size();
  const fs::path dir = test::shared_scratch("train_pipeline_schedules", "mlp");
  const fs::path data = test::tiny_image_dataset(dir, "images.h5", kExamples, 4);
  const train::TrainSummary reference =
      run(mlp_options(data, dir / "1f1b", p, train::PipelineSchedule::kOneFOneB));
  const std::vector<double> reference_losses = test::train_losses(dir / "1f1b");
  struct Case {
    train::PipelineSchedule schedule;
    double ideal_bubble;  // (p - 1) / (v·m + p - 1) and (p - 1) / (3m + p - 1), m = p
  };
  const double q = static_cast<double>(p);
  for (const Case& c : {Case{train::PipelineSchedule::kInterleaved, (q - 1) / (2 * q + q - 1)},
                        Case{train::PipelineSchedule::kZeroBubbleH1, (q - 1) / (3 * q + q - 1)}}) {
    const std::string name(train::to_string(c.schedule));
    CAPTURE(name);
    train::TrainOptions o = mlp_options(data, dir / name, p, c.schedule);
    o.trace = (dir / (name + ".json")).string();
    const train::TrainSummary got = run(o);
    CHECK(got.steps == reference.steps);
    REQUIRE(got.val_loss.has_value());
    CHECK(*got.val_loss == doctest::Approx(*reference.val_loss).epsilon(1e-5));
    CHECK(*got.val_accuracy == doctest::Approx(*reference.val_accuracy).epsilon(1e-9));
    // Every rank's pieces under the whole model's names, as 1F1B's.
    CHECK(test::excess(test::model_file(dir / name), test::model_file(dir / "1f1b"), 1e-4, 1e-5) <= 0);
    if (world->rank() == 0) {  // rank 0 alone writes metrics.jsonl
      const std::vector<double> losses = test::train_losses(dir / name);
      REQUIRE(losses.size() == reference_losses.size());
      for (size_t i = 0; i < losses.size(); ++i)
        CHECK(losses[i] == doctest::Approx(reference_losses[i]).epsilon(1e-5));
      const nlohmann::json pipeline = pipeline_line(dir / name);
      REQUIRE(pipeline.contains("ideal_bubble"));
      CHECK(pipeline.at("ideal_bubble").get<double>() == doctest::Approx(c.ideal_bubble));
    }
  }
  world->barrier();  // every rank checked before rank 0 removes the files
  if (world->rank() == 0) fs::remove_all(dir);
}
