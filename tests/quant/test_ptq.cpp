/*
 * The quantization flows end to end: BatchNorm folding against the unfolded layers, prepare()
 * reproducing the float model, the INT8 model against the fake-quantized float simulation of
 * itself (the independent reference: same qparams, float arithmetic), quantized-model files
 * (round trip, no float weights, every damaged field rejected), and QAT training through
 * fake-quantization.
 */
#include <doctest/doctest.h>

#include <filesystem>
#include <random>
#include <nlohmann/json.hpp>

#include "core/random.h"
#include "nn/nn.h"
#include "nn/serialize/atomic_file.h"
#include "nn/serialize/safetensors.h"
#include "ops/ops.h"
#include "quant/quant.h"
#include "tests/test_util.h"

namespace loom::test {
namespace {

namespace fs = std::filesystem;
using quant::QuantStage;

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return (a.to(DType::Float64) - b.to(DType::Float64)).abs().max().item<double>();
}

// Conv - BN - ReLU - MaxPool - Conv - BN - ReLU - Flatten - Linear, BN with non-trivial statistics.
std::shared_ptr<nn::Sequential> conv_bn_net() {
  auto net = std::make_shared<nn::Sequential>(
      std::make_shared<nn::Conv2d>(2, 4, 3, nn::Conv2dOptions{.padding = 1}), std::make_shared<nn::BatchNorm2d>(4),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::Conv2d>(4, 6, 3, nn::Conv2dOptions{.stride = 2, .bias = false}),
      std::make_shared<nn::BatchNorm2d>(6), std::make_shared<nn::ReLU>(), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(6, 5));
  // Train-mode passes give the BatchNorms running statistics that are not (0, 1).
  for (int i = 0; i < 5; ++i) (*net)(randn({8, 2, 8, 8}) * 2.0 + 0.5);
  net->eval();
  return net;
}

// Runs `batches` random batches through a prepared model (PTQ calibration).
void calibrate(quant::PreparedModel& prepared, IntArrayRef shape, int batches = 4) {
  NoGradGuard no_grad;
  for (int i = 0; i < batches; ++i) prepared(randn(shape));
}

TEST_CASE("fold_batch_norm: the folded layer computes what layer + eval-mode BatchNorm computes") {
  manual_seed(1);
  nn::Conv2d conv(3, 4, 3, {.padding = 1});
  nn::BatchNorm2d bn(4);
  for (int i = 0; i < 3; ++i) bn(randn({4, 4, 5, 5}) * 3.0 - 1.0);
  bn.eval();
  NoGradGuard no_grad;
  Tensor x = randn({2, 3, 6, 6});
  Tensor expected = bn(conv(x));
  quant::FoldedWeights folded = quant::fold_batch_norm(conv.weight, conv.bias, bn);
  Tensor got = conv2d(x, folded.weight, folded.bias, {1, 1}, {1, 1});
  CHECK(max_abs_diff(got, expected) < 1e-5);
  // Without a bias, and for a Linear layer with BatchNorm1d.
  nn::Linear linear(5, 3, /*bias=*/false);
  nn::BatchNorm1d bn1(3);
  bn1(randn({16, 3}) + 2.0);
  bn1.eval();
  Tensor v = randn({4, 5});
  quant::FoldedWeights f1 = quant::fold_batch_norm(linear.weight, linear.bias, bn1);
  CHECK(max_abs_diff(loom::linear(v, f1.weight, f1.bias), bn1(linear(v))) < 1e-5);
  CHECK_THROWS_WITH_AS(quant::fold_batch_norm(linear.weight, linear.bias, bn), doctest::Contains("normalises 4"),
                       Error);
}

TEST_CASE("prepare: MLP and SmallCNN become fused stages that compute the float model") {
  manual_seed(2);
  nn::MLP mlp({12, 16, 8, 3});
  mlp.eval();
  auto prepared = quant::prepare(mlp);
  REQUIRE(prepared->stages.size() == 4);
  CHECK(prepared->stages.at<QuantStage>(0).kind == QuantStage::Kind::Flatten);
  CHECK(prepared->stages.at<QuantStage>(1).type_name() == "LinearReLU");
  CHECK(prepared->stages.at<QuantStage>(1).source == "0 + 1");
  CHECK(prepared->stages.at<QuantStage>(3).type_name() == "Linear");
  NoGradGuard no_grad;
  Tensor x = randn({5, 3, 2, 2});
  CHECK(max_abs_diff((*prepared)(x), mlp(x)) == 0.0);  // observers only: the float computation itself
  // The prepared model holds copies: calibrating or training it leaves the float model alone.
  CHECK_FALSE(prepared->stages.at<QuantStage>(1).weight.shares_storage(mlp.at<nn::Linear>(0).weight));

  nn::SmallCNN cnn(1, 10, 12);
  cnn.eval();
  auto pc = quant::prepare(cnn);
  std::vector<std::string> kinds;
  for (const auto& s : pc->stages) kinds.push_back(s->type_name());
  CHECK(kinds == std::vector<std::string>{"Conv2dReLU", "MaxPool2d", "Conv2dReLU", "MaxPool2d", "Flatten", "Linear"});
  Tensor img = randn({3, 1, 12, 12});
  CHECK(max_abs_diff((*pc)(img), cnn(img)) < 1e-6);
}

TEST_CASE("prepare: BatchNorm is folded and ReLU fused; layers without an INT8 form are named") {
  manual_seed(3);
  auto net = conv_bn_net();
  auto prepared = quant::prepare(*net);
  std::vector<std::string> kinds;
  for (const auto& s : prepared->stages) kinds.push_back(s->type_name());
  CHECK(kinds == std::vector<std::string>{"Conv2dReLU", "MaxPool2d", "Conv2dReLU", "Flatten", "Linear"});
  CHECK(prepared->stages.at<QuantStage>(0).source == "0 + 1 + 2");
  NoGradGuard no_grad;
  Tensor x = randn({4, 2, 8, 8});
  CHECK(max_abs_diff((*prepared)(x), (*net)(x)) < 1e-5);

  nn::Sequential gelu(std::make_shared<nn::Linear>(4, 4), std::make_shared<nn::GELU>());
  CHECK_THROWS_WITH_AS(quant::prepare(gelu), doctest::Contains("layer '1' (GELU) has no INT8 implementation"), Error);
  nn::Sequential lonely_bn(std::make_shared<nn::BatchNorm1d>(4), std::make_shared<nn::Linear>(4, 4));
  CHECK_THROWS_WITH_AS(quant::prepare(lonely_bn), doctest::Contains("does not follow a Conv2d or Linear"), Error);
  nn::LayerNorm norm(4);
  CHECK_THROWS_WITH_AS(quant::prepare(norm), doctest::Contains("cannot prepare a LayerNorm"), Error);
  CHECK_THROWS_WITH_AS(quant::prepare(*net, quant::QConfig{.activation_method = "kl"}),
                       doctest::Contains("unknown activation method 'kl'"), Error);
}

TEST_CASE("convert: the INT8 model agrees with the fake-quantized float simulation of itself") {
  manual_seed(4);
  for (bool per_channel : {true, false}) {
    CAPTURE(per_channel);
    auto net = conv_bn_net();
    auto prepared = quant::prepare(*net, quant::QConfig{.per_channel = per_channel});
    CHECK_THROWS_WITH_AS(quant::convert(*prepared), doctest::Contains("observed no data"), Error);
    calibrate(*prepared, {16, 2, 8, 8});
    CHECK(prepared->calibrated());
    auto int8 = quant::convert(*prepared);
    NoGradGuard no_grad;
    Tensor x = randn({16, 2, 8, 8}).clamp(-2.5, 2.5);  // inside the calibrated input range
    Tensor got = int8->forward(x);
    // The simulation: the same qparams applied in float (observers frozen, fake-quant on).
    prepared->enable_observers(false);
    prepared->enable_fake_quant(true);
    Tensor simulated = (*prepared)(x);
    Tensor reference = (*net)(x);
    // Integer and float rounding of the same grid differ by at most a step where a value sits on
    // a rounding boundary; on average they agree far more closely than either does with float.
    const double sim_err = (got - simulated).abs().mean().item<double>();
    const double float_err = (got - reference).abs().mean().item<double>();
    const double scale = reference.abs().mean().item<double>();
    CHECK(sim_err < 0.01 * scale);
    CHECK(float_err < 0.1 * scale);
    CHECK(got.argmax(-1).eq(reference.argmax(-1)).to(DType::Float32).mean().item<double>() >= 0.75);
  }
}

TEST_CASE("quantized model files: round trip, no float weights, and damaged files rejected with the field") {
  manual_seed(5);
  ScratchDir dir("quant_files");
  nn::SmallCNN cnn(1, 4, 8);
  cnn.eval();
  auto prepared = quant::prepare(cnn, quant::QConfig{.activation_method = "percentile", .per_channel = true});
  calibrate(*prepared, {8, 1, 8, 8});
  auto int8 = quant::convert(*prepared);
  const fs::path path = dir.path() / "m.int8.safetensors";
  int8->save(path, {{"note", "kept"}});
  auto loaded = quant::QuantizedModel::load(path);
  NoGradGuard no_grad;
  Tensor x = randn({5, 1, 8, 8});
  CHECK(max_abs_diff(loaded->forward(x), int8->forward(x)) == 0.0);
  CHECK(loaded->metadata().at("note") == "kept");
  CHECK(loaded->metadata().at(nn::kArchitectureKey) == nn::architecture_json(cnn));

  nn::SafetensorsFile file = nn::load_safetensors(path);
  int64_t float_weights = 0, int8_weights = 0;
  for (const auto& [name, t] : file.tensors) {
    if (name.ends_with(".weight")) (t.dtype() == DType::Int8 ? int8_weights : float_weights) += t.numel();
  }
  CHECK(float_weights == 0);
  CHECK(int8_weights == cnn.c1.weight.numel() + cnn.c2.weight.numel() + cnn.fc.weight.numel());
  // About 4x smaller than the float parameters (biases and scales stay f32).
  CHECK(static_cast<double>(cnn.num_parameters() * 4) / static_cast<double>(int8->weight_bytes()) > 3.5);

  // Damage one thing at a time; each load names it.
  auto spec = nlohmann::json::parse(file.metadata.at(quant::kQuantizedModelKey));
  auto damaged = [&](const std::function<void(nlohmann::json&, nn::StateDict&)>& damage) {
    nlohmann::json s = spec;
    nn::StateDict tensors = file.tensors;
    damage(s, tensors);
    auto metadata = file.metadata;
    metadata[quant::kQuantizedModelKey] = s.dump();
    const fs::path bad = dir.path() / "bad.safetensors";
    nn::save_safetensors(bad, tensors, metadata);
    try {
      quant::QuantizedModel::load(bad);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("loaded");
  };
  CHECK(damaged([](auto& s, auto&) { s["stages"][0]["input"]["scale"] = -1.0; }).find("positive finite") !=
        std::string::npos);
  CHECK(damaged([](auto& s, auto&) { s["stages"][0]["input"]["zero_point"] = 300; }).find("zero_point") !=
        std::string::npos);
  CHECK(damaged([](auto& s, auto&) { s["stages"][1]["kind"] = "avg_pool"; }).find("unknown kind") !=
        std::string::npos);
  CHECK(damaged([](auto& s, auto&) { s["format"] = 7; }).find("format 7") != std::string::npos);
  CHECK(damaged([](auto&, auto& t) { t.set("stages.0.weight", t.at("stages.0.weight").to(DType::Float32)); })
            .find("'stages.0.weight' must be int8") != std::string::npos);
  CHECK(damaged([](auto&, auto& t) { t.set("stages.5.weight_scale", full({4}, 0.0)); }).find("weight_scale") !=
        std::string::npos);
  CHECK(damaged([](auto&, auto& t) {
          nn::StateDict without;
          for (const auto& [name, tensor] : t)
            if (name != "stages.2.bias") without.insert(name, tensor);
          t = without;
        }).find("'stages.2.bias' is missing") != std::string::npos);
  CHECK(damaged([](auto&, auto& t) { t.insert("extra", zeros({1})); }).find("holds") != std::string::npos);
  // A float model file is not a quantized one.
  nn::save_model(dir.path() / "float.safetensors", cnn);
  CHECK_THROWS_WITH_AS(quant::QuantizedModel::load(dir.path() / "float.safetensors"),
                       doctest::Contains("not a quantized model"), Error);
}

TEST_CASE("quantized model files: 3000 randomly damaged copies load or fail with loom::Error, never crash") {
  manual_seed(7);
  ScratchDir dir("quant_mutants");
  nn::SmallCNN cnn(1, 3, 8);
  cnn.eval();
  auto prepared = quant::prepare(cnn);
  calibrate(*prepared, {4, 1, 8, 8});
  const fs::path path = dir.path() / "m.safetensors";
  quant::convert(*prepared)->save(path);
  const std::string original = nn::read_file(path);
  const uint64_t header_end = 8 + *reinterpret_cast<const uint64_t*>(original.data());
  std::mt19937_64 rng(1234);
  int loaded = 0, rejected = 0;
  NoGradGuard no_grad;
  const Tensor x = randn({2, 1, 8, 8});
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bytes = original;
    // Mostly the header (where the structure is), sometimes the tensor data, sometimes a cut.
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const uint64_t limit = rng() % 4 == 0 ? bytes.size() : header_end;
      bytes[rng() % limit] = static_cast<char>(rng() % 256);
    }
    if (rng() % 10 == 0) bytes.resize(rng() % bytes.size());
    try {
      auto model = quant::QuantizedModel::from_safetensors(nn::load_safetensors_from_bytes(bytes, "mutant"), "mutant");
      model->forward(x);  // whatever survived validation must also run
      ++loaded;
    } catch (const Error&) {
      ++rejected;
    }
  }
  MESSAGE("mutants: " << loaded << " loaded, " << rejected << " rejected");
  CHECK(loaded + rejected == 3000);
  CHECK(rejected > 1000);
}

