/*
 * Batch prediction: a model run over a whole dataset in batches (tools/predict), collecting what
 * a user of the predictions wants: per example the predicted class and its probability (and the
 * logits) into a PredictionFile, and over the dataset the accuracy (labelled images) or the
 * perplexity (token windows, next-token targets).
 *
 *   data::PredictionData d = data::open_prediction_data("test.h5", {.mean = {0.286f}, .std = {0.353f}});
 *   data::DataLoader loader(d.dataset, DataLoaderOptions().batch_size(256).workers(2), d.transform);
 *   data::PredictionFile out("predictions.h5", d.dataset->size(), false, true);  // no logits; replace
 *   data::PredictionSummary s = data::predict_batches([&](const Tensor& x) { return model(x); }, loader,
 *                                                     {.out = &out});
 *   out.finish({}, {{"accuracy", s.accuracy()}});
 *
 * It lives in the data layer, the lowest one with the DataLoader and HDF5: the model comes in as
 * a function from a batch to its logits, so nothing here needs nn or quant, and a float Module,
 * a quant::QuantizedModel or any callable is scored the same way. Memory stays flat: one batch
 * in flight (plus the loader's prefetch), its rows written out before the next.
 */
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "data/data_loader.h"
#include "data/prediction_file.h"

namespace loom::data {

// A model as prediction sees it: inputs [B, ...] on the loader's device -> logits [B, ..., K].
using ModelFn = std::function<Tensor(const Tensor& inputs)>;

// What a model takes, for opening a dataset to score with it.
struct ModelInput {
  // > 0: a language model; the data is a token stream cut into windows of `context` tokens,
  // each with its next-token targets.
  int64_t context = 0;
  int64_t vocab = 0;  // a language model's vocabulary size; 0: unchecked
  // Images: the per-channel normalisation the model was trained with (tools/train records it in
  // the model file); empty: x / 255.
  std::vector<float> mean{}, std{};
};

// A dataset opened for prediction: examples as the model takes them, after `transform`.
struct PredictionData {
  std::shared_ptr<Dataset> dataset;
  TransformPtr transform;
  bool tokens = false;
  std::string description;  // "200 images 1x28x28, 10 classes" or "12 windows of 64 tokens (vocabulary 65)"
};

// Opens an HDF5 file of make_dataset's layout for a model that takes `input`. Throws loom::Error
// naming the file when it is missing, holds neither /images nor /tokens, holds tokens for an
// image model (or images for a language model), has fewer than context + 1 tokens, or has a
// vocabulary larger than the model's.
PredictionData open_prediction_data(const std::string& path, const ModelInput& input);

// Runs example 0 of `data` (as a batch of one, on `device`) through `model`. Throws loom::Error
// when the model does not take it, naming `data_name`, the example's shape and the model's own
// message: a model for 3x32x32 images given 1x28x28 ones fails here, before any work.
void check_model_takes(const ModelFn& model, const PredictionData& data, const std::string& data_name,
                       Device device = kCPU);

struct PredictionSummary {
  int64_t examples = 0;    // rows predicted
  int64_t scored = 0;      // predictions that had a target: one per image, `context` per window
  int64_t correct = 0;     // of those, predicted right (argmax == target)
  double nll_sum = 0;      // sum over them of -log softmax(logits)[target], accumulated in float64
  double seconds = 0;      // wall time of the pass
  bool sequences = false;  // a target per position (a language model's next tokens)
  bool has_targets() const { return scored > 0; }
  double accuracy() const;            // correct / scored
  double mean_cross_entropy() const;  // nll_sum / scored (nats)
  double perplexity() const;          // exp(mean_cross_entropy())
  double examples_per_second() const;
  // "10000 examples in 7.34 s: 1361.6 samples/s; accuracy 74.26% (7426 of 10000)", or with
  // "; perplexity 12.2242 (cross-entropy 2.5034 nats over 3008 tokens), next-token accuracy
  // 25.83%" for sequences, or nothing after the rate without targets.
  std::string to_string() const;
  // What a predictions file records of it: examples, samples_per_second, and with targets
  // accuracy, and for sequences perplexity and cross_entropy.
  std::map<std::string, double> attributes() const;
};

struct PredictionOptions {
  PredictionFile* out = nullptr;  // receives every batch's rows, when given
  // Called after every batch with the examples done so far and the total (a progress bar).
  std::function<void(int64_t done, int64_t total)> on_batch{};
};

// One pass over `loader` (from its current position to the end of the epoch) under no-grad:
// per batch, logits = model(batch.data); classes = argmax over the last dimension, probability =
// softmax at that class; against batch.target (when defined) the accuracy and cross-entropy.
// Throws what the model and the loader throw, and loom::Error when logits do not have the
// target's shape plus one class dimension.
PredictionSummary predict_batches(const ModelFn& model, DataLoader& loader,
                                  const PredictionOptions& options = {});

}  // namespace loom::data
