/* Batch prediction over a dataset (see batch_prediction.h). */
#include "data/batch_prediction.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "core/grad_mode.h"
#include "data/hdf5_image_dataset.h"
#include "data/hdf5_token_dataset.h"
#include "data/image_transforms.h"
#include "data/text_transforms.h"
#include "ops/ops.h"

namespace loom::data {

PredictionData open_prediction_data(const std::string& path, const ModelInput& input) {
  LOOM_CHECK(std::filesystem::exists(path), path, ": no such file (make one with make_dataset)");
  const auto file = Hdf5File::open(path);
  const bool tokens = file->has_dataset("tokens");
  LOOM_CHECK(tokens || file->has_dataset("images"), path,
             ": neither /images nor /tokens in it; is it a file from make_dataset?");
  const bool language_model = input.context > 0;
  LOOM_CHECK(tokens == language_model, path, " holds ", tokens ? "tokens" : "images", ", but the model is ",
             language_model ? "a language model (it takes tokens)" : "an image model (it takes images)");
  PredictionData d;
  d.tokens = tokens;
  if (tokens) {
    // Windows of T tokens every T tokens, each with the next T as targets: blocks of exactly
    // T + 1, so RandomTokenWindow has one place to start (0) and every window is fixed. The
    // last tokens that do not fill a window are not scored.
    const int64_t t = input.context;
    const int64_t n = file->describe("tokens").rows();
    LOOM_CHECK(n >= t + 1, path, ": ", n, " tokens, fewer than one window of the model's context ", t,
               " + 1");
    auto set = std::make_shared<Hdf5TokenDataset>(path, Hdf5TokenOptions{.block_size = t + 1, .stride = t});
    LOOM_CHECK(input.vocab == 0 || set->vocab_size() <= input.vocab, path, ": a vocabulary of ",
               set->vocab_size(), " tokens, but the model knows ", input.vocab,
               " (was it trained on another text?)");
    d.description = std::to_string(set->size()) + " windows of " + std::to_string(t) +
                    " tokens (vocabulary " + std::to_string(set->vocab_size()) + ")";
    d.dataset = set;
    d.transform = std::make_shared<RandomTokenWindow>(t);
    return d;
  }
  auto set = std::make_shared<Hdf5ImageDataset>(path);
  d.description = std::to_string(set->size()) + " images " + std::to_string(set->channels()) + "x" +
                  std::to_string(set->height()) + "x" + std::to_string(set->width()) + ", " +
                  std::to_string(set->num_classes()) + " classes";
  d.dataset = set;
  // Normalize takes uint8 [0, 255] to float (x / 255 - mean) / std; mean 0, std 1 is x / 255.
  d.transform = input.mean.empty()
                    ? std::make_shared<Normalize>(std::vector<float>{0.0f}, std::vector<float>{1.0f})
                    : std::make_shared<Normalize>(input.mean, input.std);
  return d;
}

void check_model_takes(const ModelFn& model, const PredictionData& data, const std::string& data_name,
                       Device device) {
  SampleRng rng(0, 0, 0);
  Example example = data.dataset->get(0);
  NoGradGuard no_grad;
  try {
    if (data.transform) example = data.transform->apply(example, rng);  // Normalize checks the channels
    model(example.data.unsqueeze(0).to(device));
  } catch (const Error& e) {
    std::ostringstream m;
    m << data_name << " holds examples of shape " << example.data.sizes() << " ("
      << (data.tokens ? "token windows" : "images") << "), which the model does not take: " << e.what();
    throw Error(m.str());
  }
}

double PredictionSummary::accuracy() const {
  return scored ? static_cast<double>(correct) / static_cast<double>(scored) : 0.0;
}
double PredictionSummary::mean_cross_entropy() const {
  return scored ? nll_sum / static_cast<double>(scored) : 0.0;
}
double PredictionSummary::perplexity() const {
  return std::exp(mean_cross_entropy());
}
double PredictionSummary::examples_per_second() const {
  return seconds > 0 ? static_cast<double>(examples) / seconds : 0.0;
}

std::string PredictionSummary::to_string() const {
  char line[320];
  int n = std::snprintf(line, sizeof line, "%lld examples in %.2f s: %.1f samples/s",
                        static_cast<long long>(examples), seconds, examples_per_second());
  const auto rest = [&] { return line + n; };
  const size_t left = sizeof line - static_cast<size_t>(n);
  if (has_targets() && sequences)
    std::snprintf(rest(), left,
                  "; perplexity %.4f (cross-entropy %.4f nats over %lld tokens), next-token accuracy %.2f%%",
                  perplexity(), mean_cross_entropy(), static_cast<long long>(scored), 100 * accuracy());
  else if (has_targets())
    std::snprintf(rest(), left, "; accuracy %.2f%% (%lld of %lld)", 100 * accuracy(),
                  static_cast<long long>(correct), static_cast<long long>(scored));
  return line;
}

std::map<std::string, double> PredictionSummary::attributes() const {
  std::map<std::string, double> a{{"examples", static_cast<double>(examples)},
                                  {"samples_per_second", examples_per_second()}};
  if (has_targets()) a["accuracy"] = accuracy();
  if (has_targets() && sequences) {
    a["perplexity"] = perplexity();
    a["cross_entropy"] = mean_cross_entropy();
  }
  return a;
}

PredictionSummary predict_batches(const ModelFn& model, DataLoader& loader,
                                  const PredictionOptions& options) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  NoGradGuard no_grad;
  PredictionSummary s;
  const int64_t total = loader.dataset().size();
  for (Batch& batch : loader) {
    const Tensor logits = model(batch.data).to(kFloat32);
    BatchPredictions p;
    p.classes = logits.argmax(-1);
    p.probabilities = logits.softmax(-1).gather(-1, p.classes.unsqueeze(-1)).squeeze(-1);
    p.indices = batch.indices;
    if (batch.target.defined()) {
      p.targets = batch.target.to(kInt64);
      std::vector<int64_t> expected = p.targets.sizes().vec();
      expected.push_back(logits.size(-1));
      if (logits.sizes() != IntArrayRef(expected)) {
        std::ostringstream m;
        m << "predict: the model's logits " << logits.sizes() << " do not fit targets " << p.targets.sizes()
          << " (expected the targets' shape plus one class dimension)";
        throw Error(m.str());
      }
      s.correct += p.classes.eq(p.targets).sum().item<int64_t>();
      s.scored += p.targets.numel();
      s.sequences = p.targets.dim() > 1;
      const Tensor log_p = logits.log_softmax(-1).gather(-1, p.targets.unsqueeze(-1));
      s.nll_sum -= log_p.to(kFloat64).sum().item<double>();
    }
    s.examples += batch.size();
    if (options.out) {
      p.logits = logits;
      options.out->append(p);
    }
    if (options.on_batch) options.on_batch(s.examples, total);
  }
  s.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return s;
}

}  // namespace loom::data
