/*
 * Bench cases of batch prediction (tools/predict): samples/s of the SmallCNN (the zoo "cnn",
 * SmallCNN(3, 10, 32), the anchors' models.py SmallCNN) over an HDF5 image set, f32 and INT8, at
 * batch 1 and 256, through the library code predict runs: open_prediction_data, a DataLoader with
 * 2 workers, predict_batches, and a PredictionFile written and committed every pass.
 *
 *   predict_cnn_f32_b256 / _b1    the float model (eval, no grad)
 *   predict_cnn_int8_b256 / _b1   its INT8 version, quantized as tools/quantize does (prepare,
 *                                 4 random calibration batches with min/max observers, per-channel
 *                                 weights, convert)
 *
 * The PyTorch side is tools/bench/torch_extra.py: the same model's forward in
 * torch.inference_mode(), f32 and FX static PTQ INT8 (as ../shared/anchors/int8.py), with no
 * loading or writing. So the ratio here includes everything predict does besides the model.
 */
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "core/grad_mode.h"
#include "data/batch_prediction.h"
#include "data/dataset_writer.h"
#include "nn/models/small_cnn.h"
#include "ops/ops.h"
#include "quant/convert.h"
#include "quant/prepare.h"
#include "tools/bench/bench.h"

namespace loom::bench {
namespace {

namespace fs = std::filesystem;

// A scratch directory holding the image set and the predictions, removed with the case.
struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("loom_bench_predict_" + std::to_string(::getpid()));
  Scratch() { fs::create_directories(dir); }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

Workload predict_cnn(bool int8, int64_t batch) {
  auto scratch = std::make_shared<Scratch>();
  const int64_t n = batch == 1 ? 64 : 512;  // a pass of well under a second either way
  const fs::path images = scratch->dir / "images.h5", out = scratch->dir / "predictions.h5";
  data::write_image_dataset(images.string(), randint(0, 256, {n, 3, 32, 32}, kInt64).to(kUInt8),
                            randint(0, 10, {n}, kInt64), data::DatasetInfo{});
  auto cnn = std::make_shared<nn::SmallCNN>(3, 10, 32);
  cnn->eval();
  data::ModelFn model = [cnn](const Tensor& x) { return (*cnn)(x); };
  if (int8) {
    auto prepared = quant::prepare(*cnn, quant::QConfig{.per_channel = true});
    NoGradGuard no_grad;
    for (int i = 0; i < 4; ++i) (*prepared)(randn({64, 3, 32, 32}));
    std::shared_ptr<quant::QuantizedModel> q = quant::convert(*prepared);
    model = [q](const Tensor& x) { return q->forward(x); };
  }
  const data::PredictionData input = data::open_prediction_data(images.string(), {});
  auto loader = std::make_shared<data::DataLoader>(
      input.dataset, data::DataLoaderOptions().batch_size(batch).workers(2), input.transform);
  auto run = [scratch, loader, model, out, n] {
    data::PredictionFile file(out.string(), n, false, true);
    data::predict_batches(model, *loader, {.out = &file});
    file.finish({}, {});
  };
  return {run, static_cast<double>(n)};
}

}  // namespace

std::vector<BenchCase> predict_cases() {
  auto c = [](bool int8, int64_t batch) { return [=] { return predict_cnn(int8, batch); }; };
  return {
      BenchCase("predict_cnn_f32_b256", "samples_per_s", "samples/s", 1,
                "predict: SmallCNN 3x32x32 f32 over an HDF5 set, batch 256 (loader, model, predictions file)",
                c(false, 256)),
      BenchCase("predict_cnn_f32_b1", "samples_per_s", "samples/s", 1, "predict: SmallCNN f32, batch 1",
                c(false, 1)),
      BenchCase("predict_cnn_int8_b256", "samples_per_s", "samples/s", 1,
                "predict: SmallCNN INT8 (PTQ, per-channel), batch 256", c(true, 256)),
      BenchCase("predict_cnn_int8_b1", "samples_per_s", "samples/s", 1, "predict: SmallCNN INT8, batch 1",
                c(true, 1)),
  };
}

}  // namespace loom::bench
