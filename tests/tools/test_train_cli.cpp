/*
 * tools/train: option parsing (defaults, a config file under command-line flags, bad values)
 * and small end-to-end runs on a tiny HDF5 image dataset:
 * the run directory's files, and a run stopped at step k and resumed ending bit-identical to
 * one that was never stopped.
 */
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/random.h"
#include "data/dataset_writer.h"
#include "nn/models/gpt.h"
#include "nn/models/mlp.h"
#include "nn/models/model_file.h"
#include "nn/serialize/checkpoint.h"
#include "ops/ops.h"
#include "tests/tools/train_options_test_util.h"
#include "tools/train/model_setup.h"
#include "tools/train/options.h"
#include "tools/train/run_data.h"
#include "tools/train/trainer.h"

namespace loom::test {
namespace {

namespace fs = std::filesystem;
using train::TrainOptions;

TrainOptions parse(std::initializer_list<const char*> args) { return parse_train(args); }
std::string parse_error(std::initializer_list<const char*> args) { return train_parse_error(args); }

fs::path scratch(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("loom_train_cli_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// 72 random 1x8x8 images in 4 classes: 5 batches of 16 per epoch, the last one of 8.
fs::path tiny_dataset(const fs::path& dir) {
  Generator g(42);
  Tensor images = randint(0, 256, {72, 1, 8, 8}, DType::UInt8, &g);
  Tensor labels = randint(0, 4, {72}, DType::Int64, &g);
  data::DatasetInfo info;
  info.name = "tiny";
  info.class_names = {"a", "b", "c", "d"};
  fs::path path = dir / "tiny.h5";
  data::write_image_dataset(path.string(), images, labels, info, {.chunk_rows = 16});
  return path;
}

std::vector<std::string> read_lines(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool bitwise_equal(const nn::StateDict& a, const nn::StateDict& b) {
  if (a.keys() != b.keys()) return false;
  for (const auto& [name, t] : a) {
    const Tensor& u = b.at(name);
    if (t.dtype() != u.dtype() || t.sizes() != u.sizes()) return false;
    Tensor tc = t.contiguous(), uc = u.contiguous();
    if (std::memcmp(tc.data_ptr(), uc.data_ptr(), tc.nbytes()) != 0) return false;
  }
  return true;
}

train::TrainSummary run(const TrainOptions& options) {
  std::ostringstream log;
  return train::run_training(options, log, /*interactive=*/false);
}

}  // namespace

TEST_CASE("train options: defaults") {
  TrainOptions o = parse({"--data", "x.h5", "--out", "run"});
  CHECK(o.model == train::ModelKind::kMlp);
  CHECK(o.hidden == "512,512");
  CHECK(o.epochs == 1);
  CHECK(o.batch == 64);
  CHECK(o.optimizer == train::OptimizerKind::kSgd);
  CHECK(o.schedule == train::LrSchedule::kCosine);
  CHECK(o.amp == train::AmpMode::kOff);
  CHECK(o.device == train::DeviceKind::kCpu);
  CHECK(o.grad_accum == 1);
  CHECK(o.out == "run");
  CHECK(train::parse_hidden("300,100,7") == std::vector<int64_t>{300, 100, 7});
}

TEST_CASE("train options: a config file gives values and command-line flags override them") {
  fs::path dir = scratch("config");
  {
    std::ofstream f(dir / "run.json");
    f << R"({"model": "cnn", "epochs": 3, "lr": 0.125, "optimizer": "adamw", "data": "a.h5", "out": "ignored"})";
  }
  std::string config = (dir / "run.json").string();
  TrainOptions o = parse({"--config", config.c_str(), "--epochs", "5", "--out", "run"});
  CHECK(o.model == train::ModelKind::kCnn);
  CHECK(o.lr == 0.125);
  CHECK(o.optimizer == train::OptimizerKind::kAdamW);
  CHECK(o.data == "a.h5");
  CHECK(o.epochs == 5);  // the flag wins over the file
  CHECK(o.out == "run");

  // config.json round-trips: the resolved options read back as the same options.
  {
    std::ofstream f(dir / "config.json");
    f << train::to_json(o).dump();
  }
  std::string again = (dir / "config.json").string();
  TrainOptions p = parse({"--config", again.c_str(), "--out", "run"});
  CHECK(train::to_json(p) == train::to_json(o));

  {
    std::ofstream f(dir / "bad.json");
    f << R"({"epochz": 3})";
  }
  std::string bad = (dir / "bad.json").string();
  CHECK(parse_error({"--config", bad.c_str(), "--data", "a.h5", "--out", "r"})
            .find("unknown option 'epochz'") != std::string::npos);
  CHECK(parse_error({"--config", (dir / "missing.json").string().c_str()}).find("cannot read config file") !=
        std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("train options: every word of the one-word options parses, and config.json writes it back") {
  const std::vector<std::pair<std::string, std::vector<std::string>>> options{
      {"model", {"mlp", "cnn", "resnet", "gpt"}},
      {"optimizer", {"sgd", "adam", "adamw"}},
      {"schedule", {"none", "cosine", "step", "linear", "onecycle"}},
      {"amp", {"none", "bf16", "fp16"}},
      {"pipeline-schedule", {"gpipe", "1f1b"}}};
  for (const auto& [key, words] : options)
    for (const std::string& word : words) {
      const std::string flag = "--" + key;
      // config.json keeps --pipeline-schedule only with --pp.
      TrainOptions o = key == "pipeline-schedule"
                           ? parse({"--data", "x.h5", "--out", "r", "--pp", "2", flag.c_str(), word.c_str()})
                           : parse({"--data", "x.h5", "--out", "r", flag.c_str(), word.c_str()});
      CHECK_MESSAGE(train::to_json(o).at(key) == word, flag, " ", word);
    }
  CHECK(train::to_string(train::DeviceKind::kCpu) == "cpu");
  CHECK(train::to_string(train::DeviceKind::kCuda) == "cuda");
  // Without a GPU, --device cuda gets as far as the check that there is one.
  const std::string cuda = parse_error({"--data", "x.h5", "--out", "r", "--device", "cuda"});
  CHECK((cuda.empty() || cuda.find("--device cuda: ") != std::string::npos));
}

TEST_CASE("train options: bad values are errors that name the flag") {
  CHECK(parse_error({"--data", "x.h5", "--out", "r", "--optimizer", "lion"}).find("--optimizer") !=
        std::string::npos);
  CHECK(parse_error({"--data", "x.h5", "--out", "r", "--epochs", "0"}).find("--epochs") != std::string::npos);
  CHECK(parse_error({"--data", "x.h5", "--out", "r", "--hidden", "64,x"}).find("--hidden") !=
        std::string::npos);
  CHECK(parse_error({"--data", "x.h5", "--out", "r", "--amp", "fp8"}).find("--amp") != std::string::npos);
  CHECK(parse_error({"--data", "x.h5", "--out", "r", "--frobnicate"}).find("frobnicate") !=
        std::string::npos);
  CHECK(parse_error({"--out", "r"}).find("--data") != std::string::npos);
  CHECK(parse_error({"--data", "x.h5"}).find("--out") != std::string::npos);
  CHECK(parse_error({"--data", "x.h5", "--out", "r", "--model", "gpt", "--d-model", "30", "--heads", "4"})
            .find("divisible") != std::string::npos);
  CHECK(parse_error({"--data", "x.h5", "--out", "r"}).empty());
  CHECK(parse_error({"--data", "x.h5", "--out", "r", "--model", "gpt", "--gelu", "fast"}).find("--gelu") !=
        std::string::npos);
  CHECK(parse_error({"--data", "x.h5", "--out", "r", "--gelu", "tanh"})
            .find("--gelu: only --model gpt has GELU layers (the mlp has none)") != std::string::npos);
}

TEST_CASE("train options: --gelu tanh builds GPT-2's GELU, and config.json keeps it only when set") {
  TrainOptions o = parse({"--data", "x.h5", "--out", "r", "--model", "gpt", "--gelu", "tanh"});
  CHECK(o.gelu == "tanh");
  CHECK(train::to_json(o).at("gelu") == "tanh");
  CHECK_FALSE(train::to_json(parse({"--data", "x.h5", "--out", "r", "--model", "gpt"})).contains("gelu"));
  train::Data data;
  data.vocab = 11;
  auto gpt = std::dynamic_pointer_cast<nn::GPT>(train::make_model(o, data));
  REQUIRE(gpt != nullptr);
  CHECK(gpt->config().gelu_approximate == "tanh");
}

TEST_CASE("train options: --cuda-graph needs --device cuda and refuses what a captured step cannot hold") {
  CHECK(parse_error({"--data", "x.h5", "--out", "r", "--cuda-graph"})
            .find("--cuda-graph needs --device cuda") != std::string::npos);
  // Built without CUDA (or without a GPU), --device cuda is refused first; with one, each flag.
  auto refused = [](std::vector<const char*> extra, const std::string& expected) {
    std::vector<const char*> args{"--data", "x.h5", "--out", "r", "--device", "cuda", "--cuda-graph"};
    args.insert(args.end(), extra.begin(), extra.end());
    const std::string message = train_parse_error(args);
    CAPTURE(message);
    CHECK((message.find("--device cuda: ") != std::string::npos ||
           message.find(expected) != std::string::npos));
  };
  refused({"--grad-accum", "2"}, "--cuda-graph with --grad-accum 2");
  refused({"--dp", "2"}, "--cuda-graph: the step of a distributed run");
  // Dropout is captured: each replay draws its own masks (tests/cuda/test_cuda_graph_random.cpp).
  const std::string with_dropout = train_parse_error({"--data", "x.h5", "--out", "r", "--device", "cuda",
                                                      "--cuda-graph", "--model", "gpt", "--dropout", "0.1"});
  CAPTURE(with_dropout);
  CHECK((with_dropout.empty() || with_dropout.find("--device cuda: ") != std::string::npos));
  // So is fp16's loss scaling: each replay skips its own inf/NaN step on the GPU
  // (tests/cuda/test_cuda_grad_scaler.cpp).
  const std::string with_fp16 = train_parse_error(
      {"--data", "x.h5", "--out", "r", "--device", "cuda", "--cuda-graph", "--amp", "fp16"});
  CAPTURE(with_fp16);
  CHECK((with_fp16.empty() || with_fp16.find("--device cuda: ") != std::string::npos));
  CHECK(train::to_json(parse({"--data", "x.h5", "--out", "r"})).contains("cuda-graph") == false);
}

// (--tp, --pp, --microbatches, --pipeline-schedule, --zero: tests/tools/test_train_options_parallel.cpp)

TEST_CASE("train options: --dp takes a positive number of ranks") {
  CHECK(parse_error({"--data", "x.h5", "--out", "r", "--dp", "2"}).empty());
  CHECK(parse_error({"--data", "x.h5", "--out", "r", "--dp", "0"}).find("--dp") != std::string::npos);
}

TEST_CASE("train: a tiny mlp run writes config, metrics, checkpoints and refuses another run's directory") {
  fs::path dir = scratch("e2e");
  std::string data = tiny_dataset(dir).string(), out = (dir / "run").string();
  TrainOptions o =
      parse({"--data", data.c_str(), "--val", data.c_str(), "--hidden", "16", "--batch", "16", "--epochs",
             "2", "--workers", "0", "--log-every", "1", "--checkpoint-every", "4", "--out", out.c_str()});
  train::TrainSummary summary = run(o);
  CHECK(summary.steps == 10);
  CHECK(summary.epochs == 2);
  REQUIRE(summary.val_accuracy.has_value());
  CHECK(*summary.val_accuracy >= 0.0);
  CHECK(*summary.val_accuracy <= 1.0);

  std::vector<std::string> lines = read_lines(fs::path(out) / "metrics.jsonl");
  int train_lines = 0, val_lines = 0;
  int64_t last_step = 0;
  for (const std::string& line : lines) {
    auto j = nlohmann::json::parse(line);
    if (j["kind"] == "train") {
      ++train_lines;
      CHECK(j["step"].get<int64_t>() == last_step + 1);
      last_step = j["step"].get<int64_t>();
      CHECK(j["throughput_unit"] == "samples/s");
      CHECK(std::isfinite(j["loss"].get<double>()));
      CHECK(j.contains("lr"));
      CHECK(j.contains("time_s"));
      CHECK(j["epoch"].get<double>() > 0.0);
    } else {
      CHECK(j["kind"] == "val");
      ++val_lines;
      CHECK(j["epoch"].get<int64_t>() == val_lines);
      CHECK(j["step"].get<int64_t>() == 5 * val_lines);
      CHECK(j["val_accuracy"].get<double>() >= 0.0);
    }
  }
  CHECK(train_lines == 10);
  CHECK(val_lines == 2);
  CHECK(fs::exists(fs::path(out) / "config.json"));
  nn::CheckpointManager checkpoints(out);
  CHECK(checkpoints.steps() == std::vector<int64_t>{4, 8, 10});
  auto latest = checkpoints.load_latest();
  REQUIRE(latest.has_value());
  for (const char* section : {"model", "optimizer", "schedule", "rng", "loader"})
    CHECK(latest->sections.count(section) == 1);

  // The same config again may replace the run; another one needs --force.
  CHECK_NOTHROW(run(o));
  TrainOptions other = o;
  other.lr = 0.5;
  CHECK_THROWS_AS(run(other), train::InputError);
  other.force = true;
  CHECK_NOTHROW(run(other));

  // A run directory that cannot be created is an input error that names it.
  TrainOptions nowhere = o;
  nowhere.out = (fs::path(out) / "config.json" / "run").string();  // under a file
  try {
    run(nowhere);
    FAIL("expected an input error");
  } catch (const train::InputError& e) {
    CHECK(std::string(e.what()).find("cannot create the run directory") != std::string::npos);
  }

  // A model that does not fit the data is an input error.
  TrainOptions gpt = o;
  gpt.model = train::ModelKind::kGpt;
  gpt.force = true;
  CHECK_THROWS_AS(run(gpt), train::InputError);
  fs::remove_all(dir);
}

TEST_CASE("train: model.safetensors rebuilds the model; --teacher distils from one and checks it fits") {
  fs::path dir = scratch("teacher");
  std::string data = tiny_dataset(dir).string(), teacher_dir = (dir / "teacher").string();
  TrainOptions t = parse({"--data", data.c_str(), "--val", data.c_str(), "--hidden", "32,32", "--batch", "16",
                          "--workers", "0", "--out", teacher_dir.c_str()});
  run(t);
  const fs::path teacher_file = fs::path(teacher_dir) / "model.safetensors";
  nn::LoadedModel teacher = nn::load_model(teacher_file);
  CHECK(teacher.model->type_name() == "MLP");
  CHECK(teacher.metadata.count(nn::kInputNormalizationKey) == 1);
  auto saved = nn::CheckpointManager(teacher_dir).load_latest();
  REQUIRE(saved.has_value());
  for (const auto& [name, tensor] : teacher.model->state_dict())
    CHECK(tensor.eq(saved->sections.at("model").at(name)).sum().item<int64_t>() == tensor.numel());

  std::string student_dir = (dir / "student").string(), teacher_arg = teacher_file.string();
  TrainOptions s = parse({"--data", data.c_str(), "--val", data.c_str(), "--hidden", "8", "--batch", "16",
                          "--workers", "0", "--teacher", teacher_arg.c_str(), "--kd-alpha", "0.5",
                          "--out", student_dir.c_str()});
  train::TrainSummary summary = run(s);
  CHECK(summary.steps == 5);
  std::ifstream config_file(fs::path(student_dir) / "config.json");
  auto config = nlohmann::json::parse(config_file);
  CHECK(config["teacher"] == teacher_arg);
  CHECK(config["kd-alpha"].get<double>() == 0.5);

  // A teacher that predicts another number of classes, and one that is not a model file.
  nn::MLP wrong({64, 16, 7});
  nn::save_model(dir / "wrong.safetensors", wrong);
  s.teacher = (dir / "wrong.safetensors").string();
  s.force = true;
  try {
    run(s);
    FAIL("expected an input error");
  } catch (const train::InputError& e) {
    CHECK(std::string(e.what()).find("outputs [1, 7] for one example, but the mlp student predicts 4 classes") !=
          std::string::npos);
  }
  s.teacher = (dir / "nope.safetensors").string();
  CHECK_THROWS_AS(run(s), train::InputError);
  fs::remove_all(dir);
}

TEST_CASE("train: a run stopped at step k and resumed ends bit-identical to an uninterrupted run") {
  fs::path dir = scratch("resume");
  std::string data = tiny_dataset(dir).string();
  std::string straight = (dir / "straight").string(), stopped = (dir / "stopped").string();
  // Shuffling, two workers, adamw, warm-up + cosine, clipping and gradient accumulation: every
  // piece of state that a resume must bring back. 5 batches per epoch, 3 steps (2 + 2 + 1).
  auto options = [&](const std::string& out) {
    return parse({"--data",
                  data.c_str(),
                  "--hidden",
                  "16,16",
                  "--batch",
                  "16",
                  "--epochs",
                  "3",
                  "--workers",
                  "2",
                  "--optimizer",
                  "adamw",
                  "--lr",
                  "0.01",
                  "--warmup",
                  "2",
                  "--clip",
                  "0.5",
                  "--grad-accum",
                  "2",
                  "--seed",
                  "3",
                  "--checkpoint-every",
                  "2",
                  "--log-every",
                  "1",
                  "--out",
                  out.c_str()});
  };
  run(options(straight));

  TrainOptions first = options(stopped);
  first.max_steps = 4;  // stops in the second epoch, after its first step
  CHECK(run(first).steps == 4);
  // The resume starts from the stopped run's config.json, as on the command line.
  std::string resume_dir = stopped;
  TrainOptions resumed = parse({"--resume", resume_dir.c_str(), "--workers", "0"});
  CHECK(resumed.out == stopped);
  CHECK(resumed.epochs == 3);
  CHECK(run(resumed).steps == 9);

  auto final_model = [](const std::string& out) {
    return nn::CheckpointManager(out).load_latest()->sections.at("model");
  };
  auto final_optimizer = [](const std::string& out) {
    return nn::CheckpointManager(out).load_latest()->sections.at("optimizer");
  };
  CHECK(bitwise_equal(final_model(straight), final_model(stopped)));
  CHECK(bitwise_equal(final_optimizer(straight), final_optimizer(stopped)));
  // The metrics of the resumed run continue those of the stopped one, without repeats.
  CHECK(read_lines(fs::path(straight) / "metrics.jsonl").size() ==
        read_lines(fs::path(stopped) / "metrics.jsonl").size());

  // Negative control: a different seed gives different parameters, so the comparison is sharp.
  TrainOptions other = options((dir / "other").string());
  other.seed = 4;
  run(other);
  CHECK_FALSE(bitwise_equal(final_model(straight), final_model((dir / "other").string())));
  fs::remove_all(dir);
}

}  // namespace loom::test
