/*
 * predict: scores an HDF5 dataset with a model file, in batches, and writes the predictions to
 * an HDF5 file (docs/predict.md). The entry point only: the model comes from
 * quant/inference_model.h, the batches, the scoring and the file from data/batch_prediction.h
 * and data/prediction_file.h. Exit status: 0 done, 2 bad input (flags, files, shapes; nothing
 * was written and an existing --out is untouched), 1 a failure while predicting.
 */
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>

#include "core/cuda.h"
#include "core/error.h"
#include "core/parallel.h"
#include "data/batch_prediction.h"
#include "quant/inference_model.h"
#include "tools/common/error_exit.h"
#include "tools/common/format.h"
#include "tools/predict/options.h"

namespace {

using namespace loom;
using Clock = std::chrono::steady_clock;

// The progress bar: redrawn in place (at most 10 times a second) on a terminal, a plain line
// every tenth of the data otherwise.
class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : enabled_(enabled), interactive_(isatty(fileno(stdout)) != 0) {}
  void update(int64_t done, int64_t total) {
    if (!enabled_) return;
    const auto now = Clock::now();
    const double fraction = static_cast<double>(done) / static_cast<double>(total);
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0.0;
    const bool last = done == total;
    if (interactive_) {
      if (!last && now - last_draw_ < std::chrono::milliseconds(100)) return;
      last_draw_ = now;
      std::printf("\rpredict %s %3.0f%% %lld/%lld ETA %s %s samples/s\033[K%s",
                  tools::progress_bar(fraction).c_str(), 100 * fraction, static_cast<long long>(done),
                  static_cast<long long>(total),
                  tools::format_duration(rate > 0 ? static_cast<double>(total - done) / rate : 0).c_str(),
                  tools::format_rate(rate).c_str(), last ? "\n" : "");
    } else {
      const int tenth = static_cast<int>(10 * fraction);
      if (tenth == last_tenth_ && !last) return;
      last_tenth_ = tenth;
      std::printf("predict %3.0f%% %lld/%lld %s samples/s %s\n", 100 * fraction, static_cast<long long>(done),
                  static_cast<long long>(total), tools::format_rate(rate).c_str(),
                  tools::format_duration(elapsed).c_str());
    }
    std::fflush(stdout);
  }

 private:
  bool enabled_, interactive_;
  Clock::time_point start_ = Clock::now(), last_draw_ = Clock::now() - std::chrono::seconds(1);
  int last_tenth_ = -1;
};

// What `make` returns; its loom::Error with the flag in front, so that the message says which
// file of the command line it is about.
template <class Make>
auto flagged(const char* flag, Make&& make) {
  try {
    return make();
  } catch (const Error& e) {
    throw Error(std::string(flag) + ": " + e.what());
  }
}

Device device_of(const predict::PredictOptions& o) {
  if (o.device != "cuda") return kCPU;
  LOOM_CHECK(LOOM_WITH_CUDA,
             "--device cuda: this Loom was built without the CUDA backend (configure with "
             "-DLOOM_WITH_CUDA=ON, or EMULATED to run the CUDA kernels on the CPU)");
  LOOM_CHECK(cuda::is_available(),
             "--device cuda: no usable GPU (no CUDA driver or device); use --device cpu");
  return Device::cuda(0);
}

}  // namespace

int main(int argc, char** argv) {
  predict::PredictOptions o;
  try {
    predict::ParseOutcome parsed = predict::parse_options(argc, argv);
    if (!parsed.options) {
      std::cout << parsed.message;
      return parsed.exit_code;
    }
    o = *parsed.options;
  } catch (const std::exception& e) {
    return tools::error_exit("predict", e, 2);
  }
  // ---- everything the run needs, checked before any work: errors here are bad input ----
  std::optional<quant::InferenceModel> model;
  data::PredictionData input;
  std::unique_ptr<data::PredictionFile> out;
  Device device = kCPU;
  try {
    if (o.threads > 0) set_num_threads(o.threads);
    LOOM_CHECK(o.force || !std::filesystem::exists(o.out), "--out ", o.out,
               ": exists; pass --force to replace it");
    device = device_of(o);
    LOOM_CHECK(std::filesystem::exists(o.model), "--model ", o.model, ": no such file");
    model = flagged("--model", [&] { return quant::load_inference_model(o.model, device); });
    input = flagged("--data", [&] {
      return data::open_prediction_data(
          o.data, {.context = model->context, .vocab = model->vocab, .mean = model->mean, .std = model->std});
    });
    data::check_model_takes(model->forward, input, "--data " + o.data, device);
    out = std::make_unique<data::PredictionFile>(o.out, input.dataset->size(), o.logits, o.force);
  } catch (const std::exception& e) {
    return tools::error_exit("predict", e, 2);
  }
  // ---- the pass ----
  try {
    std::cout << "predict: " << o.model << " (" << model->description << ") on " << o.data << " ("
              << input.description << "), batches of " << o.batch_size << " on " << device << ", "
              << get_num_threads() << " threads, " << o.workers << " loader workers\n"
              << std::flush;
    data::DataLoader loader(input.dataset,
                            data::DataLoaderOptions()
                                .batch_size(o.batch_size)
                                .workers(o.workers)
                                .device(device)
                                .pin_memory(device.is_cuda()),
                            input.transform);
    ProgressBar bar(o.progress);
    const data::PredictionSummary s = data::predict_batches(
        model->forward, loader,
        {.out = out.get(), .on_batch = [&](int64_t done, int64_t total) { bar.update(done, total); }});
    out->finish({{"model", o.model},
                 {"data", o.data},
                 {"device", o.device},
                 {"model_kind", model->int8 ? "int8" : "f32"}},
                s.attributes());
    std::cout << "predict: " << s.to_string() << "\npredict: wrote " << o.out << "\n";
    return 0;
  } catch (const std::exception& e) {
    return tools::error_exit("predict", e, 1, "failed", o.progress);
  }
}
