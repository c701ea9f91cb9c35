/*
 * train --amp bf16 end to end on the CPU: the MLP trained on the whole of Fashion-MNIST under
 * bfloat16 autocast reaches the accuracy of the same run in float32 within 0.5 points.
 *
 * bf16 keeps 8 bits of mantissa, so every autocast matmul rounds its inputs to about 0.4 %;
 * the float32 master weights and the float32 accumulation (docs/amp.md) are what keep the
 * training as good: an update of lr * gradient is often below half of a bf16 weight's last
 * bit, and would vanish in a bf16 weight. Three epochs of 469 steps: long enough for
 * the accuracy to settle near 88 %, where two float32 runs with different seeds differ by a few
 * tenths of a point.
 */
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "data/builtin_datasets.h"
#include "tools/train/options.h"
#include "tools/train/trainer.h"

namespace loom::test {
namespace {

namespace fs = std::filesystem;

struct AmpRun {
  double accuracy = 0;
  std::vector<double> losses{};  // every step's training loss
};

AmpRun train_mlp(const std::string& train, const std::string& val, const fs::path& out, const char* amp) {
  const std::string out_dir = out.string();
  std::vector<const char*> argv{"train", "--model", "mlp", "--data", train.c_str(), "--val", val.c_str(),
                                "--epochs", "3", "--batch", "128", "--lr", "0.05", "--seed", "1", "--log-every",
                                "1", "--amp", amp, "--out", out_dir.c_str(), "--force"};
  train::ParseOutcome outcome = train::parse_options(static_cast<int>(argv.size()), argv.data());
  REQUIRE(outcome.options.has_value());
  std::ostringstream log;
  const train::TrainSummary summary = train::run_training(*outcome.options, log, /*interactive=*/false);
  REQUIRE(summary.val_accuracy.has_value());
  AmpRun run{.accuracy = *summary.val_accuracy * 100};
  std::ifstream metrics(out / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["kind"] == "train") run.losses.push_back(j["loss"].get<double>());
  }
  return run;
}

}  // namespace

TEST_CASE("train --amp bf16 on the CPU reaches the float32 run's Fashion-MNIST accuracy within 0.5 points") {
  REQUIRE_MESSAGE(fs::exists(std::string(data::kFashionMnistDir) + "/train-images-idx3-ubyte.gz"),
                  "install Debian's dataset-fashion-mnist");
  const fs::path dir = fs::temp_directory_path() / ("loom_train_bf16_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string train = data::fashion_mnist_hdf5("train", dir.string());
  const std::string val = data::fashion_mnist_hdf5("test", dir.string());

  const AmpRun f32 = train_mlp(train, val, dir / "f32", "none");
  const AmpRun bf16 = train_mlp(train, val, dir / "bf16", "bf16");
  MESSAGE("Fashion-MNIST test accuracy after 3 epochs: float32 ", f32.accuracy, " %, bf16 autocast ", bf16.accuracy,
          " %");
  CHECK(f32.accuracy > 86.0);  // the run trains at all
  CHECK(std::abs(bf16.accuracy - f32.accuracy) <= 0.5);
  // bf16 really ran: the first step's loss already differs from float32's in the fourth digit
  // or so (the same weights and batch; only the rounding of the matmul inputs differs).
  REQUIRE(f32.losses.size() == bf16.losses.size());
  REQUIRE_FALSE(f32.losses.empty());
  CHECK(f32.losses.front() != bf16.losses.front());
  CHECK(std::abs(f32.losses.front() - bf16.losses.front()) < 0.02);
  fs::remove_all(dir);
}

}  // namespace loom::test
