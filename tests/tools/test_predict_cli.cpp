/*
 * tools/predict end to end, through the built binary (its exit status and output are part of
 * what is tested): a CNN trained by `train` and its INT8 version from `quantize` score a tiny
 * image set, a GPT a tiny text, and the predictions file is compared with a direct forward pass
 * of the same model on the same samples, the accuracy with a count by hand, the perplexity with
 * exp(mean cross-entropy) computed here in float64, and h5py's reading of the file with Loom's.
 * Every bad input is an error that names it, with exit status 2 and nothing written; on
 * emulated CUDA, --device cuda gives the CPU's predictions.
 */
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/grad_mode.h"
#include "data/data.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "quant/quant.h"
#include "tests/data/hdf5_columns.h"
#include "tests/gpu_test.h"
#include "tests/test_util.h"
#include "tests/tools/quantize_fixtures.h"
#include "tools/quantize/quantizer.h"

namespace loom::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct CliResult {
  int status = -1;
  std::string output;  // stdout and stderr
};

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Runs the predict binary with `args` (each quoted), capturing its output in `dir`.
CliResult run_predict(const fs::path& dir, const std::vector<std::string>& args) {
  std::string command = std::string("'") + LOOM_PREDICT_BIN + "'";
  for (const std::string& a : args) command += " '" + a + "'";
  const fs::path log = dir / "predict.log";
  command += " > '" + log.string() + "' 2>&1";
  const int raw = std::system(command.c_str());
  CliResult r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.output = read_text(log);
  return r;
}

// The test images as the model takes them: (x / 255 - mean) / std with the model file's values.
Tensor normalized_images(const fs::path& set, const std::map<std::string, std::string>& metadata) {
  data::Hdf5ImageDataset images(set.string());
  const json norm = json::parse(metadata.at(nn::kInputNormalizationKey));
  const double mean = norm["mean"][0], std = norm["std"][0];  // one channel
  return images.images(0, images.size()).to(kFloat32).div(255.0).sub(mean).div(std);
}

void check_logits_close(const Tensor& actual, const Tensor& expected) {
  REQUIRE(actual.sizes() == expected.sizes());
  const double worst = actual.sub(expected).abs().max().item<double>();
  const double scale = std::max(1.0, expected.abs().max().item<double>());
  CHECK(worst <= 1e-5 * scale);
}

// What the files tested here share: a tiny image set and a CNN trained on it.
struct ImageFixture {
  ScratchDir dir{"predict_cli"};
  fs::path train_set = quadrant_dataset(dir.path(), "train", 64, 1, 8, 1);
  fs::path test_set = quadrant_dataset(dir.path(), "test", 40, 1, 8, 2);
  fs::path model = trained_model(dir.path(), "cnn", train_set, test_set);
};