TEST_CASE("QAT: fake-quantized training lowers the loss and trains the weights through the STE") {
  manual_seed(6);
  // Two Gaussian blobs per class in 8 dimensions: learnable by a small MLP.
  Tensor centers = randn({4, 8}) * 2.0;
  Tensor labels = randint(0, 4, {256}, DType::Int64);
  Tensor x = centers.index_select(0, labels) + randn({256, 8}) * 0.5;
  nn::MLP mlp({8, 16, 4});
  auto qat = quant::prepare_qat(mlp, quant::QConfig{.activation_method = "moving_average"});
  CHECK(qat->is_training());
  nn::SGD sgd(qat->parameters(), nn::SGDOptions{.lr = 0.1, .momentum = 0.9});
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    sgd.zero_grad();
    Tensor loss = nn::functional::cross_entropy((*qat)(x), labels);
    loss.backward();
    sgd.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  CHECK(last < 0.5 * first);
  // The float model it came from is untouched.
  CHECK_FALSE(mlp.at<nn::Linear>(0).weight.grad().defined());
  qat->eval();
  auto int8 = quant::convert(*qat);
  NoGradGuard no_grad;
  const double acc = int8->forward(x).argmax(-1).eq(labels).to(DType::Float32).mean().item<double>();
  CHECK(acc > 0.9);
}

}  // namespace
}  // namespace loom::test
