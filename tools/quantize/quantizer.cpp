/* quantize's work (see quantizer.h). */
#include "tools/quantize/quantizer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/cuda.h"
#include "core/grad_mode.h"
#include "core/parallel.h"
#include "core/random.h"
#include "data/data.h"
#include "nn/nn.h"
#include "quant/quant.h"
#include "tools/train/report.h"

namespace loom::quantize {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

[[noreturn]] void fail(const std::string& message) { throw InputError(message); }

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// The normalisation the model was trained with (train records it in the model file).
data::TransformPtr input_transform(const std::map<std::string, std::string>& metadata, std::ostream& out) {
  auto it = metadata.find(nn::kInputNormalizationKey);
  if (it == metadata.end()) {
    out << "quantize: the model file records no input normalisation; feeding images as x / 255\n";
    return std::make_shared<data::Normalize>(std::vector<float>{0.0f}, std::vector<float>{1.0f});
  }
  json j = json::parse(it->second, nullptr, false);
  if (j.is_discarded() || !j.contains("mean") || !j.contains("std") || !j["mean"].is_array() || !j["std"].is_array())
    fail(std::string("the model's '") + nn::kInputNormalizationKey + "' metadata is malformed: " + it->second);
  return std::make_shared<data::Normalize>(j["mean"].get<std::vector<float>>(), j["std"].get<std::vector<float>>());
}

std::shared_ptr<data::Hdf5ImageDataset> open_images(const std::string& path, const char* flag) {
  if (!fs::exists(path)) fail(std::string(flag) + " " + path + ": no such file (make one with make_dataset)");
  try {
    return std::make_shared<data::Hdf5ImageDataset>(path);
  } catch (const Error& e) {
    fail(std::string(flag) + " " + path + ": " + e.what());
  }
}

// The --val file the model was trained with, from the options train recorded.
std::string default_test_file(const std::map<std::string, std::string>& metadata) {
  auto it = metadata.find(nn::kTrainOptionsKey);
  if (it == metadata.end()) return {};
  json j = json::parse(it->second, nullptr, false);
  return j.is_object() ? j.value("val", std::string()) : std::string();
}

// The device --device names (GPU 0 for cuda), or an input error saying why there is none.
Device measurement_device(const QuantizeOptions& o) {
  if (o.device != "cuda") return kCPU;
  if (!LOOM_WITH_CUDA)
    fail("--device cuda: this Loom was built without the CUDA backend (configure with -DLOOM_WITH_CUDA=ON, "
         "or EMULATED to run the CUDA kernels on the CPU)");
  if (!cuda::is_available()) fail("--device cuda: no usable GPU (no CUDA driver or device on this machine); use --device cpu");
  return Device::cuda(0);
}

// Fraction of correct top-1 predictions of `model` (on `device`) on the whole loader.
template <class Model>
double accuracy(Model&& model, data::DataLoader& loader, Device device) {
  NoGradGuard no_grad;
  int64_t correct = 0, total = 0;
  for (data::Batch& batch : loader) {
    Tensor logits = model(batch.data.to(device));
    correct += logits.argmax(-1).eq(batch.target.to(device)).sum().item<int64_t>();
    total += batch.target.numel();
  }
  return total ? static_cast<double>(correct) / static_cast<double>(total) : 0.0;
}

// Median milliseconds per call over 7 samples of at least ~20 ms each, after a warm-up (the
// first INT8 calls create oneDNN primitives, or cuBLASLt plans). On a GPU every call waits for
// its kernels to finish (cuda::synchronize): the latency of one inference, not the launch time.
template <class Fn>
double latency_ms(Fn&& fn_on_device, Device device) {
  NoGradGuard no_grad;
  auto fn = [&] {
    fn_on_device();
    if (device.is_cuda()) cuda::synchronize();
  };
  auto start = Clock::now();
  int calls = 0;
  do {
    fn();
    ++calls;
  } while (seconds_since(start) < 0.1 || calls < 3);
  const int per_sample = std::max(1, static_cast<int>(0.02 / (seconds_since(start) / calls)));
  std::vector<double> samples;
  for (int s = 0; s < 7; ++s) {
    auto t0 = Clock::now();
    for (int i = 0; i < per_sample; ++i) fn();
    samples.push_back(seconds_since(t0) * 1e3 / per_sample);
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

void print_table(const QuantizeSummary& s, const QuantizeOptions& o, std::ostream& out) {
  std::vector<std::pair<std::string, const ModelReport*>> columns{{"f32", &s.f32}, {"INT8 (PTQ)", &s.ptq}};
  if (s.qat) columns.push_back({"INT8 (QAT)", &*s.qat});
  char line[256];
  auto row = [&](const char* label, auto cell) {
    std::snprintf(line, sizeof line, "%-24s", label);
    out << line;
    for (const auto& [name, r] : columns) {
      std::snprintf(line, sizeof line, "%22s", cell(*r).c_str());
      out << line;
    }
    out << "\n";
  };
  auto fmt = [](const char* format, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, format, v);
    return std::string(buf);
  };
  out << "\n";
  std::snprintf(line, sizeof line, "%-24s", "");
  out << line;
  for (const auto& [name, r] : columns) {
    std::snprintf(line, sizeof line, "%22s", name.c_str());
    out << line;
  }
  out << "\n";
  const std::string acc_label = "accuracy (" + std::to_string(s.test_examples) + " test)";
  row(acc_label.c_str(), [&](const ModelReport& r) {
    std::string cell = fmt("%.2f%%", 100 * r.accuracy);
    if (&r != &s.f32) cell += fmt(" (%+.2f)", 100 * (r.accuracy - s.f32.accuracy));
    return cell;
  });
  row("model file", [&](const ModelReport& r) {
    std::string cell = fmt("%.1f KB", static_cast<double>(r.file_bytes) / 1024);
    if (&r != &s.f32) cell += fmt(" (%.1fx)", static_cast<double>(s.f32.file_bytes) / static_cast<double>(r.file_bytes));
    return cell;
  });
  row("latency, batch 1", [&](const ModelReport& r) {
    std::string cell = fmt("%.3f ms", r.latency_b1_ms);
    if (&r != &s.f32) cell += fmt(" (%.1fx)", s.f32.latency_b1_ms / r.latency_b1_ms);
    return cell;
  });
  const std::string batch_label = "latency, batch " + std::to_string(o.batch);
  row(batch_label.c_str(), [&](const ModelReport& r) {
    std::string cell = fmt("%.3f ms", r.latency_batch_ms);
    if (&r != &s.f32) cell += fmt(" (%.1fx)", s.f32.latency_batch_ms / r.latency_batch_ms);
    return cell;
  });
  std::snprintf(line, sizeof line, "\ncalibration: %lld batches of %lld in %.2f s (%s)\n",
                static_cast<long long>(o.calib_batches), static_cast<long long>(o.batch), s.calibration_seconds,
                o.method.c_str());
  out << line;
  if (s.qat) {
    std::snprintf(line, sizeof line, "QAT: %lld epochs in %.1f s%s\n", static_cast<long long>(o.qat_epochs),
                  s.qat_seconds, o.teacher.empty() ? "" : (", distilled from " + o.teacher).c_str());
    out << line;
  }
}

// Per layer: where it came from and the scales it ended with (the report's layer table).
json layers_json(const quant::QuantizedModel& model) {
  json layers = json::array();
  for (const auto& s : model.stages()) {
    if (!s.linear && !s.conv) continue;
    const quant::Int8LayerParams& p = s.linear ? s.linear->params() : s.conv->params();
    const std::vector<float> scales = p.weight_scales.to_vector<float>();
    json layer{{"kind", s.linear ? "linear" : "conv2d"},
               {"source", s.source},
               {"weight_shape", p.weight.sizes().vec()},
               {"input_scale", p.input_scale},
               {"input_zero_point", p.input_zero_point},
               {"weight_scale_min", *std::min_element(scales.begin(), scales.end())},
               {"weight_scale_max", *std::max_element(scales.begin(), scales.end())},
               {"weight_scales", scales.size()},
               {"relu", p.output.relu}};
    if (p.output.dtype == DType::Float32) {
      layer["output"] = "f32";
    } else {
      layer["output_scale"] = p.output.scale;
      layer["output_zero_point"] = p.output.zero_point;
    }
    layers.push_back(layer);
  }
  return layers;
}

// The run directory a model file belongs to (train writes RUN_DIR/model.safetensors next to
// config.json and metrics.jsonl), or empty.
fs::path run_dir_of(const std::string& model_file) {
  const fs::path dir = fs::path(model_file).parent_path();
  return fs::exists(dir / "config.json") && fs::exists(dir / "metrics.jsonl") ? dir : fs::path();
}

json report_json(const ModelReport& r) {
  return {{"accuracy", r.accuracy},
          {"file_bytes", r.file_bytes},
          {"latency_b1_ms", r.latency_b1_ms},
          {"latency_batch_ms", r.latency_batch_ms}};
}

// Quantization-aware training of `prepared` on the --calib set (with its labels), optionally
// distilled from a teacher. Observers freeze for the second half: the ranges stop moving so
// that the last epochs adapt the weights to fixed quantization grids (torch's recipe).
void train_qat(quant::PreparedModel& prepared, data::DataLoader& loader, const QuantizeOptions& o,
               std::ostream& out) {
  std::optional<quant::Teacher> teacher;
  if (!o.teacher.empty()) {
    if (!fs::exists(o.teacher)) fail("--teacher " + o.teacher + ": no such file");
    try {
      teacher.emplace(nn::load_model(o.teacher).model);
    } catch (const Error& e) {
      fail(std::string("--teacher: ") + e.what());
    }
  }
  nn::SGD optimizer(prepared.parameters(), nn::SGDOptions{.lr = o.qat_lr, .momentum = 0.9});
  const int64_t total = o.qat_epochs * loader.num_batches();
  nn::CosineWithWarmup schedule(optimizer, 0, total);
  prepared.train();
  for (int64_t epoch = 0; epoch < o.qat_epochs; ++epoch) {
    if (o.qat_epochs > 1 && epoch == (o.qat_epochs + 1) / 2) prepared.enable_observers(false);
    double loss_sum = 0;
    int64_t batches = 0;
    for (data::Batch& batch : loader) {
      optimizer.zero_grad();
      Tensor logits = prepared(batch.data);
      Tensor loss = teacher ? quant::distillation_loss(
                                  logits, (*teacher)(batch.data), batch.target,
                                  quant::DistillationOptions{.temperature = o.temperature, .alpha = o.alpha})
                            : nn::functional::cross_entropy(logits, batch.target);
      loss.backward();
      optimizer.step();
      schedule.step();
      loss_sum += loss.item<double>();
      ++batches;
    }
    char line[128];
    std::snprintf(line, sizeof line, "quantize: QAT epoch %lld/%lld: train loss %.4f\n",
                  static_cast<long long>(epoch + 1), static_cast<long long>(o.qat_epochs),
                  loss_sum / std::max<int64_t>(1, batches));
    out << line << std::flush;
  }
  prepared.eval();
}

}  // namespace

QuantizeSummary run_quantize(const QuantizeOptions& o, std::ostream& out) {
  if (o.threads > 0) set_num_threads(o.threads);
  manual_seed(o.seed);
  if (fs::exists(o.out) && !o.force) fail("--out " + o.out + " exists; pass --force to replace it");
  if (!fs::exists(o.model)) fail("--model " + o.model + ": no such file");

  // ---- the float model and the data it takes ----
  nn::LoadedModel loaded;
  try {
    loaded = nn::load_model(o.model);
  } catch (const Error& e) {
    fail(std::string("--model: ") + e.what());
  }
  nn::Module& model = *loaded.model;
  model.eval();
  const data::TransformPtr transform = input_transform(loaded.metadata, out);
  std::shared_ptr<data::Hdf5ImageDataset> calib = open_images(o.calib, "--calib");
  const std::string test_path = o.test.empty() ? default_test_file(loaded.metadata) : o.test;
  if (test_path.empty())
    fail("no --test set given, and the model file does not name the --val set it was trained with");
  std::shared_ptr<data::Hdf5ImageDataset> test = open_images(test_path, "--test");
  for (const auto& [set, flag] : {std::pair{calib, "--calib"}, std::pair{test, "--test"}}) {
    // One example through the float model: a shape it does not take is an input error.
    try {
      NoGradGuard no_grad;
      data::SampleRng rng(0, 0, 0);
      model(transform->apply(set->get(0), rng).data.unsqueeze(0));
    } catch (const Error& e) {
      fail(std::string(flag) + " " + (set == calib ? o.calib : test_path) + " holds " + std::to_string(set->channels()) +
           "x" + std::to_string(set->height()) + "x" + std::to_string(set->width()) +
           " images, which the model does not take: " + e.what());
    }
  }
  auto loader_options = [&](bool shuffle) {
    return data::DataLoaderOptions().batch_size(o.batch).shuffle(shuffle).seed(o.seed).workers(2);
  };
  data::DataLoader test_loader(test, loader_options(false), transform);
  out << "quantize: " << o.model << " (" << model.type_name() << ", " << model.num_parameters()
      << " parameters); calibrating on " << o.calib << ", testing on " << test_path << "\n"
      << std::flush;

  QuantizeSummary summary;
  summary.test_examples = test->size();
  // A fixed test batch for the latency rows.
  Tensor timing_batch;
  for (data::Batch& batch : test_loader) {
    timing_batch = batch.data;
    break;
  }
  // Accuracy and latency are measured on `device`; calibration and QAT run on the CPU, so that the
  // INT8 model (and --out) is the same whichever device measures it.
  const Device device = measurement_device(o);
  std::shared_ptr<nn::Module> device_model = loaded.model;
  if (!device.is_cpu()) {
    device_model = nn::load_model(o.model).model;  // a copy for the device; `model` stays on the CPU
    device_model->eval();
    device_model->to(device);
    out << "quantize: measuring accuracy and latency on " << device << " ("
        << cuda::get_device_properties(device.index()).name << ")\n";
  }
  timing_batch = timing_batch.to(device);
  const Tensor single = timing_batch.slice(0, 0, 1).contiguous();
  nn::Module& float_model = *device_model;
  summary.f32.accuracy = accuracy(float_model, test_loader, device);
  summary.f32.file_bytes = static_cast<int64_t>(fs::file_size(o.model));
  summary.f32.latency_b1_ms = latency_ms([&] { float_model(single); }, device);
  summary.f32.latency_batch_ms = latency_ms([&] { float_model(timing_batch); }, device);

  // ---- post-training quantization ----
  quant::QConfig config{.activation_method = o.method,
                        .percentile = o.percentile,
                        .per_channel = o.per_channel,
                        .bits = o.bits};
  auto start = Clock::now();
  std::shared_ptr<quant::PreparedModel> prepared = quant::prepare(model, config);
  {
    data::DataLoader calib_loader(calib, loader_options(true), transform);
    NoGradGuard no_grad;
    int64_t seen = 0;
    for (data::Batch& batch : calib_loader) {
      if (seen++ == o.calib_batches) break;
      (*prepared)(batch.data);
    }
  }
  std::shared_ptr<quant::QuantizedModel> ptq = quant::convert(*prepared);
  std::shared_ptr<quant::QuantizedModel> written = ptq;  // what --out holds in the end
  summary.calibration_seconds = seconds_since(start);

  auto measure = [&](const quant::QuantizedModel& cpu_model, const fs::path& file) {
    const std::shared_ptr<quant::QuantizedModel> q = cpu_model.to(device);
    ModelReport r;
    r.accuracy = accuracy(*q, test_loader, device);
    r.file_bytes = static_cast<int64_t>(fs::file_size(file));
    r.latency_b1_ms = latency_ms([&] { (*q)(single); }, device);
    r.latency_batch_ms = latency_ms([&] { (*q)(timing_batch); }, device);
    return r;
  };
  std::map<std::string, std::string> metadata{{"loom.source_model", o.model}};
  for (const char* key : {nn::kInputNormalizationKey, nn::kTrainOptionsKey})
    if (loaded.metadata.count(key)) metadata[key] = loaded.metadata.at(key);
  ptq->save(o.out, metadata);
  summary.ptq = measure(*ptq, o.out);
  // What is in the file is what was measured: reload it and check it predicts the same.
  {
    NoGradGuard no_grad;
    auto reloaded = quant::QuantizedModel::load(o.out);
    const Tensor cpu_batch = timing_batch.to(kCPU);
    LOOM_CHECK(reloaded->forward(cpu_batch).ne(ptq->forward(cpu_batch)).sum().item<int64_t>() == 0,
               "quantize: the written INT8 model ", o.out, " does not reproduce the model in memory");
  }

  // ---- quantization-aware training ----
  if (o.qat_epochs > 0) {
    out << "quantize: PTQ INT8 accuracy " << 100 * summary.ptq.accuracy << "%; fine-tuning with QAT\n" << std::flush;
    quant::QConfig qat_config = config;
    // Fake-quant sees every training batch: a moving average follows the ranges as the
    // weights move (torch's default QAT observer), where a running min/max would only widen.
    qat_config.activation_method = "moving_average";
    qat_config.learnable_ranges = o.learnable_ranges;
    start = Clock::now();
    std::shared_ptr<quant::PreparedModel> qat = quant::prepare_qat(model, qat_config);
    data::DataLoader train_loader(calib, loader_options(true), transform);
    train_qat(*qat, train_loader, o, out);
    std::shared_ptr<quant::QuantizedModel> qat_model = quant::convert(*qat);
    summary.qat_seconds = seconds_since(start);
    metadata["loom.qat_epochs"] = std::to_string(o.qat_epochs);
    qat_model->save(o.out, metadata);  // QAT's model replaces PTQ's in --out
    written = qat_model;
    summary.qat = measure(*qat_model, o.out);
  }
  print_table(summary, o, out);
  out << "\nINT8 layers (" << (summary.qat ? "QAT" : "PTQ") << "):\n" << written->to_string();
  out << "quantize: wrote " << o.out << (summary.qat ? " (the QAT model)" : "") << "\n";
  json j{{"model", o.model},
         {"out", o.out},
         {"method", o.method},
         {"per_channel", o.per_channel},
         {"bits", o.bits},
         {"batch", o.batch},
         {"device", o.device},
         {"test_examples", summary.test_examples},
         {"f32", report_json(summary.f32)},
         {"ptq", report_json(summary.ptq)},
         {"calibration_batches", o.calib_batches},
         {"calibration_seconds", summary.calibration_seconds},
         {"layers", layers_json(*written)}};
  if (summary.qat) {
    j["qat"] = report_json(*summary.qat);
    j["qat_epochs"] = o.qat_epochs;
    j["qat_seconds"] = summary.qat_seconds;
    if (!o.teacher.empty()) j["teacher"] = o.teacher;
  }
  if (!o.json.empty()) nn::write_file_atomically(o.json, j.dump(2) + "\n");
  // A model from a train run: its report gets a quantization section.
  if (const fs::path run = run_dir_of(o.model); !run.empty()) {
    nn::write_file_atomically(run / train::kQuantizationFile, j.dump(2) + "\n");
    train::write_report(run);
    out << "quantize: added the results to " << (run / "report.html").string() << "\n";
  }
  return summary;
}

}  // namespace loom::quantize
