/*
 * tools/train --windows: how a GPT's training windows are cut from the text. "blocks" (the
 * default) visits every context-long block once per epoch; "random" draws --windows-per-epoch
 * windows starting anywhere, as nanoGPT does, so that a small text gives as long an epoch as
 * asked. The options, their errors, the epoch lengths they give and their reproducibility.
 */
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/dataset_writer.h"
#include "data/text_corpus.h"
#include "nn/serialize/safetensors.h"
#include "ops/ops.h"
#include "tools/train/options.h"
#include "tools/train/trainer.h"
#include "tests/tools/train_options_test_util.h"

namespace loom::test {
namespace {

namespace fs = std::filesystem;
using train::TrainOptions;

TrainOptions parse(std::initializer_list<const char*> args) { return parse_train(args); }
std::string parse_error(std::initializer_list<const char*> args) { return train_parse_error(args); }

// 600 characters of text, 13 distinct.
fs::path tiny_text(const fs::path& dir) {
  std::string corpus;
  while (corpus.size() < 600) corpus += "abracadabra, said the cat. ";
  corpus.resize(600);
  data::CharTokens chars = data::tokenize_chars(corpus, "test corpus");
  data::DatasetInfo info;
  info.name = "cat";
  info.vocab = chars.vocab;
  fs::path path = dir / "text.h5";
  data::write_token_dataset(path.string(), from_blob(chars.tokens.data(), {600}, kInt32), info,
                            {.chunk_rows = 128, .deflate_level = 1});
  return path;
}

struct TextRun {
  train::TrainSummary summary;
  nn::StateDict model;
};

// A one-block GPT with context 8, batch 10, two epochs.
TextRun run_gpt(const fs::path& dir, const std::string& name, std::vector<const char*> extra) {
  const std::string data = tiny_text(dir).string(), out = (dir / name).string();
  std::vector<const char*> args{"--model", "gpt", "--layers", "1", "--heads", "1", "--d-model", "8", "--context",
                                "8", "--batch", "10", "--epochs", "2", "--workers", "0", "--optimizer", "adamw",
                                "--lr", "0.01", "--data", data.c_str(), "--out", out.c_str()};
  args.insert(args.end(), extra.begin(), extra.end());
  std::ostringstream log;
  TextRun r;
  r.summary = train::run_training(parse_train(args), log, /*interactive=*/false);
  r.model = nn::load_safetensors(fs::path(out) / "model.safetensors").tensors;
  return r;
}

bool same_tensors(const nn::StateDict& a, const nn::StateDict& b) {
  if (a.keys() != b.keys()) return false;
  for (const auto& [name, t] : a) {
    Tensor tc = t.contiguous(), uc = b.at(name).contiguous();
    if (tc.nbytes() != uc.nbytes() || std::memcmp(tc.data_ptr(), uc.data_ptr(), tc.nbytes()) != 0) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("train options: --windows and --windows-per-epoch") {
  TrainOptions blocks = parse({"--data", "x.h5", "--out", "r", "--model", "gpt"});
  CHECK(blocks.windows == train::TextWindows::kBlocks);
  CHECK_FALSE(train::to_json(blocks).contains("windows"));  // config.json of a default run is unchanged

  TrainOptions random =
      parse({"--data", "x.h5", "--out", "r", "--model", "gpt", "--windows", "random", "--windows-per-epoch", "500"});
  CHECK(random.windows == train::TextWindows::kRandom);
  CHECK(random.windows_per_epoch == 500);
  CHECK(train::to_json(random).at("windows") == "random");
  CHECK(train::to_json(random).at("windows-per-epoch") == 500);

  CHECK(parse_error({"--data", "x.h5", "--out", "r", "--model", "gpt", "--windows", "sliding"}).find("--windows") !=
        std::string::npos);
  CHECK(parse_error({"--data", "x.h5", "--out", "r", "--windows", "random"}).find("needs --model gpt") !=
        std::string::npos);
  CHECK(parse_error({"--data", "x.h5", "--out", "r", "--model", "gpt", "--windows-per-epoch", "10"})
            .find("needs --windows random") != std::string::npos);
  CHECK(parse_error({"--data", "x.h5", "--out", "r", "--model", "gpt", "--windows", "random", "--windows-per-epoch",
                     "-1"})
            .find("--windows-per-epoch") != std::string::npos);
}

TEST_CASE("train --windows random: an epoch is as many windows as asked, reproducible from the seed") {
  const fs::path dir = fs::temp_directory_path() / ("loom_text_windows_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);

  // blocks: 600 tokens in blocks of 16 every 8 give 74 examples, 8 batches of 10 per epoch.
  const TextRun blocks = run_gpt(dir, "blocks", {});
  CHECK(blocks.summary.steps == 16);
  CHECK(blocks.summary.epochs == 2);
  // random, default length: as many windows as blocks of 8 tokens, 600 / 8 = 75: 8 batches.
  const TextRun random_default = run_gpt(dir, "random_default", {"--windows", "random"});
  CHECK(random_default.summary.steps == 16);
  // random, 40 windows per epoch: 4 batches; 250: 25, longer than the blocks' epoch.
  const TextRun random40 = run_gpt(dir, "random40", {"--windows", "random", "--windows-per-epoch", "40"});
  CHECK(random40.summary.steps == 8);
  const TextRun random250 = run_gpt(dir, "random250", {"--windows", "random", "--windows-per-epoch", "250"});
  CHECK(random250.summary.steps == 50);

  // The same seed trains the same model; another seed or the other window scheme another.
  const TextRun again = run_gpt(dir, "random40_again", {"--windows", "random", "--windows-per-epoch", "40"});
  CHECK(same_tensors(random40.model, again.model));
  const TextRun seed2 =
      run_gpt(dir, "random40_seed2", {"--windows", "random", "--windows-per-epoch", "40", "--seed", "2"});
  CHECK_FALSE(same_tensors(random40.model, seed2.model));
  CHECK_FALSE(same_tensors(blocks.model, random_default.model));
  fs::remove_all(dir);
}
}  // namespace loom::test
