/*
 * tools/quantize: option parsing and small end-to-end runs on a tiny HDF5 image dataset —
 * a model trained by `train`, calibrated, converted, written, reloaded; QAT with distillation;
 * and the bad inputs (unknown method, architecture mismatch, calibration images of the wrong
 * shape, an existing --out) as errors that name the problem.
 */
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/random.h"
#include "data/dataset_writer.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "quant/quant.h"
#include "tests/test_util.h"
#include "tests/tools/quantize_fixtures.h"
#include "tools/quantize/options.h"
#include "tools/quantize/quantizer.h"
#include "tools/train/options.h"
#include "tools/train/trainer.h"

namespace loom::test {
namespace {

namespace fs = std::filesystem;
using quantize::QuantizeOptions;

std::string parse_error(std::initializer_list<const char*> args) {
  std::vector<const char*> argv{"quantize"};
  argv.insert(argv.end(), args);
  try {
    quantize::parse_options(static_cast<int>(argv.size()), argv.data());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

QuantizeOptions options_for(const fs::path& model, const fs::path& calib, const fs::path& out) {
  QuantizeOptions o;
  o.model = model.string();
  o.calib = calib.string();
  o.out = out.string();
  o.batch = 32;
  o.calib_batches = 4;
  return o;
}

TEST_CASE("quantize options: required flags, methods and value checks") {
  CHECK(parse_error({"--model", "m", "--calib", "c", "--out", "o"}).empty());
  CHECK(parse_error({"--calib", "c", "--out", "o"}).find("--model") != std::string::npos);
  CHECK(parse_error({"--model", "m", "--calib", "c", "--out", "o", "--method", "kl"}).find("kl") != std::string::npos);
  CHECK(parse_error({"--model", "m", "--calib", "c", "--out", "o", "--bits", "9"}).find("--bits") != std::string::npos);
  CHECK(parse_error({"--model", "m", "--calib", "c", "--out", "o", "--teacher", "t"}).find("--qat-epochs") !=
        std::string::npos);
}

TEST_CASE("quantize: a trained MLP and CNN become INT8 files that reload and keep their accuracy") {
  ScratchDir dir("quantize_e2e");
  const fs::path train_set = quadrant_dataset(dir.path(), "train", 512, 1, 8, 1);
  const fs::path test_set = quadrant_dataset(dir.path(), "test", 128, 1, 8, 2);
  for (const std::string model : {"mlp", "cnn"}) {
    CAPTURE(model);
    const fs::path float_file = trained_model(dir.path(), model, train_set, test_set);
    for (const std::string method : {"minmax", "entropy"}) {
      CAPTURE(method);
      QuantizeOptions o = options_for(float_file, train_set, dir.path() / (std::string(model) + ".int8.safetensors"));
      o.method = method;
      o.per_channel = true;
      o.force = true;
      std::ostringstream out;
      quantize::QuantizeSummary s = quantize::run_quantize(o, out);  // --test defaults to the run's --val
      CHECK(out.str().find("accuracy (128 test)") != std::string::npos);
      CHECK(s.test_examples == 128);
      CHECK(s.f32.accuracy > 0.9);
      CHECK(s.ptq.accuracy >= s.f32.accuracy - 0.03);
      CHECK(s.ptq.file_bytes < s.f32.file_bytes);
      CHECK(s.ptq.latency_b1_ms > 0);
      auto loaded = quant::QuantizedModel::load(o.out);
      CHECK(loaded->metadata().count(nn::kInputNormalizationKey) == 1);
      CHECK(out.str().find("INT8 layers (PTQ):") != std::string::npos);
      // The model came from a train run: its report gained a quantization section with a row
      // per INT8 layer.
      const fs::path run = float_file.parent_path();
      REQUIRE(fs::exists(run / "quantization.json"));
      std::ifstream report_file(run / "report.html");
      const std::string report((std::istreambuf_iterator<char>(report_file)), std::istreambuf_iterator<char>());
      CHECK(report.find("<h2>Quantization</h2>") != std::string::npos);
      CHECK(report.find(method + " calibration, per-channel weights") != std::string::npos);
      const size_t begin = report.find("<h3>INT8 layers</h3>");
      REQUIRE(begin != std::string::npos);
      const std::string table = report.substr(begin, report.find("</table>", begin) - begin);
      size_t rows = 0;
      for (size_t at = 0; (at = table.find("</td></tr>", at)) != std::string::npos; ++at) ++rows;
      CHECK(rows == (model == "mlp" ? 2u : 3u));  // MLP 64-32-4: two Linear layers
      CHECK(table.find("f32 (dequantized)") != std::string::npos);
    }
  }
}

TEST_CASE("quantize: QAT with a teacher runs and writes the QAT model") {
  ScratchDir dir("quantize_qat");
  const fs::path train_set = quadrant_dataset(dir.path(), "train", 256, 1, 8, 3);
  const fs::path test_set = quadrant_dataset(dir.path(), "test", 64, 1, 8, 4);
  const fs::path float_file = trained_model(dir.path(), "mlp", train_set, test_set);
  QuantizeOptions o = options_for(float_file, train_set, dir.path() / "qat.safetensors");
  o.bits = 4;
  o.qat_epochs = 2;
  o.qat_lr = 0.01;
  o.teacher = float_file.string();
  std::ostringstream out;
  quantize::QuantizeSummary s = quantize::run_quantize(o, out);
  REQUIRE(s.qat.has_value());
  CHECK(out.str().find("INT8 (QAT)") != std::string::npos);
  CHECK(out.str().find("QAT epoch 2/2") != std::string::npos);
  CHECK(s.qat->accuracy > 0.8);
  CHECK(quant::QuantizedModel::load(o.out)->metadata().at("loom.qat_epochs") == "2");
}

TEST_CASE("quantize: bad inputs are input errors that name the problem") {
  ScratchDir dir("quantize_errors");
  const fs::path train_set = quadrant_dataset(dir.path(), "train", 128, 1, 8, 5);
  const fs::path rgb = quadrant_dataset(dir.path(), "rgb", 32, 3, 8, 6);
  const fs::path float_file = trained_model(dir.path(), "cnn", train_set, train_set);
  auto error_of = [](const QuantizeOptions& o) {
    std::ostringstream out;
    try {
      quantize::run_quantize(o, out);
    } catch (const quantize::InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // Calibration images of another shape.
  CHECK(error_of(options_for(float_file, rgb, dir.path() / "a.safetensors")).find("--calib") != std::string::npos);
  CHECK(error_of(options_for(float_file, rgb, dir.path() / "a.safetensors")).find("3x8x8") != std::string::npos);
  // Weights that do not fit the architecture the file names.
  {
    nn::SafetensorsFile file = nn::load_safetensors(float_file);
    nn::StateDict tensors;
    for (const auto& [name, t] : file.tensors) tensors.insert(name, name == "fc.weight" ? zeros({3, 7}) : t);
    nn::save_safetensors(dir.path() / "mismatch.safetensors", tensors, file.metadata);
    const std::string e = error_of(options_for(dir.path() / "mismatch.safetensors", train_set, dir.path() / "b.st"));
    CHECK(e.find("fc.weight") != std::string::npos);
  }
  // A file without an architecture.
  nn::save_safetensors(dir.path() / "bare.safetensors", nn::SmallCNN(1, 4, 8).state_dict());
  CHECK(error_of(options_for(dir.path() / "bare.safetensors", train_set, dir.path() / "c.st"))
            .find("loom.architecture") != std::string::npos);
  // Missing files, and an --out that exists.
  CHECK(error_of(options_for(dir.path() / "nope.safetensors", train_set, dir.path() / "d.st")).find("no such file") !=
        std::string::npos);
  CHECK(error_of(options_for(float_file, dir.path() / "nope.h5", dir.path() / "d.st")).find("--calib") !=
        std::string::npos);
  CHECK(error_of(options_for(float_file, train_set, float_file)).find("--force") != std::string::npos);
}

}  // namespace
}  // namespace loom::test
