/*
 * Bench cases of the quant layer: INT8 inference against float32 inference of the same model,
 * both measured in the same run (the machine is shared: only a ratio taken side by side means
 * something). The PyTorch side is ../shared/anchors/int8.py (torch 1.13, onednn engine).
 *
 *   int8_mlp_b128 / _b1  MLP 784-512-512-10 (ReLU): f32 nn::MLP in eval + InferenceMode vs the
 *                        QuantizedModel that PTQ makes of it (per-channel s8 weights, u8
 *                        activations with ReLU fused, float logits from the last layer).
 *   int8_cnn_b64 / _b1   SmallCNN(3, 10, 32), the same way: Conv2d+ReLU, max pools and the fc in
 *                        INT8, activations kept NHWC u8 between the convolutions.
 *   fake_quant_16M       QAT's fake-quantization (per tensor, s8) of 16M floats, forward and
 *                        backward through the engine: GB/s of x read, y written, dy read, dx written.
 *
 * The INT8 cases report f32_ms, int8_ms, speedup (f32_ms / int8_ms) and max_rel_err (max |int8 -
 * f32| / max |f32| on the timed batch, as the anchor). The models are quantized by the library's
 * own flow (quant::prepare, 4 random calibration batches with min/max observers, quant::convert),
 * so the bench measures what tools/quantize produces.
 */
#include <memory>
#include <vector>

#include "autograd/autograd.h"
#include "core/grad_mode.h"
#include "nn/models/mlp.h"
#include "nn/models/small_cnn.h"
#include "ops/ops.h"
#include "quant/convert.h"
#include "quant/fake_quantize.h"
#include "quant/prepare.h"
#include "tools/bench/bench.h"

namespace loom::bench {
namespace {

double max_rel_err(const Tensor& got, const Tensor& ref) {
  return (got - ref).abs().max().item<double>() / ref.abs().max().item<double>();
}

// The INT8 model PTQ makes of `model`, calibrated on 4 random batches of `shape`.
std::shared_ptr<quant::QuantizedModel> post_training_quantized(const nn::Module& model, IntArrayRef shape) {
  auto prepared = quant::prepare(model, quant::QConfig{.per_channel = true});
  for (int i = 0; i < 4; ++i) (*prepared)(randn(shape));
  return quant::convert(*prepared);
}

std::vector<Metric> compare(nn::Module& model, IntArrayRef calib_shape, const Tensor& x, const TimingOptions& options) {
  InferenceMode guard;
  model.eval();
  const auto int8 = post_training_quantized(model, calib_shape);
  const double err = max_rel_err(int8->forward(x), model(x));
  const double f32_s = time_median([&] { model(x); }, options).seconds_per_call;
  const double int8_s = time_median([&] { int8->forward(x); }, options).seconds_per_call;
  return {{"f32_ms", f32_s * 1e3, "ms"},
          {"int8_ms", int8_s * 1e3, "ms"},
          {"speedup", f32_s / int8_s, "x"},
          {"max_rel_err", err, ""}};
}

std::vector<Metric> int8_mlp(int64_t batch, const TimingOptions& options) {
  nn::MLP model({784, 512, 512, 10});
  return compare(model, {128, 784}, randn({batch, 784}), options);
}

std::vector<Metric> int8_cnn(int64_t batch, const TimingOptions& options) {
  nn::SmallCNN model(3, 10, 32);
  return compare(model, {64, 3, 32, 32}, randn({batch, 3, 32, 32}), options);
}

Workload fake_quant_16m() {
  constexpr int64_t kN = int64_t{1} << 24;
  Tensor x = randn({kN}).requires_grad_(true), dy = randn({kN});
  auto run = [x, dy]() mutable {
    x.mutable_grad() = Tensor();
    quant::fake_quantize_per_tensor(x, 0.02f, 0, -128, 127).backward(dy);
  };
  return {run, 4.0 * 4 * kN};
}

}  // namespace

std::vector<BenchCase> quant_cases() {
  auto mlp = [](int64_t batch) { return [batch](const TimingOptions& o) { return int8_mlp(batch, o); }; };
  auto cnn = [](int64_t batch) { return [batch](const TimingOptions& o) { return int8_cnn(batch, o); }; };
  return {
      BenchCase("int8_mlp_b128", "ms", "MLP 784-512-512-10 inference, f32 vs PTQ INT8 (oneDNN u8s8), batch 128",
                mlp(128)),
      BenchCase("int8_mlp_b1", "ms", "MLP 784-512-512-10 inference, f32 vs INT8, batch 1", mlp(1)),
      BenchCase("int8_cnn_b64", "ms",
                "SmallCNN 3x32x32 inference, f32 vs INT8 (NHWC u8 between layers), batch 64", cnn(64)),
      BenchCase("int8_cnn_b1", "ms", "SmallCNN 3x32x32 inference, f32 vs INT8, batch 1", cnn(1)),
      BenchCase("fake_quant_16M", "gbytes_per_s", "GB/s", 1e9,
                "QAT fake-quantization of 16M floats, forward + backward", fake_quant_16m),
  };
}

}  // namespace loom::bench