// Runs predict with --logits at batch 16 (40 = 16 + 16 + 8: a short last batch) and checks the
// file against `forward` over all test images at once, and the accuracy against the labels.
void check_predictions(const ImageFixture& f, const fs::path& model_file, const Tensor& expected_logits,
                       const std::vector<std::string>& extra_args = {}) {
  const fs::path out = f.dir.path() / "p.h5";
  std::vector<std::string> args{"--model",    model_file.string(), "--data", f.test_set.string(), "--out",
                                out.string(), "--batch-size",      "16",     "--logits",          "--force"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  const CliResult r = run_predict(f.dir.path(), args);
  INFO(r.output);
  REQUIRE(r.status == 0);
  check_logits_close(read_column(out, "logits", kFloat32), expected_logits);
  const Tensor classes = read_column(out, "class", kInt64);
  CHECK(classes.to_vector<int64_t>() == expected_logits.argmax(-1).to_vector<int64_t>());
  const Tensor probability = read_column(out, "probability", kFloat32);
  check_logits_close(probability, expected_logits.softmax(-1).amax({-1}));
  CHECK(read_column(out, "index", kInt64).to_vector<int64_t>() == arange(40, kInt64).to_vector<int64_t>());

  // The accuracy, counted by hand.
  data::Hdf5ImageDataset test(f.test_set.string());
  const std::vector<int64_t> predicted = classes.to_vector<int64_t>(),
                             labels = test.labels().to_vector<int64_t>();
  int64_t correct = 0;
  for (size_t i = 0; i < labels.size(); ++i) correct += predicted[i] == labels[i];
  char accuracy[64];
  std::snprintf(accuracy, sizeof accuracy, "accuracy %.2f%% (%d of 40)",
                100.0 * static_cast<double>(correct) / 40, static_cast<int>(correct));
  CHECK(r.output.find(accuracy) != std::string::npos);
  CHECK(r.output.find("samples/s") != std::string::npos);
  auto file = data::Hdf5File::open(out.string());
  CHECK(file->string_attribute("model").value() == model_file.string());
}

Tensor float_forward(const fs::path& model_file, const fs::path& set) {
  nn::LoadedModel m = nn::load_model(model_file);
  m.model->eval();
  NoGradGuard no_grad;
  return (*m.model)(normalized_images(set, m.metadata));
}

TEST_CASE(
    "predict: f32 CNN predictions equal a direct forward pass, accuracy a count by hand, and h5py reads "
    "them") {
  ImageFixture f;
  check_predictions(f, f.model, float_forward(f.model, f.test_set));

  // h5py sees the same shapes, dtypes and values.
  if (std::system("/usr/bin/python3 -c 'import h5py' >/dev/null 2>&1") != 0) {
    std::cout << "[skipped: no python3/h5py] " << __FILE__ << ":" << __LINE__ << std::endl;
    return;
  }
  const fs::path out = f.dir.path() / "p.h5";
  const std::string command = std::string("/usr/bin/python3 '") + LOOM_SOURCE_DIR +
                              "/tests/tools/predictions_h5py.py' '" + out.string() + "' > '" +
                              (f.dir.path() / "h5py.json").string() + "'";
  REQUIRE(std::system(command.c_str()) == 0);
  const json j = json::parse(read_text(f.dir.path() / "h5py.json"));
  const json& d = j["datasets"];
  CHECK(d["class"]["shape"] == json::array({40}));
  CHECK(d["class"]["dtype"] == "int64");
  CHECK(d["probability"]["shape"] == json::array({40}));
  CHECK(d["probability"]["dtype"] == "float32");
  CHECK(d["logits"]["shape"] == json::array({40, 4}));
  CHECK(d["logits"]["dtype"] == "float32");
  CHECK(d["target"]["dtype"] == "int64");
  CHECK(d["class"]["values"].get<std::vector<int64_t>>() ==
        read_column(out, "class", kInt64).to_vector<int64_t>());
  CHECK(d["target"]["values"].get<std::vector<int64_t>>() ==
        data::Hdf5ImageDataset(f.test_set.string()).labels().to_vector<int64_t>());
  const std::vector<float> p = read_column(out, "probability", kFloat32).to_vector<float>();
  const std::vector<float> p_h5py = d["probability"]["values"].get<std::vector<float>>();
  CHECK(p == p_h5py);
  CHECK(j["attrs"]["examples"] == 40.0);
  CHECK(j["attrs"]["model_kind"] == "f32");
  CHECK(j["attrs"]["accuracy"].get<double>() >= 0.0);

  // Without --logits there is no logits dataset.
  const CliResult r = run_predict(f.dir.path(), {"--model", f.model.string(), "--data", f.test_set.string(),
                                                 "--out", out.string(), "--force", "--no-progress"});
  REQUIRE(r.status == 0);
  CHECK_FALSE(data::Hdf5File::open(out.string())->has_dataset("logits"));
}

// The fixture's model quantized by tools/quantize (PTQ, 2 calibration batches); its file.
std::string quantized(const ImageFixture& f) {
  quantize::QuantizeOptions q;
  q.model = f.model.string();
  q.calib = f.train_set.string();
  q.out = (f.dir.path() / "cnn.int8.safetensors").string();
  q.batch = 16;
  q.calib_batches = 2;
  std::ostringstream log;
  quantize::run_quantize(q, log);
  return q.out;
}

Tensor int8_forward(const std::string& file, const fs::path& set) {
  auto int8 = quant::QuantizedModel::load(file);
  NoGradGuard no_grad;
  return int8->forward(normalized_images(set, int8->metadata()));
}

TEST_CASE("predict: an INT8 model from quantize predicts what the INT8 model does directly") {
  ImageFixture f;
  const std::string int8 = quantized(f);
  check_predictions(f, int8, int8_forward(int8, f.test_set));
  CHECK(data::Hdf5File::open((f.dir.path() / "p.h5").string())->string_attribute("model_kind").value() ==
        "int8");
}

TEST_CASE("predict: a GPT's perplexity over a text is exp(mean cross-entropy) computed independently") {
  ScratchDir dir("predict_gpt");
  // A text of 4 words over 10 characters, 150 tokens: windows of 8 tokens every 8.
  Generator g(5);
  const std::vector<std::string> words{"ab ", "cde ", "fg ", "hij "};
  std::vector<int64_t> stream;
  while (stream.size() < 150) {
    const std::string& w = words[static_cast<size_t>(randint(0, 4, {1}, kInt64, &g).item<int64_t>())];
    for (char c : w) stream.push_back(c == ' ' ? 0 : c - 'a' + 1);
  }
  stream.resize(150);
  data::DatasetInfo info;
  info.name = "text";
  for (const char* c : {" ", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}) info.vocab.push_back(c);
  const fs::path text = dir.path() / "text.h5";
  data::write_token_dataset(text.string(), tensor(stream), info);
  train::TrainOptions t;
  t.model = train::ModelKind::kGpt;
  t.data = text.string();
  t.context = 8;
  t.layers = 1;
  t.heads = 2;
  t.d_model = 16;
  t.epochs = 2;
  t.batch = 4;
  t.lr = 0.01;
  t.workers = 0;
  t.out = (dir.path() / "run_gpt").string();
  std::ostringstream train_log;
  train::run_training(t, train_log, /*interactive=*/false);
  const fs::path model_file = dir.path() / "run_gpt" / "model.safetensors";

  const fs::path out = dir.path() / "g.h5";
  const CliResult r = run_predict(dir.path(), {"--model", model_file.string(), "--data", text.string(),
                                               "--out", out.string(), "--batch-size", "5", "--logits"});
  INFO(r.output);
  REQUIRE(r.status == 0);

  // Windows i = 0..17: tokens [8i, 8i + 8) predict [8i + 1, 8i + 9).
  const int64_t windows = (150 - 9) / 8 + 1;
  nn::LoadedModel m = nn::load_model(model_file);
  m.model->eval();
  NoGradGuard no_grad;
  double nll = 0;
  int64_t correct = 0;
  for (int64_t w = 0; w < windows; ++w) {
    const std::vector<int64_t> window(stream.begin() + 8 * w, stream.begin() + 8 * w + 9);
    const Tensor input = tensor(std::vector<int64_t>(window.begin(), window.end() - 1), {1, 8});
    const std::vector<float> logits = (*m.model)(input).to_vector<float>();  // [1, 8, 11]
    for (int64_t p = 0; p < 8; ++p) {
      const float* l = logits.data() + p * 11;
      double top = l[0], sum = 0;
      int64_t best = 0;
      for (int64_t k = 0; k < 11; ++k)
        if (l[k] > top) top = l[k], best = k;
      for (int64_t k = 0; k < 11; ++k) sum += std::exp(static_cast<double>(l[k]) - top);
      nll += top + std::log(sum) - l[window[static_cast<size_t>(p) + 1]];
      correct += best == window[static_cast<size_t>(p) + 1];
    }
  }
  const double perplexity = std::exp(nll / static_cast<double>(windows * 8));
  auto file = data::Hdf5File::open(out.string());
  CHECK(file->describe("class").dims == std::vector<int64_t>{windows, 8});
  CHECK(file->describe("logits").dims == std::vector<int64_t>{windows, 8, 11});
  CHECK(file->describe("target").dims == std::vector<int64_t>{windows, 8});
  REQUIRE(r.output.find("perplexity ") != std::string::npos);
  const double printed = std::stod(r.output.substr(r.output.find("perplexity ") + 11));
  CHECK(printed == doctest::Approx(perplexity).epsilon(1e-4));  // printed with 4 decimals
  CHECK(read_column(out, "class", kInt64).eq(read_column(out, "target", kInt64)).sum().item<int64_t>() ==
        correct);
  CHECK(r.output.find("over " + std::to_string(windows * 8) + " tokens") != std::string::npos);

  // An image model is refused a text, and a language model images.
  const CliResult wrong = run_predict(dir.path(), {"--model", model_file.string(), "--data",
                                                   quadrant_dataset(dir.path(), "img", 8, 1, 8, 1).string(),
                                                   "--out", (dir.path() / "x.h5").string()});
  CHECK(wrong.status == 2);
  CHECK(wrong.output.find("holds images, but the model is a language model") != std::string::npos);
}

TEST_CASE("predict: bad inputs are errors that name the problem, exit 2 and write nothing") {
  ImageFixture f;
  const fs::path out = f.dir.path() / "out.h5";
  auto expect_error = [&](std::vector<std::string> args, const std::string& message) {
    const CliResult r = run_predict(f.dir.path(), args);
    INFO(r.output);
    CHECK(r.status == 2);
    CHECK(r.output.find("predict: error: ") != std::string::npos);
    CHECK(r.output.find(message) != std::string::npos);
    CHECK_FALSE(fs::exists(out));
  };
  const std::string model = f.model.string(), test = f.test_set.string();
  SUBCASE("a model whose input shape does not match the dataset") {
    const fs::path rgb = quadrant_dataset(f.dir.path(), "rgb", 8, 3, 8, 3);
    expect_error({"--model", model, "--data", rgb.string(), "--out", out.string()},
                 "--data " + rgb.string() +
                     " holds examples of shape [3, 8, 8] (images), which the model does not take");
  }
  SUBCASE("a dataset that is missing") {
    expect_error({"--model", model, "--data", (f.dir.path() / "nope.h5").string(), "--out", out.string()},
                 "nope.h5: no such file");
  }
  SUBCASE("a model file that is missing, or not a Loom model") {
    expect_error(
        {"--model", (f.dir.path() / "nope.safetensors").string(), "--data", test, "--out", out.string()},
        "nope.safetensors: no such file");
    std::ofstream(f.dir.path() / "text.safetensors") << "not a model";
    expect_error(
        {"--model", (f.dir.path() / "text.safetensors").string(), "--data", test, "--out", out.string()},
        "text.safetensors: not a Loom model file");
    nn::save_safetensors(f.dir.path() / "bare.safetensors", {{"w", ones({2})}});
    expect_error(
        {"--model", (f.dir.path() / "bare.safetensors").string(), "--data", test, "--out", out.string()},
        "bare.safetensors: not a Loom model file: its metadata has neither 'loom.architecture'");
    expect_error({"--model", test, "--data", test, "--out", out.string()}, "not a Loom model file");
  }
  SUBCASE("an output that exists, without --force: the file is untouched") {
    std::ofstream(out) << "precious";
    const CliResult r = run_predict(f.dir.path(), {"--model", model, "--data", test, "--out", out.string()});
    CHECK(r.status == 2);
    CHECK(r.output.find("--out " + out.string() + ": exists; pass --force to replace it") !=
          std::string::npos);
    CHECK(read_text(out) == "precious");
    CHECK(run_predict(f.dir.path(), {"--model", model, "--data", test, "--out", out.string(), "--force"})
              .status == 0);
    CHECK(data::Hdf5File::open(out.string())->has_dataset("class"));
    fs::remove(out);
  }
  SUBCASE("--device cuda without a GPU") {
    if (!cuda::is_available())
      expect_error({"--model", model, "--data", test, "--out", out.string(), "--device", "cuda"}, "--device cuda: ");
  }
  SUBCASE("a flag that is missing or bad") {
    expect_error({"--model", model, "--data", test}, "--out is required");
    expect_error({"--model", model, "--data", test, "--out", out.string(), "--batch-size", "0"},
                 "--batch-size");
  }
  // No temporary file was left behind by any of them.
  for (const auto& entry : fs::directory_iterator(f.dir.path()))
    CHECK(entry.path().filename().string().find(".tmp") == std::string::npos);
}

TEST_CASE("predict: --device cuda gives the CPU's predictions (emulated CUDA runs it on the CPU)") {
  LOOM_REQUIRE_GPU();
  ImageFixture f;
  check_predictions(f, f.model, float_forward(f.model, f.test_set), {"--device", "cuda"});
  CHECK(data::Hdf5File::open((f.dir.path() / "p.h5").string())->string_attribute("device").value() == "cuda");
  const std::string int8 = quantized(f);  // the INT8 ops on CUDA round as the CPU's kernels do
  check_predictions(f, int8, int8_forward(int8, f.test_set), {"--device", "cuda"});
}

}  // namespace
}  // namespace loom::test
