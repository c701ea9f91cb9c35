/*
 * Fixtures of the quantize tests (test_quantize_cli.cpp, test_quantize_cuda.cpp): a tiny HDF5
 * image dataset whose class is visible in the images, and a model trained on it by `train`.
 */
#pragma once

#include <cstdint>
#include <filesystem>
#include <sstream>
#include <string>

#include "core/random.h"
#include "data/dataset_writer.h"
#include "ops/ops.h"
#include "tools/train/options.h"
#include "tools/train/trainer.h"

namespace loom::test {

namespace fs = std::filesystem;

// Images whose class is visible in them (a bright quadrant per class), so that a tiny model
// learns it in a few steps and accuracy means something.
inline fs::path quadrant_dataset(const fs::path& dir, const std::string& name, int64_t n, int64_t channels,
                                 int64_t side, uint64_t seed) {
  Generator g(seed);
  Tensor labels = randint(0, 4, {n}, DType::Int64, &g);
  Tensor images = randint(0, 60, {n, channels, side, side}, DType::Int64, &g);
  const int64_t h = side / 2;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = labels.select(0, i).item<int64_t>();
    images.select(0, i).slice(1, (c / 2) * h, (c / 2 + 1) * h).slice(2, (c % 2) * h, (c % 2 + 1) * h).add_(180);
  }
  data::DatasetInfo info;
  info.name = name;
  info.class_names = {"a", "b", "c", "d"};
  fs::path path = dir / (name + ".h5");
  data::write_image_dataset(path.string(), images.to(DType::UInt8), labels, info, {.chunk_rows = 64});
  return path;
}

// Trains a model with tools/train on the quadrant data and returns its model.safetensors.
inline fs::path trained_model(const fs::path& dir, const std::string& model, const fs::path& train_set,
                              const fs::path& val_set) {
  train::TrainOptions t;
  t.model = model == "cnn" ? train::ModelKind::kCnn : train::ModelKind::kMlp;  // the models trained here
  t.hidden = "32";
  t.data = train_set.string();
  t.val = val_set.string();
  t.epochs = 2;
  t.batch = 32;
  t.lr = 0.05;
  t.workers = 0;
  t.out = (dir / ("run_" + model)).string();
  t.force = true;
  std::ostringstream log;
  train::run_training(t, log, /*interactive=*/false);
  return dir / ("run_" + model) / "model.safetensors";
}

}  // namespace loom::test
