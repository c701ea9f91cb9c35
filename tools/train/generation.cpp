/*
 * `train --generate`: text sampled from the latest checkpoint of a GPT run (see trainer.h).
 */
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/grad_mode.h"
#include "data/data.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "tools/train/run_dir.h"
#include "tools/train/trainer.h"
#include "tools/train/fail.h"

namespace loom::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The options of the GPT run in `dir` (its config.json) over `options`.
TrainOptions run_options(const std::string& dir, const TrainOptions& options, json& config) {
  fs::path config_path = fs::path(dir) / kConfigFile;
  std::ifstream in(config_path);
  if (!in) fail("--generate: no " + config_path.string() + "; pass the directory of a GPT run with --out");
  config = json::parse(in, nullptr, false);
  if (config.is_discarded() || config.value("model", "") != to_string(ModelKind::kGpt))
    fail("--generate: " + dir + " is not the run directory of a --model gpt run");
  TrainOptions o = options;
  o.data = config.value("data", "");
  o.context = config.value("context", o.context);
  o.layers = config.value("layers", o.layers);
  o.heads = config.value("heads", o.heads);
  o.d_model = config.value("d-model", o.d_model);
  o.gelu = config.value("gelu", std::string("none"));
  return o;
}

// The run's latest weights: model.safetensors for a job of several ranks (its checkpoints hold
// one piece per rank; the whole model is written when the run ends), else the latest checkpoint.
void load_latest_weights(nn::GPT& model, const std::string& dir, const json& config) {
  if (config.value("dp", 1) * config.value("tp", 1) * config.value("pp", 1) > 1) {
    fs::path file = fs::path(dir) / kModelFile;
    if (!fs::exists(file)) fail("--generate: " + dir + " holds no " + kModelFile + " yet (the run has not ended)");
    model.load_state_dict(nn::load_safetensors(file).tensors);
  } else {
    nn::CheckpointManager checkpoints(dir);
    std::optional<nn::Checkpoint> latest = checkpoints.load_latest();
    if (!latest) fail("--generate: " + dir + " holds no checkpoint yet");
    model.load_state_dict(latest->sections.at("model"));
  }
}

// The prompt as token ids: the longest vocabulary entry at each position (characters for a
// character-level corpus).
std::vector<int64_t> encode_prompt(const std::string& prompt, const std::vector<std::string>& vocab) {
  std::vector<int64_t> ids;
  for (size_t pos = 0; pos < prompt.size();) {
    size_t best_len = 0;
    int64_t best = -1;
    for (size_t v = 0; v < vocab.size(); ++v)
      if (vocab[v].size() > best_len && prompt.compare(pos, vocab[v].size(), vocab[v]) == 0) {
        best_len = vocab[v].size();
        best = static_cast<int64_t>(v);
      }
    if (best < 0) fail("--prompt: '" + prompt.substr(pos, 1) + "' is not in the corpus's vocabulary");
    ids.push_back(best);
    pos += best_len;
  }
  if (ids.empty()) fail("--prompt must not be empty");
  return ids;
}

}  // namespace

void run_generation(const TrainOptions& options, std::ostream& out) {
  try {
    const std::string dir = options.resume.empty() ? options.out : options.resume;
    json config;
    const TrainOptions o = run_options(dir, options, config);
    data::Hdf5TokenDataset corpus(o.data,
                                  data::Hdf5TokenOptions{.block_size = 2});  // only its vocabulary is used
    const std::vector<std::string>& vocab = corpus.vocab();
    if (vocab.empty()) fail("--generate: " + o.data + " has no vocab attribute, so text cannot be encoded");
    nn::GPT model(nn::GPTConfig{.vocab_size = corpus.vocab_size(),
                                .context = o.context,
                                .n_layers = o.layers,
                                .n_heads = o.heads,
                                .d_model = o.d_model,
                                .gelu_approximate = o.gelu});
    load_latest_weights(model, dir, config);
    model.eval();
    std::vector<int64_t> ids = encode_prompt(options.prompt, vocab);
    manual_seed(options.seed);
    NoGradGuard no_grad;
    Tensor idx = tensor(ids, {1, static_cast<int64_t>(ids.size())});
    Tensor result = model.generate(idx, options.tokens, options.temperature);
    out << corpus.decode(result.select(0, 0)) << "\n";
  } catch (const InputError&) {
    throw;
  } catch (const Error& e) {
    throw InputError(e.what());
  }
}

}  // namespace loom::train
